"""The lifecycle every connected platform adapter shares: secrets → connect with backoff → health → stop.

The protocol lives in `gateway.outbound.adapter` (what every adapter must do, and the features
it may declare), the registry in `gateway.adapter_registry` and the
reconnect helpers in `gateway.reconnect` (the core owns the interface it talks to); this is the
adapters' side of it, written once. As in python-telegram-bot's `BaseUpdateProcessor`, the
invariants live in methods subclasses do not override (`start`, `stop`; overriding them is a
TypeError when the class is defined), and a platform fills in three hooks:

    _open()           resolve the binding's secrets (`self._secret`) and build the clients;
                      raise CannotStart when the binding cannot work as configured
    _connect_once()   one connection, from connecting until it drops; `self._health.up(...)`
                      once it is up. Return or raise to be reconnected after a jittered backoff
    _close()          release what `_open` built (HTTP sessions, clients)

start():  _open → one task running `reconnect_forever(_connect_once)`; returns at once, and a
          binding that cannot start says why in `health()` (it never raises into the daemon).
stop():   the connection task and side tasks are cancelled and awaited together, then `_close`;
          it returns within STOP_TIMEOUT whatever a peer does. A polite close (a websocket close
          handshake) waits for the peer at most CLOSE_TIMEOUT (`within`): aiohttp's own default
          is 10 s, which a Slack binding whose server did not answer the close frame added to
          every stop.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, final

import aiohttp

from bindings.models import BindingSpec
from bindings.secrets import Secret, SecretError, SecretRef
from gateway.adapter_registry import AdapterContext
from gateway.reconnect import Backoff, HealthState, reconnect_forever
from gateway.outbound.adapter import (
    AdapterHealth,
    AttachmentTooLarge,
    Dispatcher,
    PlatformError,
    PlatformLimits,
    Trouble,
)

if TYPE_CHECKING:
    from aiohttp import web

CLOSE_TIMEOUT = 1.0  # seconds a polite close may wait for the peer before the connection is dropped
STOP_TIMEOUT = 5.0  # seconds stop() waits for cancelled tasks and `_close` before it gives up on them

T = TypeVar("T")


class CannotStart(Exception):
    """The binding cannot connect as configured (a secret missing, a value the platform refuses).

    Not retried: the message goes to the log and to `/readyz` and must name settings, never values.
    """


class BaseAdapter(abc.ABC):
    """One binding's connection to one platform, with the lifecycle every platform shares."""

    platform: ClassVar[str]
    limits: ClassVar[PlatformLimits]
    _FINAL: ClassVar[tuple[str, ...]] = ("start", "stop")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in BaseAdapter._FINAL:
            if name in cls.__dict__:
                raise TypeError(f"{cls.__name__} must not override {name}(): implement _open, _connect_once "
                                "and _close instead")

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        self.binding = binding
        self.binding_id = binding.id
        self._log = context.log.getChild(f"{self.platform}.{binding.id}")
        self._clock = context.clock
        self._health = HealthState()
        self.backoff = Backoff()  # between reconnects, with full jitter; tests may shorten it
        self._dispatcher: Dispatcher | None = None
        self._task: asyncio.Task[None] | None = None
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False

    # --- the lifecycle (final) ---------------------------------------------------------

    @final
    async def start(self, dispatcher: Dispatcher) -> None:
        """Open the clients and begin connecting in a task this adapter owns; return at once."""
        self._dispatcher = dispatcher
        self._stopping = False
        try:
            await self._open()
        except CannotStart as e:
            self._health.down(f"cannot start: {e}")
            self._log.error("cannot start: %s", e)
            await self._close_quietly()
            return
        self._task = asyncio.create_task(
            reconnect_forever(self._connect_once, self._health, self._log, backoff=self.backoff,
                              sleep=self._clock.sleep),
            name=f"{self.platform}:{self.binding_id}",
        )

    @final
    async def stop(self) -> None:
        """Cancel the connection and what it spawned, release the clients; prompt whatever the peer does."""
        self._stopping = True  # requests still reaching our HTTP routes get 503, and the platform retries
        tasks = [t for t in (self._task, *self._side_tasks) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
            if pending:
                self._log.warning("stopped without waiting for %s", ", ".join(t.get_name() for t in pending))
        self._side_tasks.clear()
        await self._close_quietly()
        self._health.down("stopped")

    async def _close_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._close(), STOP_TIMEOUT)
        except Exception as e:  # closing sockets must not stop the daemon's shutdown
            self._log.warning("closing the %s clients: %s: %s", self.platform, type(e).__name__, e)

    async def doctor(self, online: bool) -> list[Trouble]:
        """The binding's secrets resolve and its clients build (`_open`, which never connects); with
        `online`, the platform takes the credentials (`_verify`). Then the clients are released."""
        try:
            await self._open()
            return await self._verify() if online else []
        except CannotStart as e:
            return [Trouble(f"cannot start: {e}", f"set the {self.platform} section's secret so that it resolves "
                            "(env:NAME needs the variable in the daemon's environment, file:/path a readable "
                            "file, credential:NAME systemd's LoadCredential=)")]
        finally:
            await self._close_quietly()

    # --- hooks -------------------------------------------------------------------------

    async def _verify(self) -> list[Trouble]:
        """Ask the platform whether it takes this binding's credentials (after `_open`). A platform
        that has not said how is not asked."""
        return []

    @abc.abstractmethod
    async def _open(self) -> None:
        """Resolve secrets and build clients. Raise CannotStart when the binding cannot work."""

    @abc.abstractmethod
    async def _connect_once(self) -> None:
        """One connection until it drops; call `self._health.up(detail)` once it is up."""

    async def _close(self) -> None:
        """Release what `_open` built. Called once per start, after the connection task ended."""

    # --- the rest of the Adapter protocol, where every platform agrees ------------------
    # (What only some platforms do is an adapter feature each one declares among its bases:
    # `gateway.outbound.adapter.FEATURES`. No default stands in for one here.)

    def health(self) -> AdapterHealth:
        return self._health.get()

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        return []

    def forget(self, message_ids: Sequence[str]) -> None:
        """Nothing is kept about a sent message on these platforms: the platform holds it."""

    # --- helpers for subclasses ----------------------------------------------------------

    def _secret(self, setting: str, ref: SecretRef) -> Secret:
        """Resolve one secret of the binding; CannotStart names the setting and the reference, never a value."""
        try:
            return ref.resolve()
        except SecretError as e:
            raise CannotStart(f"{setting} ({ref.describe()}): {e}") from None

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """A task that outlives the handler that started it (a note sent after an ack); stop() cancels it."""
        task = asyncio.get_running_loop().create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def _require_dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            raise PlatformError(f"{self.platform} binding {self.binding_id} is not started")
        return self._dispatcher


async def within(awaitable: Awaitable[T], seconds: float = CLOSE_TIMEOUT) -> T | None:
    """Await a polite close for at most `seconds`; None when the peer did not answer in time.

    Cancelling aiohttp's `ClientWebSocketResponse.close()` drops the connection, which is
    exactly what a close the peer does not answer should do.
    """
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        return None


async def read_capped(session: aiohttp.ClientSession, url: str, headers: dict[str, str], max_bytes: int,
                      name: str, *, login_page: bool = False) -> bytes:
    """GET a file, reading at most `max_bytes` (a declared or actual size past it raises
    AttachmentTooLarge). The headers carry the token: never put them in an error.
    `login_page`: the platform answers a refused token with an HTML sign-in page and 200 (Slack)."""
    try:
        return await _read_capped(session, url, headers, max_bytes, name, login_page)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise PlatformError(f"fetching {name}: {type(e).__name__}") from None


async def _read_capped(session: aiohttp.ClientSession, url: str, headers: dict[str, str], max_bytes: int,
                       name: str, login_page: bool) -> bytes:
    async with session.get(url, headers=headers, allow_redirects=True) as response:
        if response.status != 200 or (login_page and response.content_type == "text/html"
                                      and not name.lower().endswith((".html", ".htm"))):
            raise PlatformError(f"fetching {name}: HTTP {response.status} {response.content_type}")
        if response.content_length is not None and response.content_length > max_bytes:
            raise AttachmentTooLarge(f"{name} is {response.content_length} bytes, over the {max_bytes}-byte limit")
        data = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > max_bytes:
                raise AttachmentTooLarge(f"{name} is over the {max_bytes}-byte limit")
        return bytes(data)
