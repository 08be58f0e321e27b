"""MCP servers as an agent's tools: one long-lived connection per (agent, server), shared by its runs.

Built on pydantic-ai's `MCPToolset` (a FastMCP client). The pool owns every connection; runs never
connect themselves. Each server has a supervisor task that connects, lists the tools, keeps that
list fresh when the server announces a change, notices when the connection is lost (the change
stream drops, a ping fails, a run's call fails at the protocol level) and connects again with
backoff and jitter; for a stdio server that means starting the program again.

A run gets the tools of the servers that are up when it starts (`prepare` waits a little for a
server that is still connecting) and one line for the person naming each server that is not.
`/readyz` shows every server's state; a server being down never makes the gateway unready.

`pydantic_ai.mcp` takes seconds to import, so it is imported only when a server is connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bindings.models import McpConfig, McpServerSpec
from bindings.secrets import SecretRef

from gateway.mcp.server_log import ServerLog, StderrPipe
from gateway.reconnect import Backoff
from gateway.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gateway.daemon import Gateway
    from gateway.runs.turn import Turn

log = logging.getLogger("gateway.mcp.pool")

FIRST_WAIT = 5.0  # runs wait for a server's first connection at most this long after its first attempt began
LOAD_WAIT = 30.0  # ... and before that, while `pydantic_ai.mcp` is imported (seconds, off the loop)
PROBE_TIMEOUT = 10.0  # an unanswered liveness question after this long: the server stopped answering
STABLE_AFTER = 30.0  # a connection up this long earns a fast reconnect
READ_RESOURCE = "read_resource"  # the tool runs get for a server that serves resources (capabilities/mcp_servers.py)


class ConnectionLost(Exception):
    """The server went away after it was connected."""


@dataclass(frozen=True)
class ServerState:
    """One server's state, for `/readyz`, `agent-gateway mcp list` and logs."""

    agent: str
    server: str
    where: str
    state: str  # connecting | up | down | stopped
    tools: int
    detail: str
    connects: int  # successful connections so far; a restarted stdio server counts again

    def as_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "server": self.server, "where": self.where, "state": self.state,
                "tools": self.tools, "detail": self.detail, "connects": self.connects}


class McpConnection:
    """One server of one agent: a supervisor task keeps it connected; runs borrow its toolset."""

    def __init__(self, agent_id: str, spec: McpServerSpec, *, retry: bool = True,
                 settings: McpConfig | None = None, sampling_model: Callable[[], Any] | None = None) -> None:
        self.agent_id = agent_id
        self.sampling_model = sampling_model  # the agent's own model, for a server allowed to sample
        self.spec = spec
        self.retry = retry  # False: one attempt (the admin's commands)
        self.settings = settings or McpConfig()
        self.state = "connecting"  # only during the first attempt; later attempts keep `down` until one succeeds
        self.detail = "starting"
        self.connects = 0
        self.attempts = 0
        self.tools: list[Any] = []  # mcp.types.Tool, as the server names them
        self.toolset: Any = None  # the live _PooledToolset while up
        self.warned: set[str] = set()
        self.server_log = ServerLog(self.label, self.scrub)
        self._backoff = Backoff(base=0.5, cap=60.0)
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()  # set on every state change (then replaced)
        self._wake = asyncio.Event()
        self._refresh_due = False
        self._suspect = False
        self._lost: str | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._secrets: list[str] = []
        self._up_since = 0.0
        self._heard_at = 0.0
        self._ping_works = True
        self._first_wait_until = 0.0
        self._calls: list[Any] = []  # RunCall of each run's call in flight

    @property
    def label(self) -> str:
        return f"{self.agent_id}/{self.spec.name}"

    def status(self) -> ServerState:
        return ServerState(self.agent_id, self.spec.name, self.spec.describe(), self.state, len(self.tools),
                           self.detail, self.connects)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._first_wait_until = time.monotonic() + LOAD_WAIT  # until the first attempt begins
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.label}")

    async def stop(self) -> None:
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        task = self._task
        if task is not None:
            if self.state == "up":  # leave the session cleanly (a stdio program gets its stdin closed)
                with contextlib.suppress(Exception, asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), 5.0)
            # Kept until it has ended: a stop that is itself cancelled leaves it for the next stop to finish.
            await cancel_and_wait(task, what=f"MCP server {self.label}", level=logging.DEBUG)
            self._task = None
        self._set("stopped", "stopped")

    async def wait_usable(self, timeout: float) -> None:
        """Return once the first connection attempt has ended (up or down), waiting at most `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.state == "connecting" and not self._stopping:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            changed = self._changed
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    def first_wait_left(self) -> float:
        """How long a run may still wait for this server: only during its first attempt, and only briefly."""
        if self.state != "connecting":
            return 0.0
        return max(0.0, self._first_wait_until - time.monotonic())

    async def wait_first(self) -> None:
        """A run's wait: until the first attempt ends or its short allowance is used up, whichever is first."""
        while self.state == "connecting" and not self._stopping:
            left = self.first_wait_left()
            if left <= 0:
                return
            changed = self._changed  # set when the attempt begins (the allowance is then fixed) and when it ends
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), left)

    def live_toolset(self) -> Any:
        return self.toolset if self.state == "up" else None

    def suspect(self) -> None:
        """A run's call failed at the protocol level, or a stdio program's stderr closed: ask the server now."""
        self._suspect = True
        self._wake.set()

    def heard(self) -> None:
        """The server answered (a result, an error answer) or sent a notification: it is there."""
        self._heard_at = time.monotonic()

    def _set(self, state: str, detail: str) -> None:
        self.state, self.detail = state, detail
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # --- the supervisor -------------------------------------------------------------------

    async def _supervise(self) -> None:
        with contextlib.suppress(Exception):  # a broken install fails the attempt below, with its reason
            await _load_toolset_module()
        self._first_wait_until = time.monotonic() + min(FIRST_WAIT, self.settings.connect_timeout_seconds + 1)
        self._set("connecting", "connecting")
        while not self._stopping:
            self._up_since = 0.0
            self.attempts += 1
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._stopping:
                    break
                reason = self.scrub(self._reason(e))
                what = "connection lost" if self._up_since > 0 else "cannot be reached"
                # Once per state change or reason: the state stays `down` across retries, so a server
                # down for hours is one warning, not one a minute.
                level = logging.WARNING if (self.state != "down" or self.detail != reason) else logging.DEBUG
                log.log(level, "MCP server %s (%s) %s: %s%s", self.label, self.spec.describe(), what, reason,
                        "; retrying with backoff" if self.retry else "")
                self.toolset = None
                self._set("down", reason)
            if self._stopping or not self.retry:
                break
            if self._up_since and time.monotonic() - self._up_since >= STABLE_AFTER:
                self._backoff.reset()
            with contextlib.suppress(asyncio.TimeoutError):  # only stop() cuts a backoff short
                await asyncio.wait_for(self._stopped.wait(), self._backoff.next_delay())
        self.toolset = None

    def _reason(self, e: BaseException) -> str:
        """Why the last attempt failed, in words for the person and the log."""
        reason = _describe_error(e, connect_timeout=self.settings.connect_timeout_seconds)
        if self._up_since == 0 and self.server_log.noise is not None:
            reason += f"; it printed {self.server_log.noise!r}, which is not JSON-RPC"
        return reason

    async def _session(self) -> None:
        """Connect, list, and watch until the connection is lost (raises) or the pool stops (returns)."""
        self._lost, self._suspect, self._refresh_due = None, False, False
        self.server_log.noise = None
        stderr = StderrPipe(self.server_log.stderr, self.suspect) if self.spec.command is not None else None
        toolset = self._build_toolset(stderr)
        try:
            if stderr is not None:
                stderr.start()
            try:
                await asyncio.wait_for(toolset.__aenter__(), self.settings.connect_timeout_seconds + 5)
            finally:
                if stderr is not None:
                    stderr.spawned()
            try:
                await self._list(toolset)
                self.toolset = toolset
                self.connects += 1
                self._up_since = time.monotonic()
                self._ping_works = _has_ping(toolset)
                self._set("up", f"{len(self.tools)} tools")
                log.info("MCP server %s (%s) connected: %d tools", self.label, self.spec.describe(), len(self.tools))
                self.warn_unknown_entries()
                await self._watch(toolset)
            finally:
                self.toolset = None
                with _unless_cancelled(f"closing MCP server {self.label}"):
                    await asyncio.wait_for(toolset.__aexit__(None, None, None), 5.0)
        finally:
            if stderr is not None:
                await stderr.close()

    async def _watch(self, toolset: Any) -> None:
        listener = asyncio.create_task(self._listen(toolset)) if _can_listen(toolset) else None
        keepalive = self.settings.keepalive_seconds
        try:
            while not self._stopping:
                self._wake.clear()
                if not (self._lost or self._refresh_due or self._suspect):
                    streaming = listener is not None and not listener.done()
                    quiet_for = time.monotonic() - self._heard_at
                    try:
                        await asyncio.wait_for(self._wake.wait(), None if streaming else max(0.0, keepalive - quiet_for))
                    except asyncio.TimeoutError:
                        self._suspect = time.monotonic() - self._heard_at >= keepalive
                if self._stopping:
                    return
                if self._lost:
                    raise ConnectionLost(self._lost)
                if self._refresh_due:
                    self._refresh_due = False
                    await self._refresh(toolset)
                if self._suspect:
                    self._suspect = False
                    await self._probe(toolset)
        finally:
            if listener is not None:
                await cancel_and_wait(listener, what=f"MCP server {self.label}'s change stream", level=logging.DEBUG)

    async def _probe(self, toolset: Any) -> None:
        """Is the server still there? Any JSON-RPC answer says yes, an error answer too."""
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED, METHOD_NOT_FOUND, REQUEST_TIMEOUT

        question = "ping" if self._ping_works else "tools/list"
        try:
            if self._ping_works:
                await asyncio.wait_for(toolset.client.ping(), PROBE_TIMEOUT)
            else:  # the discovery call every revision has; it also keeps the list fresh
                await asyncio.wait_for(self._refresh(toolset), PROBE_TIMEOUT)
        except MCPError as e:
            if e.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):  # made up on our side: no answer came
                raise ConnectionLost(f"no answer to {question}: {_describe_error(e)}") from None
            if e.code == METHOD_NOT_FOUND and self._ping_works:
                self._ping_works = False  # it answered, so it is there; from now on it is asked with tools/list
                log.debug("MCP server %s has no ping; asking with tools/list instead", self.label)
        except Exception as e:
            raise ConnectionLost(f"no answer to {question}: {_describe_error(e)}") from None
        self.heard()
        log.debug("MCP server %s answered %s", self.label, question)

    async def _listen(self, toolset: Any) -> None:
        """Follow the server's change stream (2026 protocol): a change refreshes, a drop means lost."""
        from mcp.client.subscriptions import ToolsListChanged, listen

        try:
            async with listen(toolset.client.session, tools_list_changed=True) as subscription:
                try:
                    async for event in subscription:
                        if isinstance(event, ToolsListChanged):
                            self._refresh_due = True
                            self._wake.set()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # acknowledged, then dropped: the connection is gone
                    self._lost = f"change stream lost: {_describe_error(e)}"
                    self._wake.set()
                    return
            self._suspect = True  # closed by the server: is it still there? (then keep-alive questions take over)
            self._wake.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never acknowledged: fall back to keep-alive questions
            log.debug("MCP server %s: no change stream (%s); asking it when quiet instead", self.label, e)
            self._wake.set()

    async def _on_message(self, message: Any) -> None:
        """What the server sends unasked: a changed tool list is listed again; stdout noise is logged."""
        from mcp import types as mcp_types

        if isinstance(message, Exception):  # a stdout line that is not JSON-RPC (the protocol skips it)
            self.server_log.not_json(_unparsed_line(message))
            return
        self.heard()
        if isinstance(getattr(message, "root", message), mcp_types.ToolListChangedNotification):
            self._refresh_due = True
            self._wake.set()

    async def _on_log(self, message: Any) -> None:
        """A log notification: under the server's name, never above warning."""
        self.heard()
        self.server_log.notification(str(message.level), message.logger, message.data)

    async def _list(self, toolset: Any) -> None:
        tools = await asyncio.wait_for(toolset.client.list_tools(), self.spec.timeout_seconds)
        self.tools = list(tools)
        toolset.pooled_tools = self.tools
        self.heard()

    async def _refresh(self, toolset: Any) -> None:
        before = sorted(t.name for t in self.tools)
        await self._list(toolset)
        if sorted(t.name for t in self.tools) != before:
            self._set("up", f"{len(self.tools)} tools")
            log.info("MCP server %s changed its tools: now %d", self.label, len(self.tools))
            self.warn_unknown_entries()

    def _build_toolset(self, stderr: StderrPipe | None) -> Any:
        from gateway.mcp.toolset import pooled_toolset

        spec = self.spec
        handlers = {"message_handler": self._on_message, "log_handler": self._on_log,
                    "connect_timeout": self.settings.connect_timeout_seconds}
        if spec.elicitation == "ask":
            from gateway.mcp.elicitation import asking_handler

            handlers["elicitation_handler"] = asking_handler(self.label, spec.name, self.sole_call)
        if spec.url is not None:
            headers = {k: self._resolve(v) for k, v in spec.headers.items()}
            toolset = pooled_toolset(spec, url=spec.url, headers=headers, **handlers)
        else:
            assert stderr is not None
            env = {k: self._resolve(v) for k, v in spec.env.items()}
            toolset = pooled_toolset(spec, command=spec.command, args=list(spec.args), env=env, stderr=stderr.writer,
                                     **handlers)
        if spec.sampling in ("allow", "ask") and self.sampling_model is not None:
            # pydantic-ai answers `sampling/createMessage` with the model; without it the client offers no
            # sampling and the SDK refuses a request ("Sampling not supported").
            try:
                from gateway.mcp.sampling import CountedModel

                toolset.set_sampling_model(CountedModel(self.sampling_model(), self.sole_call, spec.name,
                                                        asks=spec.sampling == "ask"))
            except Exception as e:  # the agent's model cannot be built: its runs say why; sampling stays refused
                self.warn_once("sampling", "MCP server %s: sampling: allow, but the agent's model cannot be built "
                               "(%s); its requests are refused", self.label, e)
        return toolset

    def _resolve(self, value: str) -> str:
        """A header or env value as sent; references resolved (a SecretError names the reference only)."""
        if not isinstance(value, SecretRef):
            return value
        secret = value.resolve().reveal()
        if len(secret) >= 4 and secret not in self._secrets:  # scrubbed from error text; a shorter one would scrub ordinary words
            self._secrets.append(secret)
        return secret

    def scrub(self, text: str) -> str:
        """Error text as it may be logged or shown: resolved secrets and URL query strings removed."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return re.sub(r"(https?://[^\s?#'\"]+)\?[^\s'\"]*", r"\1?…", text)

    # --- what the admin is told -----------------------------------------------------------

    @contextlib.contextmanager
    def in_call(self, call: Any) -> Iterator[None]:
        """A run's call is in flight on this connection (what a sampling request is counted against)."""
        self._calls.append(call)
        try:
            yield
        finally:
            self._calls.remove(call)

    def sole_call(self) -> Any:
        """The run's call in flight, when there is exactly one."""
        return self._calls[0] if len(self._calls) == 1 else None

    def handshake(self) -> bool:
        """Whether the live session is of a handshake-era revision (before 2026-07-28)."""
        return self.toolset is not None and _has_ping(self.toolset)

    def offers_resources(self) -> bool:
        """Whether the server serves resources (then runs get `<name>_read_resource`)."""
        try:
            return bool(self.toolset.capabilities.resources)
        except Exception:
            return False

    def unknown_entries(self) -> list[str]:
        """`tools:` entries naming no tool the server offers (only meaningful once listed)."""
        offered = {t.name for t in self.tools} | ({READ_RESOURCE} if self.offers_resources() else set())
        return [name for name in self.spec.tools if name not in offered]

    def warn_unknown_entries(self) -> None:
        for name in self.unknown_entries():
            if name not in self.warned:
                self.warned.add(name)
                log.warning("agent %s: mcp_servers %s: tools: %r names no tool the server offers (it offers: %s)",
                            self.agent_id, self.spec.name, name, ", ".join(sorted(t.name for t in self.tools)) or "none")

    def warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self.warned:
            self.warned.add(key)
            log.warning(message, *args)


def _transport(spec: McpServerSpec) -> tuple[Any, ...]:
    """What the connection is made of; a change to anything else (permissions) keeps it."""
    return (spec.url, spec.command, tuple(spec.args), tuple(sorted(spec.env.items())),
            tuple(sorted(spec.headers.items())), spec.timeout_seconds, spec.sampling, spec.elicitation)


_loaded: asyncio.Future[None] | None = None


async def _load_toolset_module() -> None:
    """Import `gateway.mcp.toolset` (which pulls in pydantic_ai.mcp and FastMCP: seconds) in a thread, once,
    so starting the first server does not stall the event loop."""
    global _loaded
    if _loaded is None or _loaded.get_loop() is not asyncio.get_running_loop():
        _loaded = asyncio.ensure_future(asyncio.to_thread(importlib.import_module, "gateway.mcp.toolset"))
    await asyncio.shield(_loaded)


def _has_ping(toolset: Any) -> bool:
    """The handshake revisions have `ping`; 2026-07-28 has none (its keep-alive is the change stream)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return toolset.client.session.protocol_version not in MODERN_PROTOCOL_VERSIONS


def _unparsed_line(e: Exception) -> str:
    """The stdout line a parse failure is about (pydantic keeps the input), else the error's first line."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            value = errors()[0].get("input")
            if isinstance(value, str):
                return value
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _can_listen(toolset: Any) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    try:
        session = toolset.client.session
        return session.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(toolset.capabilities.tools_list_changed)
    except Exception:
        return False


@contextlib.contextmanager
def _unless_cancelled(what: str) -> Iterator[None]:
    """Drop what a block raises (the MCP client's teardown raises CancelledError and BaseExceptionGroup
    from its own cancel scopes), except the current task's own cancellation, which goes on."""
    try:
        yield
    except BaseException as e:
        task = asyncio.current_task()
        if not isinstance(e, Exception | asyncio.CancelledError | BaseExceptionGroup) or (
                task is not None and task.cancelling()):
            raise
        log.debug("%s: %s", what, _describe_error(e))


def _describe_error(e: BaseException, *, connect_timeout: float | None = None) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    cause: BaseException | None = e
    while cause is not None:  # "Client failed to connect: Failed to initialize server session" hides a timeout
        if isinstance(cause, asyncio.TimeoutError | TimeoutError):
            if connect_timeout is not None:
                return f"no answer to the handshake within {connect_timeout:g} s"
            return "timed out"
        cause = cause.__cause__ or cause.__context__
    text = str(e) or type(e).__name__
    return text.splitlines()[0][:300]


class McpPool:
    """Every MCP connection of one gateway: a gateway extension (start, stop, readiness)."""

    def __init__(self, gateway: Gateway | None = None) -> None:
        self.gw = gateway
        self._connections: dict[tuple[str, str], McpConnection] = {}

    async def start(self) -> None:
        """Connect the servers of every agent a binding serves now, without waiting for them."""
        if self.gw is None:
            return
        config = self.gw.config
        for agent_id in sorted({b.agent for b in config.bindings.values() if b.enabled}):
            agent = config.agents.get(agent_id)
            for spec in agent.mcp_servers if agent else ():
                if spec.enabled:
                    await self.connection(agent_id, spec)

    async def stop(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)

    async def connection(self, agent_id: str, spec: McpServerSpec) -> McpConnection:
        """The agent's connection to this server, started if new. A spec edited since (a reload)
        replaces it; runs in flight find the new one by name (`existing`)."""
        key = (agent_id, spec.name)
        current = self._connections.get(key)
        if current is not None and _transport(current.spec) == _transport(spec):
            current.spec = spec  # permissions changed at most: the connection stays
            return current
        fresh = McpConnection(agent_id, spec, settings=self.gw.config.gateway.mcp if self.gw else None,
                              sampling_model=lambda: self._agent_model(agent_id))
        self._connections[key] = fresh
        fresh.start()
        if current is not None:
            await current.stop()
        return fresh

    def _agent_model(self, agent_id: str) -> Any:
        """The agent's own model, as its runs use it (a server allowed to sample is answered with it)."""
        assert self.gw is not None
        agent = self.gw.config.agents[agent_id]
        return self.gw.models.get(agent.model, self.gw.config.gateway.providers)

    def existing(self, agent_id: str, name: str) -> McpConnection | None:
        return self._connections.get((agent_id, name))

    async def prepare(self, turn: Turn) -> None:
        """Before a run is built: make sure its agent's servers are connected or known to be down."""
        wanted = {s.name for s in turn.agent.mcp_servers if s.enabled}
        for (agent_id, name), connection in list(self._connections.items()):
            if agent_id == turn.agent.id and name not in wanted:  # removed or disabled since (a reload)
                del self._connections[(agent_id, name)]
                await connection.stop()
        connections = [await self.connection(turn.agent.id, s) for s in turn.agent.mcp_servers if s.enabled]
        starting = [c for c in connections if c.first_wait_left() > 0]
        if starting:
            log.debug("a run of agent %s waits for MCP servers still starting: %s", turn.agent.id,
                      ", ".join(c.spec.name for c in starting))
            await asyncio.gather(*(c.wait_first() for c in starting))

    def readiness(self) -> dict[str, Any]:
        """The `mcp` part of /readyz: every server's state (informational; it never makes the gateway unready)."""
        return {"mcp": {c.label: {k: v for k, v in c.status().as_json().items() if k not in ("agent", "server")}
                        for c in self._connections.values()}}
