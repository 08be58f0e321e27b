"""Wire the optional machinery (approvals, the capability registry) into a gateway and the CLI.

Kept in one place so start-up reads in order and each piece stays importable and testable on
its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.daemon import Gateway


def install(gateway: Gateway) -> None:
    """Called once by `Gateway.start`, after the store and the core's parts exist and before adapters start."""
    from capabilities import approval_gate, catalog
    from capabilities.registry import build_for_turn, load_builtin

    from capabilities.context import ContextLibrary
    from capabilities.knowledge_index import KnowledgeIndexer

    from gateway.store.conversation_search import ConversationSearch
    from gateway.store.knowledge import KnowledgeStore

    load_builtin()
    # Collaborators built once per daemon, handed to the capabilities that use them.
    indexer = KnowledgeIndexer(lambda: gateway.config, KnowledgeStore(gateway.store.sessions, gateway.clock))
    gateway.extensions.append(indexer)  # started and stopped with the gateway
    parts = {
        "context": ContextLibrary(lambda: gateway.config),
        "conversation_search": ConversationSearch(gateway.store.sessions),
        "knowledge": indexer,
    }
    # The gate first: its wrapper is outermost, so it sees the names the model calls.
    gateway.runner.capability_builders.append(approval_gate.build_for_turn)
    gateway.runner.capability_builders.append(lambda turn: build_for_turn(turn, parts))
    gateway.extra_routes.extend(catalog.http_routes(lambda: gateway.config.gateway.scopes.granted))
    # web_search's HTTP clients are built once and shared by every run; the gateway closes them at stop.
    from capabilities import web_search

    gateway.extensions.append(web_search.CLIENTS)

    # MCP servers: after the registry, so a server's tool never takes a capability tool's name.
    from capabilities import mcp_servers

    from gateway.mcp.pool import McpPool

    pool = McpPool(gateway)
    gateway.mcp = pool
    gateway.extensions.append(pool)
    gateway.runner.turn_preparers.append(pool.prepare)
    gateway.runner.capability_builders.append(mcp_servers.builder(pool))

    # Delegation builds each delegate's agent the way the runner builds any agent, from a Turn of its own.
    # Background delegations (mode async) run here, in this process, and report back through the queue.
    from capabilities.subagents import Delegator

    from gateway.runs.background import BackgroundRuns

    background = BackgroundRuns(gateway.store, lambda: gateway.config.gateway.limits, gateway.scheduler.wake,
                                gateway.events, sweep_every=min(20.0, gateway.store.lease_seconds / 3))
    gateway.extensions.append(background)  # started after the MCP pool, so stopped before it
    gateway.stops.background = background
    delegator = Delegator(lambda: gateway.config.agents, gateway.runner.build_agent, gateway.runner.turn_preparers,
                          background)
    parts["subagents"] = delegator

    # Handoffs: wait: true runs the target as a sync delegate runs; wait: false starts a conversation on it.
    from capabilities.handoffs import Switchboard

    from gateway.runs.handoffs import HandoffStarter

    parts["handoffs"] = Switchboard(lambda: gateway.config.agents, delegator, HandoffStarter(gateway).start)
    from gateway.runs.scheduled import Schedules  # scheduled tasks fire from their own sweep, through the queue

    gateway.extensions.append(parts.setdefault("schedules", Schedules.of(gateway)))


def register_checks() -> None:
    """Add config checks owned by other packages (the capability registry) to the loader."""
    from bindings.loader import add_check
    from capabilities import context, handoffs, knowledge, mcp_servers, sandbox, skills, subagents
    from capabilities.registry import validate_config

    add_check(validate_config)
    add_check(context.validate_config)
    add_check(knowledge.validate_config)
    add_check(mcp_servers.validate_config)
    add_check(skills.validate_config)
    add_check(sandbox.validate_config)
    add_check(subagents.validate_config)
    add_check(handoffs.validate_config)


def online_problems(config: Any) -> list[Any]:
    """`check --online`: what only connecting can tell (MCP servers unreachable, `tools:` naming nothing)."""
    from gateway.mcp.cli import online_problems as mcp_problems

    return asyncio.run(mcp_problems(config))


def add_commands(sub: argparse._SubParsersAction[Any], load: Callable[[argparse.Namespace], Any]) -> None:
    """Add sub-commands owned by other modules (approvals, memory, pairing, people, MCP)."""
    from gateway.mcp import cli as mcp_cli
    from gateway.ops import people
    from gateway.approvals.service import add_cli
    from gateway.inbound.pairing import add_cli as add_pairing_cli

    add_cli(sub, load)
    add_pairing_cli(sub, load)
    mcp_cli.add_cli(sub, load)
    people.add_cli(sub, load)
    from gateway.ops import schedules

    schedules.add_cli(sub, load)  # `schedules list | pause | resume | cancel`
    from gateway.store import run_outcomes

    run_outcomes.add_cli(sub, load)  # `runs list --status guardrail_blocked`
    from gateway.ops import db_cli

    db_cli.add_cli(sub, load)  # `db stats | prune | backup | restore | current | upgrade`
    from gateway.ops import doctor

    doctor.add_cli(sub, load)  # `doctor [--online]`

    def capabilities(args: argparse.Namespace) -> int:
        from bindings.loader import ConfigError, config_directory, load_gateway_config
        from capabilities import catalog

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

    p = sub.add_parser("capabilities", help="print the capability catalog (what an agent file can name)")
    p.add_argument("--json", action="store_true", help="as JSON, config schemas included")
    p.add_argument("--config", help="config directory whose gateway.yaml grants the scopes (default ./config)")
    p.set_defaults(fn=capabilities)

    def memory_command(args: argparse.Namespace) -> int:
        from gateway.runs.memory import admin

        config = load(args)
        if config is None:
            return 1
        code, text = asyncio.run(admin(config.gateway.database, args.action, args.person, actor=args.actor,
                                       reason=args.reason))
        print(text, file=sys.stdout if code == 0 else sys.stderr)
        return code

    p = sub.add_parser("memory", help="read or erase what agents keep about a person (audited)")
    p.add_argument("action", choices=["show", "erase"])
    p.add_argument("--person", required=True, help="a person id, or platform:workspace:account (e.g. slack:T01:U02)")
    p.add_argument("--reason", default="", help="why (required for show; recorded in the audit log)")
    p.add_argument("--actor", default=os.environ.get("USER") or "unknown", help="who is asking (default $USER)")
    p.add_argument("--config", help="config directory (default ./config or $AGENT_GATEWAY_CONFIG)")
    p.set_defaults(fn=memory_command)
