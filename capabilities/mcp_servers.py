"""An agent's MCP servers as tools of one run: prefixed, `deny` never offered, every tool in the gate's map.

The model sees tool `search` of server `wiki` as `wiki_search`. What the run offers is fixed when
the run starts, from the tool list the pool keeps: `turn.tools` gets a `ToolInfo(from_mcp=True,
mcp_permission=...)` for each, so the approval gate asks unless the agent file says `allow`. A
name that providers would refuse, or that another tool of the run already has, is not offered
(and logged once). A server that is not up contributes nothing but one line for the person.

A server that offers resources also gets `<name>_read_resource`, so a resource link a tool returned
(which reaches the model with its name, type and URI) can be read. It is gated like the server's own tools: its
permission is the one `tools: {read_resource: ...}` gives (ask unless the agent file says otherwise),
and it is not offered when the server has a tool of that name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from gateway.approvals.policy import TOOL_NAME, ToolInfo
from gateway.mcp.call import CURRENT_CALL, RunCall
from gateway.mcp.offered import visible_tools
from gateway.mcp.pool import READ_RESOURCE
from gateway.mcp.results import for_the_model
from gateway.runs.shared_capabilities import SharedCapabilities

from .failures import trouble
from .registry import ByIdentity, simple

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.mcp.pool import McpPool
    from gateway.runs.turn import Turn

log = logging.getLogger("gateway.mcp.pool")


@dataclass
class _ServerTools(WrapperToolset[Any]):
    """One server's tools as one run sees them.

    The run never enters or leaves the connection (the pool holds it), offers only the tools
    chosen when it started, and calls through whichever connection is live for the server now,
    so a server that was restarted mid-run is used again.
    """

    offered: frozenset[str] = frozenset()
    pool: Any = None
    agent_id: str = ""
    server: str = ""

    async def __aenter__(self) -> _ServerTools:
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        return {name: tool for name, tool in tools.items() if name in self.offered}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        connection = self.pool.existing(self.agent_id, self.server)
        live = connection.live_toolset() if connection is not None else None
        if live is None:
            detail = f" ({connection.detail})" if connection is not None and connection.detail else ""
            return trouble(ctx, "transient", f"The {self.server} MCP server cannot be reached right now{detail}; "
                                             "the call did not run.")
        run_call = RunCall(self.server, ctx.deps.status, ctx.deps.tell, ctx.usage, ctx.deps.ask)
        call = CURRENT_CALL.set(run_call)
        try:
            with connection.in_call(run_call):
                result = await live.call_tool(name, tool_args, ctx, tool)
        except ModelRetry:
            connection.suspect()  # a protocol-level failure: the pool checks the connection at once
            raise
        except ToolFailed:
            connection.heard()  # the tool's own error is an answer
            raise
        finally:
            CURRENT_CALL.reset(call)
        connection.heard()
        return for_the_model(result)


class ResourceReaders:
    """Each server's `read_resource` toolset, built once per agent and server for the daemon's pool.

    Building one is pydantic's work on the function's signature and docstring (~0.45 ms a server, a
    third of an MCP agent's `build_agent` when every run built its own), and nothing of a run or of
    the config is in it: it reads through whichever connection the pool holds for the server when
    called. Bounded like the runner's shared Agents: delegates' dynamic agents are named by the model.
    """

    def __init__(self, pool: McpPool) -> None:
        self.pool = pool
        self._built = functools.lru_cache(maxsize=256)(self._reader)

    def __call__(self, agent_id: str, server: str) -> FunctionToolset[Any]:
        return self._built(agent_id, server)

    def _reader(self, agent_id: str, server: str) -> FunctionToolset[Any]:
        return _resource_reader(self.pool, agent_id, server)


def _resource_reader(pool: McpPool, agent_id: str, server: str) -> FunctionToolset[Any]:
    """`read_resource` of one server, through whichever connection is live for it when called."""
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool(name=READ_RESOURCE)
    async def read_resource(ctx: RunContext[Any], uri: str) -> Any:
        """Read a resource of this MCP server by its URI, such as a resource link one of its tools returned.

        Use it when a tool's result names a URI (e.g. `tracker://reports/api`) whose contents you need;
        it reads nothing but what this server serves.

        Args:
            uri: the resource's URI exactly as the server gave it.

        Returns the resource's text (or a note naming a file that is not read); several contents come as a list.
        """
        connection = pool.existing(agent_id, server)
        live = connection.live_toolset() if connection is not None else None
        if live is None:
            return trouble(ctx, "transient", f"The {server} MCP server cannot be reached right now; nothing was read.")
        from mcp.shared.exceptions import MCPError
        from pydantic_ai.mcp import MCPError as ToolsetMCPError

        try:
            contents = await live.read_resource(uri)
        except (MCPError, ToolsetMCPError) as e:  # an answer: the URI is not one it serves
            connection.heard()
            return trouble(ctx, "mistake", f"The {server} MCP server could not read {uri!r}: {e}")
        connection.heard()
        return for_the_model(contents)

    return tools


def _why_not(connection: Any) -> str:
    """Why a server's tools are missing from this run, for the person: starting, or down and why."""
    if connection is not None and connection.state == "connecting":
        return "MCP server still starting"
    detail = connection.detail if connection is not None and connection.state == "down" else ""
    return f"MCP server unavailable: {detail}" if detail else "MCP server unavailable"


@dataclass(frozen=True)
class _Offer:
    """One server's offer to runs as computed from one listing: the gate's entries and the toolset."""

    spec: Any  # McpServerSpec: the config's, so a reload's permissions are a new offer
    listed: list[Any]  # the connection's tool list (a new list at every listing)
    live: Any  # the connection's live toolset (a reconnect makes a new one)
    handshake: bool
    resources: bool
    tools: dict[str, ToolInfo]
    toolset: AbstractToolset[Any] | None


class Offers:
    """What each server offers a run, computed once per listing of its tools and kept for the next runs.

    Recomputing it per run (each tool's visible name, permission and gate entry, and the toolsets) was
    ~200 of an MCP agent's ~320 calls in `build_agent` (bench/README.md, Round 12). Nothing of a run is
    in it: the toolsets read the run from their context and call through whichever connection is live.
    A new listing (the server changed its tools), a reconnect, or a reload's spec makes a new offer; a
    run where another tool already has one of its names gets one of its own (and the log line)."""

    def __init__(self, readers: ResourceReaders) -> None:
        self.readers = readers
        self.pool = readers.pool
        self._offers: dict[tuple[str, str], _Offer] = {}
        self._shared: ByIdentity[SharedCapabilities] = ByIdentity()

    def kept(self, turn: Turn, spec: Any) -> _Offer | None:
        """The offer kept for the agent's server: the next runs', unless its listing changes."""
        return self._offers.get((turn.agent.id, spec.name))

    def shared(self, offers: tuple[_Offer, ...]) -> SharedCapabilities:
        """The kept offers' toolsets as one capability of the shared Agent, the same object while they are kept."""
        return self._shared.get(offers, lambda: SharedCapabilities((simple(toolsets=[o.toolset for o in offers]),)))

    def offer(self, turn: Turn, spec: Any, connection: Any, live: Any) -> _Offer:
        key = (turn.agent.id, spec.name)
        handshake, resources = connection.handshake(), connection.offers_resources()
        kept = self._offers.get(key)
        if (kept is not None and kept.spec is spec and kept.listed is connection.tools and kept.live is live
                and kept.handshake == handshake and kept.resources == resources):
            if not any(name in turn.tools for name in kept.tools):
                return kept
        made, collided = self._compute(turn, spec, connection, live, handshake, resources)
        if not collided:  # what this run lacked for another tool's name is not every run's offer
            if len(self._offers) >= 256 and key not in self._offers:  # bounded: delegates' agents are the model's
                del self._offers[next(iter(self._offers))]
            self._offers[key] = made
        return made

    def _compute(self, turn: Turn, spec: Any, connection: Any, live: Any, handshake: bool,
                 resources: bool) -> tuple[_Offer, bool]:
        """The offer, and whether another tool of this run had one of its names (then it is this run's only)."""
        tools: dict[str, ToolInfo] = {}
        offered = set()
        collided = False
        for row in visible_tools(spec, connection.tools, handshake=handshake):
            if row.note:
                if row.permission != "deny":
                    connection.warn_once(f"name:{row.visible}", "MCP server %s: tool %r %s", connection.label,
                                         row.server_name, row.note)
                continue
            if row.visible in turn.tools:
                collided = True
                connection.warn_once(f"collision:{row.visible}", "MCP server %s: tool %r is not offered: %r is "
                                     "already the name of another tool of this agent", connection.label,
                                     row.server_name, row.visible)
                continue
            tools[row.visible] = ToolInfo(stable_id=row.visible, capability=f"mcp:{spec.name}", from_mcp=True,
                                          mcp_permission=row.permission)
            offered.add(row.server_name)
        group: list[AbstractToolset[Any]] = []
        if offered:
            group.append(_ServerTools(live, offered=frozenset(offered), pool=self.pool, agent_id=turn.agent.id,
                                      server=spec.name))
        reader = f"{spec.name}_{READ_RESOURCE}"
        collided = collided or reader in turn.tools
        if (resources and READ_RESOURCE not in {t.name for t in connection.tools}
                and spec.permission(READ_RESOURCE) != "deny" and reader not in turn.tools):
            tools[reader] = ToolInfo(stable_id=reader, capability=f"mcp:{spec.name}", from_mcp=True,
                                     mcp_permission=spec.permission(READ_RESOURCE))
            group.append(self.readers(turn.agent.id, spec.name))
        toolset = CombinedToolset(group).prefixed(spec.name) if group else None
        return _Offer(spec, connection.tools, live, handshake, resources, tools, toolset), collided


def build_for_turn(offers: Offers, turn: Turn) -> list[Any]:
    """The MCP servers' tools for one run (after `McpPool.prepare` ran for this turn), from `offers.pool`.

    The servers' kept offers go in the runner's shared Agent (`SharedCapabilities`, one per set of offers,
    so the same Agent while no listing, reconnect or reload changes them): their toolsets read the run from
    its deps at each call. An offer made for this run alone (a name collision) is this run's capability."""
    kept: list[_Offer] = []
    own: list[AbstractToolset[Any]] = []
    for spec in turn.agent.mcp_servers:
        if not spec.enabled:
            continue
        connection = offers.pool.existing(turn.agent.id, spec.name)
        live = connection.live_toolset() if connection is not None else None
        if connection is None or live is None:
            turn.notices.append(f"The {spec.name} tools are not available right now ({_why_not(connection)}); "
                                "I'll answer without them.")
            continue
        offer = offers.offer(turn, spec, connection, live)
        turn.tools.update(offer.tools)
        if offer.toolset is not None:
            if offers.kept(turn, spec) is offer:
                kept.append(offer)
            else:
                own.append(offer.toolset)
    built: list[Any] = [offers.shared(tuple(kept))] if kept else []
    if own:
        built.append(simple(toolsets=own))
    return built


# --- load-time validation -----------------------------------------------------------------


def validate_config(config: LoadedConfig, report: Callable[[str, tuple[str | int, ...], str], None]) -> None:
    """Refuse server lists whose tool names would be invalid or could collide."""
    for agent_id, agent in config.agents.items():
        key = f"agent:{agent_id}"
        seen: dict[str, int] = {}
        for i, spec in enumerate(agent.mcp_servers):
            if spec.name in seen:
                report(key, ("mcp_servers", i, "name"),
                       f"another MCP server of this agent is already named {spec.name!r} (entry {seen[spec.name] + 1}); "
                       "names must differ because they prefix the tool names")
                continue
            seen[spec.name] = i
            for tool in spec.tools:
                visible = f"{spec.name}_{tool}"
                if not TOOL_NAME.match(visible):
                    report(key, ("mcp_servers", i, "tools", tool),
                           f"the model would see this tool as {visible!r}, which not every model provider accepts: "
                           "letters, digits, '_' and '-', at most 64 characters")
        names = sorted(seen)
        for name in names:
            for other in names:
                if other != name and other.startswith(name + "_"):
                    report(key, ("mcp_servers", seen[other], "name"),
                           f"{other!r} and {name!r} could give two tools the same name (tool "
                           f"{other.removeprefix(name + '_')}_x of {name} and tool x of {other} would both be "
                           f"{other}_x): rename one")
