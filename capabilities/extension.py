"""The capabilities' side of the gateway: how the registry wires itself into the daemon and the CLI.

Found by the core through the entry point `capabilities` in group `agent_gateway.extensions`
(pyproject.toml), and its command through `capabilities` in group `agent_gateway.commands`, so the
core never imports this package; the capabilities themselves are found by id in group
`agent_gateway.capabilities` when a config names them (`registry.decl_for`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gateway.extensions import Assembly, Extension

if TYPE_CHECKING:
    from bindings.loader import ExtraCheck, LoadedConfig
    from gateway.ops.subcommand import Load
    from gateway.runs.turn import Turn


class CapabilitiesExtension(Extension):
    def install(self, assembly: Assembly) -> None:
        from gateway.store.conversation_search import ConversationSearch
        from gateway.store.knowledge import KnowledgeStore

        from . import approval_gate, catalog
        from .context import ContextLibrary
        from .handoffs import Switchboard
        from .knowledge_index import KnowledgeIndexer
        from .audio_clients import AudioClients
        from .registry import LoadedCapabilities, build_for_turn, listener_for
        from .subagents import Delegator

        # Collaborators built once per daemon, handed to the capabilities that use them.
        indexer = KnowledgeIndexer(assembly.config, KnowledgeStore(assembly.store.sessions, assembly.clock))
        assembly.parts.append(indexer)  # started and stopped with the gateway
        parts: dict[str, Any] = {
            "context": ContextLibrary(assembly.config),
            # A channel thread counts while its person is still in the channel, confirmed against the platform.
            "conversation_search": ConversationSearch(assembly.store.sessions, assembly.membership.counts),
            "knowledge": indexer,
            # One OpenAI-compatible audio client per provider, shared by every run (closed at stop).
            "audio": AudioClients(lambda: assembly.config().gateway.providers),
        }
        assembly.parts.append(parts["audio"])
        # The gate first: its wrapper is outermost, so it sees the names the model calls.
        assembly.capability_builders.append(approval_gate.build_for_turn)
        assembly.capability_builders.append(lambda turn: build_for_turn(turn, parts))
        assembly.listeners.append(lambda turn: listener_for(turn, parts))
        assembly.routes.extend(catalog.http_routes(lambda: assembly.config().gateway.scopes.granted))
        # What loaded capabilities hold for the daemon's life (web_search's HTTP clients), closed at stop.
        assembly.parts.append(LoadedCapabilities())
        # MCP servers: after the registry, so a server's tool never takes a capability tool's name.
        assembly.capability_builders.append(_mcp_tools(assembly))
        # Delegation builds each delegate's agent the way the runner builds any agent, from a Turn of its
        # own. Background delegations (mode async) run in this process and report back through the queue.
        delegator = Delegator(lambda: assembly.config().agents, assembly.build_agent, assembly.turn_preparers,
                              assembly.background)
        parts["subagents"] = delegator
        # Handoffs: wait: true runs the target as a sync delegate runs; wait: false starts a conversation on it.
        parts["handoffs"] = Switchboard(lambda: assembly.config().agents, delegator, assembly.start_handoff)
        parts["schedules"] = assembly.schedules

    def checks(self) -> Sequence[ExtraCheck]:
        from . import context, handoffs, knowledge, subagents
        from .registry import validate_config

        return (validate_config, context.validate_config, knowledge.validate_config, *_CHECKS_WHEN_NAMED,
                subagents.validate_config, handoffs.validate_config)


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """print the capability catalog (what an agent file can name)"""
    # That first line is this command's line in `agent-gateway --help` (group agent_gateway.commands).
    def capabilities(args: argparse.Namespace) -> int:
        from bindings.loader import ConfigError, config_directory, load_gateway_config

        from . import catalog

        try:  # the scopes gateway.yaml grants, even when an agent file is refused for one
            granted = load_gateway_config(config_directory(args.config)).scopes.granted
        except ConfigError as e:
            print(e, file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(catalog.as_json(granted), indent=2))
        else:
            print(catalog.render_text(granted), end="")
        return 0

    p.add_argument("--json", action="store_true", help="as JSON, config schemas included")
    p.add_argument("--config", help="config directory whose gateway.yaml grants the scopes (default ./config)")
    p.set_defaults(fn=capabilities)


# A capability's module is imported once a config names it, its check included: skills' (the
# pydantic-ai-skills package), sandbox's (RE2) and the MCP servers' modules cost a daemon that
# binds none of them megabytes and tens of milliseconds at every start (bench/README.md,
# "Start-up and memory"). Each predicate is exactly what that check reads: nothing else, nothing to report.


def _names(capability_id: str) -> Callable[[LoadedConfig], bool]:
    def named(config: LoadedConfig) -> bool:
        return any(e.id == capability_id for agent in config.agents.values() for e in agent.capabilities)
    return named


def _names_mcp_servers(config: LoadedConfig) -> bool:
    return any(agent.mcp_servers for agent in config.agents.values())


def _when(applies: Callable[[LoadedConfig], bool], module: str) -> ExtraCheck:
    """`capabilities.<module>.validate_config`, imported and run only for a config `applies` to."""
    def check(config: LoadedConfig, report: Callable[..., None]) -> None:
        if applies(config):
            importlib.import_module(f"{__package__}.{module}").validate_config(config, report)
    return check


# Built once: the loader keeps each check once (by identity), and checks are registered at every load.
_CHECKS_WHEN_NAMED = (_when(_names_mcp_servers, "mcp_servers"), _when(_names("skills"), "skills"),
                      _when(_names("sandbox"), "sandbox"), _when(_names("audio"), "audio_clients"))


def _mcp_tools(assembly: Assembly) -> Callable[[Turn], list[Any]]:
    """The MCP servers' capability builder, imported with the first turn of an agent that has any."""
    readers: Any = None  # mcp_servers.ResourceReaders over the daemon's pool, made with that first turn

    def build(turn: Turn) -> list[Any]:
        nonlocal readers
        if not turn.agent.mcp_servers:
            return []
        from . import mcp_servers

        if readers is None:
            readers = mcp_servers.ResourceReaders(assembly.mcp)
        return mcp_servers.build_for_turn(readers, turn)
    return build


EXTENSION = CapabilitiesExtension()
