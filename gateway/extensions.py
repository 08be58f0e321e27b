"""How the core finds what is plugged into it, by name, without importing it: entry points.

Four groups, declared in pyproject.toml (`[project.entry-points."<group>"]`) and read from the
installed distributions' metadata, the way pytest finds its plugins:

- `agent_gateway.adapters`: a platform name (a binding's `platform:`) → its adapter class;
  loaded when a binding names the platform (`gateway.adapter_registry`).
- `agent_gateway.capabilities`: a capability id (an agent file's `capabilities: - id:`) → the
  module that declares it; loaded when a config names it (`capabilities.registry`).
- `agent_gateway.extensions`: a package that wires itself into the daemon (the capability
  registry is one): an `Extension`, loaded at start-up and for every config check.
- `agent_gateway.commands`: a sub-command of `agent-gateway` → its `add_cli(parser, load)`;
  loaded when the command is chosen, and for `agent-gateway --help`, whose line for it is the
  first line of that function's docstring (`gateway.ops.subcommand.Commands`).

So `gateway/` imports nothing from `capabilities/` or `adapters/` (tests/test_layering.py), and a
deployment that installs another distribution declaring entry points gets its adapters and
capabilities with no change here. A name no entry point declares is a config error naming the
file, the name and the group.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web
    from pydantic_ai.agent import AbstractAgent

    from bindings.loader import ExtraCheck, LoadedConfig
    from gateway.clock import Clock
    from gateway.daemon import Gateway
    from gateway.mcp.pool import McpPool
    from gateway.runs.background import BackgroundRuns
    from gateway.runs.runner import CapabilityBuilder, ListenerFor, TurnPreparer
    from gateway.runs.scheduled import Schedules
    from gateway.runs.tool_calls import ToolsetWrapper
    from gateway.runs.turn import Turn
    from gateway.store.repo import Store

ADAPTERS = "agent_gateway.adapters"
CAPABILITIES = "agent_gateway.capabilities"
EXTENSIONS = "agent_gateway.extensions"
COMMANDS = "agent_gateway.commands"

# How a checkout registers its entry points (they live in the installed metadata, not the source).
INSTALL_HINT = "install the package that provides it (in a checkout: pip install -e .)"


class NotInstalled(LookupError):
    """No installed distribution declares this name in this group."""

    def __init__(self, group: str, name: str, what: str) -> None:
        known = ", ".join(names(group)) or "none"
        super().__init__(f"no {what} {name!r}: no entry point {name!r} in group {group} (installed: {known}); "
                         f"{INSTALL_HINT}")
        self.group, self.name = group, name


@functools.cache
def _installed() -> EntryPoints:
    """Every group's entry points, in one read: each read scans every installed distribution's metadata
    (5-17 ms here), and start-up asked ten times, then once per group (four: ~10 ms more of every
    start's CPU than one, bench/README.md Round 15). `rescan` forgets them (a reload does)."""
    return entry_points()  # on Python 3.11 a `SelectableGroups`, whose `select` is EntryPoints' too


@functools.cache
def _declared(group: str) -> tuple[EntryPoint, ...]:
    """`group`'s entry points, none of them loaded."""
    return tuple(_installed().select(group=group))


def rescan() -> None:
    """Read the installed distributions again at the next question: a package installed since start
    is found by the next reload."""
    _installed.cache_clear()
    _declared.cache_clear()


def declared(group: str) -> tuple[EntryPoint, ...]:
    """`group`'s entry points, none of them loaded."""
    return _declared(group)


def entry_point(group: str, name: str) -> EntryPoint | None:
    """The entry point `name` of `group`, if an installed distribution declares it."""
    return next((ep for ep in _declared(group) if ep.name == name), None)


def names(group: str) -> list[str]:
    """Every name declared in `group`, sorted."""
    return sorted({ep.name for ep in _declared(group)})


def load(group: str, name: str, what: str) -> Any:
    """The object entry point `name` of `group` names (imported now); NotInstalled when none does."""
    ep = entry_point(group, name)
    if ep is None:
        raise NotInstalled(group, name, what)
    return ep.load()


@dataclass(frozen=True)
class Assembly:
    """What an extension is handed at start-up: the parts it may wire into, and no more (never the
    daemon itself, so what an extension depends on is read here)."""

    config: Callable[[], LoadedConfig]  # the config now (a reload swaps it)
    store: Store
    clock: Clock
    # Around every call of every run, the first outermost, outside every run's capability (the approval gate):
    # each holds nothing of a run and reads its Turn from `ctx.deps` (gateway/runs/tool_calls.py).
    tool_wrappers: list[ToolsetWrapper]
    capability_builders: list[CapabilityBuilder]  # run in order for every turn; inside the tool wrappers
    turn_preparers: list[TurnPreparer]
    listeners: list[ListenerFor]  # what hears a turn's voice messages before it runs (gateway.inbound.attachments)
    build_agent: Callable[[Turn], AbstractAgent[Turn, Any]]  # the runner's: a delegate's agent is built like any
    parts: list[Any]  # objects with optional start/stop/readiness, started in order, stopped in reverse
    routes: list[web.AbstractRouteDef]  # served on the daemon's HTTP server
    mcp: McpPool
    background: BackgroundRuns
    schedules: Schedules  # scheduled tasks fire from their own sweep, through the queue
    start_handoff: Callable[[Turn, str, str, Callable[[str], Awaitable[None]]], Awaitable[str]]
    membership: Membership  # whether a person is still in a channel, asked of its binding's adapter
    # Blocking work a first run would do on the loop (importing a capability's runtime), done once after
    # start in the warm-up's thread for the config then (`gateway.runs.warm_up`).
    warm_ups: list[Callable[[LoadedConfig], None]]


class Extension:
    """What a package plugged in through `agent_gateway.extensions` may add; each hook does nothing
    unless overridden (as pydantic-ai's capabilities do)."""

    def install(self, assembly: Assembly) -> None:
        """Wire parts into a starting gateway (after the store and the core's parts exist, before
        adapters start): capability builders, routes, objects started and stopped with it."""

    def checks(self) -> Sequence[ExtraCheck]:
        """Config checks the loader runs on every load (`agent-gateway check`, start-up, reload)."""
        return ()


def installed() -> list[Extension]:
    """Every extension the installed distributions declare, in name order."""
    found = []
    for name in names(EXTENSIONS):
        extension = load(EXTENSIONS, name, "extension")
        if not isinstance(extension, Extension):
            raise TypeError(f"entry point {name!r} in group {EXTENSIONS} is not an Extension: {extension!r}")
        found.append(extension)
    return found


def install(gateway: Gateway) -> None:
    """Called once by `Gateway.start`, after the store and the core's parts exist and before adapters start."""
    # The core's own daemon-lifetime parts that capabilities use: the MCP connections, background runs
    # and handoff conversations. Built before the extensions so they can be handed them, and started
    # after (appended after), so stopped before what the extensions added.
    from gateway.mcp.pool import McpPool
    from gateway.runs.background import BackgroundRuns
    from gateway.runs.handoffs import HandoffStarter
    from gateway.runs.scheduled import Schedules

    pool = McpPool(gateway)
    gateway.mcp = pool
    gateway.runner.turn_preparers.append(pool.prepare)
    background = BackgroundRuns(gateway.store, lambda: gateway.config.gateway.limits, gateway.scheduler.wake,
                                gateway.events, sweep_every=min(20.0, gateway.store.lease_seconds / 3))
    gateway.stops.background = background
    runner = gateway.runner
    schedules = Schedules.of(gateway)
    assembly = Assembly(config=lambda: gateway.config, store=gateway.store, clock=gateway.clock,
                        tool_wrappers=runner.tool_wrappers,
                        capability_builders=runner.capability_builders, turn_preparers=runner.turn_preparers,
                        listeners=runner.listeners,
                        build_agent=runner.build_agent, parts=gateway.extensions, routes=gateway.extra_routes,
                        mcp=pool, background=background, schedules=schedules,
                        start_handoff=HandoffStarter(gateway).start,
                        membership=gateway.membership, warm_ups=gateway.warm_ups)
    for extension in installed():
        extension.install(assembly)
    gateway.extensions.append(pool)
    gateway.extensions.append(background)  # started after the MCP pool, so stopped before it
    gateway.extensions.append(schedules)


def register_checks() -> None:
    """Add the config checks of the core (every binding's platform has an adapter) and of the extensions."""
    from bindings.loader import add_check
    from gateway.adapter_registry import check_adapters

    add_check(check_adapters)
    for extension in installed():
        for check in extension.checks():
            add_check(check)


def online_problems(config: LoadedConfig) -> list[Any]:
    """`check --online`: what only connecting can tell (MCP servers unreachable, `tools:` naming nothing)."""
    import asyncio

    from gateway.mcp.cli import online_problems as mcp_problems

    return asyncio.run(mcp_problems(config))
