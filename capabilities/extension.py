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
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.extensions import Assembly, Extension

if TYPE_CHECKING:
    import asyncio

    from bindings.loader import ExtraCheck, LoadedConfig
    from gateway.ops.subcommand import Load
    from gateway.runs.turn import Turn

log = logging.getLogger("capabilities.extension")
P = TypeVar("P")


class CapabilitiesExtension(Extension):
    def install(self, assembly: Assembly) -> None:
        from . import approval_gate, catalog
        from .audio_clients import AudioClients
        from .registry import LoadedCapabilities, SharedBuilds, build_for_turn, listener_for

        # Collaborators kept for the daemon's life, handed to the capabilities that use them. Each is built
        # (its module imported) when a run first asks for it: a config that names no context, knowledge,
        # delegation or handoffs never imports them (bench/README.md, "Start-up and memory").
        parts = Parts({
            "context": lambda: _context_library(assembly),
            "conversation_search": lambda: _conversation_search(assembly),
            "knowledge": lambda: _indexer(assembly),
            "subagents": lambda: _delegator(assembly),
            "handoffs": lambda: _switchboard(assembly, parts),
            "schedules": lambda: assembly.schedules,
        })
        # One OpenAI-compatible audio client per provider, shared by every run (closed at stop).
        audio = parts.put("audio", AudioClients(lambda: assembly.config().gateway.providers))
        # The indexer is started and stopped with the gateway: now when the config has collections, else
        # when a reload first configures one.
        if _configures_collections(assembly.config()):
            assembly.parts.append(parts["knowledge"])
        else:
            assembly.parts.append(_IndexerOnceConfigured(assembly, lambda: parts["knowledge"]))
        assembly.parts.append(audio)
        # The gate around every call of every run, first (outermost): outside every run's capability (these
        # builders' ones, a caller's), so it sees the names the model calls. It reads the Turn from the deps.
        assembly.tool_wrappers.insert(0, approval_gate.gate)
        # What holds nothing of a run (`CapabilityDecl.shared`) is built once per agent and binding, for the
        # runner's shared Agent: a run then brings only what is its own (bench/README.md, Round 12).
        shared = SharedBuilds()
        assembly.capability_builders.append(lambda turn: build_for_turn(turn, parts, shared))
        assembly.listeners.append(lambda turn: listener_for(turn, parts))
        assembly.routes.extend(catalog.http_routes(lambda: assembly.config().gateway.scopes.granted))
        # What loaded capabilities hold for the daemon's life (web_search's HTTP clients), closed at stop.
        assembly.parts.append(LoadedCapabilities())
        # MCP servers: after the registry, so a server's tool never takes a capability tool's name.
        assembly.capability_builders.append(_mcp_tools(assembly))
        assembly.warm_ups.append(_import_runtimes)

    def checks(self) -> Sequence[ExtraCheck]:
        from .registry import validate_config

        return (validate_config, *_CHECKS_WHEN_NAMED)


class Parts(Mapping[str, Any]):
    """The daemon-lifetime collaborators by capability id (`BuildContext.parts`), each built by its factory
    the first time it is asked for, then kept. Only runs on the event loop ask, so no lock."""

    def __init__(self, factories: dict[str, Callable[[], Any]]) -> None:
        self._factories = factories
        self._built: dict[str, Any] = {}

    def put(self, name: str, part: P) -> P:
        """`part`, built already, kept under `name`."""
        self._factories[name] = lambda: part
        self._built[name] = part
        return part

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = self._factories[name]()  # KeyError for a name nobody wired: Mapping.get's None
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)


def _import_runtimes(config: LoadedConfig) -> None:
    """What a first run would import for the capabilities loaded (the config's): their runtime modules
    (`CapabilityDecl.runtime`) and the registry's wrapper. In the warm-up's thread, after READY."""
    from .registry import REGISTRY

    importlib.import_module(f"{__package__}.bound")
    for decl in list(REGISTRY.values()):
        if decl.runtime is not None:
            importlib.import_module(decl.runtime)


def _context_library(assembly: Assembly) -> Any:
    from .context import ContextLibrary

    return ContextLibrary(assembly.config)


def _conversation_search(assembly: Assembly) -> Any:
    from gateway.store.conversation_search import ConversationSearch

    # A channel thread counts while its person is still in the channel, confirmed against the platform.
    return ConversationSearch(assembly.store.sessions, assembly.membership.counts)


def _indexer(assembly: Assembly) -> Any:
    from gateway.store.knowledge import KnowledgeStore

    from .knowledge_index import KnowledgeIndexer

    return KnowledgeIndexer(assembly.config, KnowledgeStore(assembly.store.sessions, assembly.clock))


def _delegator(assembly: Assembly) -> Any:
    from .subagents import Delegator

    # Delegation builds each delegate's agent the way the runner builds any agent, from a Turn of its own.
    # Background delegations (mode async) run in this process and report back through the queue.
    return Delegator(lambda: assembly.config().agents, assembly.build_agent, assembly.turn_preparers,
                     assembly.background)


def _switchboard(assembly: Assembly, parts: Mapping[str, Any]) -> Any:
    from .handoffs import Switchboard

    # wait: true runs the target as a sync delegate runs; wait: false starts a conversation on it.
    return Switchboard(lambda: assembly.config().agents, parts["subagents"], assembly.start_handoff)


def _configures_collections(config: LoadedConfig) -> bool:
    return bool(config.gateway.knowledge.collections)


class _IndexerOnceConfigured:
    """Starts the knowledge indexer when a reload first configures a collection, for a gateway that started
    with none. Told by the reload (`reloaded`, from `Gateway.apply`), so until then it holds no task and sets
    no timer (it used to look every second: the idle loop's one wake-up besides the beat). Stops the indexer
    with the gateway and hands it every later reload."""

    def __init__(self, assembly: Assembly, indexer: Callable[[], Any]) -> None:
        self._assembly, self._indexer = assembly, indexer
        self._task: asyncio.Task[None] | None = None  # the forgetting at start, then the indexer's start
        self.started: Any = None  # the indexer, once a reload configured a collection

    async def start(self) -> None:
        import asyncio  # where a loop runs: the CLI imports this module too

        self._task = asyncio.create_task(self._forget_all(), name="knowledge:forget")

    def reloaded(self, config: LoadedConfig) -> None:
        import asyncio

        if self.started is not None:
            self.started.reloaded(config)
        elif _configures_collections(config):
            self.started = self._indexer()  # before it starts: a stop from now on stops it
            self._task = asyncio.create_task(self._start(self._task, self.started), name="knowledge:start")

    async def _start(self, forgetting: asyncio.Task[None] | None, indexer: Any) -> None:
        if forgetting is not None:
            await forgetting  # first: the indexer's own first pass then forgets and indexes by the new config
        await indexer.start()

    async def _forget_all(self) -> None:
        """What the indexer does at start for a config with no collection: drop the chunks of those the
        config no longer names, so a collection removed from the config is not kept in the database."""
        from gateway.store.knowledge import KnowledgeStore

        try:
            await KnowledgeStore(self._assembly.store.sessions, self._assembly.clock).forget([])
        except Exception:  # the indexer, once started, forgets them too
            log.exception("dropping the knowledge collections no longer configured")

    async def stop(self) -> None:
        from gateway.tasks import cancel_and_wait

        await cancel_and_wait(self._task)
        self._task = None
        if self.started is not None:
            await self.started.stop()
            self.started = None


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
# pydantic-ai-skills package), sandbox's (RE2), the MCP servers' modules, and context's, knowledge's,
# delegation's and handoffs' cost a daemon that binds none of them megabytes and tens of milliseconds at
# every start, and every admin command that loads the config (bench/README.md, "Start-up and memory").
# Each predicate is exactly what that check reads: nothing else, nothing to report.


def _names(capability_id: str) -> Callable[[LoadedConfig], bool]:
    def named(config: LoadedConfig) -> bool:
        return any(e.id == capability_id for agent in config.agents.values() for e in agent.capabilities)
    return named


def _names_mcp_servers(config: LoadedConfig) -> bool:
    return any(agent.mcp_servers for agent in config.agents.values())


def _knowledge_read(config: LoadedConfig) -> bool:
    """knowledge's check reads gateway.yaml's collections (their folders) besides its entries."""
    return _configures_collections(config) or _names("knowledge")(config)


def _delegation_read(config: LoadedConfig) -> bool:
    """subagents' check reads every agent's `subagents:` (pinned delegates) besides its entries."""
    return any(agent.subagents for agent in config.agents.values()) or _names("subagents")(config)


def _handoffs_read(config: LoadedConfig) -> bool:
    """handoffs' check reads every agent's `handoffs:` (a list, or team): true, the default, says nothing."""
    return any(agent.handoffs is not True for agent in config.agents.values()) or _names("handoffs")(config)


def _when(applies: Callable[[LoadedConfig], bool], module: str) -> ExtraCheck:
    """`capabilities.<module>.validate_config`, imported and run only for a config `applies` to."""
    def check(config: LoadedConfig, report: Callable[..., None]) -> None:
        if applies(config):
            importlib.import_module(f"{__package__}.{module}").validate_config(config, report)
    return check


# Built once: the loader keeps each check once (by identity), and checks are registered at every load.
# In the order they ran before they were gated (the order problems are reported in).
_CHECKS_WHEN_NAMED = (_when(_names("context"), "context"), _when(_knowledge_read, "knowledge"),
                      _when(_names_mcp_servers, "mcp_servers"), _when(_names("skills"), "skills"),
                      _when(_names("sandbox"), "sandbox"), _when(_names("audio"), "audio_clients"),
                      _when(_delegation_read, "subagents"), _when(_handoffs_read, "handoffs"))


def _mcp_tools(assembly: Assembly) -> Callable[[Turn], list[Any]]:
    """The MCP servers' capability builder, imported with the first turn of an agent that has any."""
    offers: Any = None  # mcp_servers.Offers over the daemon's pool, made with that first turn

    def build(turn: Turn) -> list[Any]:
        nonlocal offers
        if not turn.agent.mcp_servers:
            return []
        from . import mcp_servers

        if offers is None:
            offers = mcp_servers.Offers(mcp_servers.ResourceReaders(assembly.mcp))
        return mcp_servers.build_for_turn(offers, turn)
    return build


EXTENSION = CapabilitiesExtension()
