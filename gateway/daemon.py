"""The gateway as one object: start-up, the dispatcher adapters call, and an orderly stop.

Start-up order: database (migrated), the HTTP server, adapters, then the queue left by the
last process. Stop order is the reverse, and each step's failure is logged without skipping
the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from adapters.base import AdapterContext, create_adapter
from bindings.loader import ConfigError, LoadedConfig, load_config
from bindings.models import BindingSpec

from . import commands, http
from .admission import admit
from .clock import Clock
from .commands import parse_command
from .conversations import Scheduler
from .events import EventBus
from .first_sign import FirstSign
from .messages import InboundMessage, conversation_key, reply_thread
from .metrics import Metrics
from .models_cache import ModelCache
from .runner import Runner
from .store import repo
from .store.engine import create_engine, migrate
from .systemd import Notifier
from .surface import Adapter, Decision, DecisionOutcome, Sender, SubmitResult, target_for

if TYPE_CHECKING:
    from .approvals import Approvals
    from .pairing import Pairing

log = logging.getLogger("gateway")

SWEEP_EVERY = 20.0  # well inside the run lease, so a live replica never loses its runs


class StartupError(Exception):
    """The gateway cannot start with this configuration (the message says why)."""


class Gateway:
    """Implements `gateway.surface.Dispatcher` for the adapters it starts."""

    def __init__(self, config: LoadedConfig, *, clock: Clock | None = None, listen: str | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.listen = listen or config.gateway.http.listen
        self.metrics = Metrics()
        self.events = EventBus()
        self.runner = Runner(self)
        # One model client per provider and model, shared by every run (closed in stop).
        self.models = ModelCache(lambda: self.runner.running_ids, config.gateway.limits.shutdown_grace_seconds)
        self.first_sign = FirstSign()  # the typing indicator, shown as soon as a message is stored
        self.adapters: dict[str, Adapter] = {}
        self.store: repo.Store
        self.scheduler: Scheduler
        self.extensions: list[Any] = []  # approvals, capabilities: objects with optional start/stop
        self.extra_routes: list[web.AbstractRouteDef] = []  # routes extensions serve (the capability catalog)
        self.approvals: Approvals | None = None
        self.pairing: Pairing | None = None
        self.conversation_extras: Callable[[str], Awaitable[dict[str, Any]]] | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._accepting = False
        self._sweeper: asyncio.Task[None] | None = None
        self.notifier = Notifier()
        self._key_locks = KeyedLocks()
        self.routes = http.AdapterRoutes()
        self.port = 0

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        _check_listen(self.listen, self.config)
        engine = create_engine(self.config.gateway.database.url)
        try:
            await migrate(engine)
        except Exception:
            await engine.dispose()
            raise
        self.store = repo.Store(engine, self.clock)
        self.scheduler = Scheduler(self.store, self.runner.execute, self.config.gateway.limits.concurrent_runs)
        try:
            from . import extensions

            extensions.install(self)
            self.adapters = {b.id: self._adapter_for(b) for b in self.config.bindings.values() if b.enabled}
            app = http.build_app(self)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
            await self._runner.setup()
            host, port = self.listen.rpartition(":")[0].strip("[]"), int(self.listen.rpartition(":")[2])
            self._site = web.TCPSite(self._runner, host, port)
            await self._site.start()
            server = self._site._server  # the bound socket tells the real port when 0 was asked
            if server is not None and server.sockets:
                self.port = server.sockets[0].getsockname()[1]
            for ext in self.extensions:
                if hasattr(ext, "start"):
                    await ext.start()
            for adapter in self.adapters.values():
                await adapter.start(self)
            self._accepting = True
            await self.sweep(at_start=True)
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="gateway:sweep")
        except BaseException:
            await self.stop()
            raise
        log.info("gateway listening on http://%s:%d/", host, self.port)
        self.notifier.start_watchdog()

    async def wait_connected(self, timeout: float) -> list[str]:
        """Wait until every binding is connected, or `timeout`; returns the ones that are not."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            down = [b for b, a in self.adapters.items() if not a.health().connected]
            if not down or loop.time() >= deadline:
                return down
            await asyncio.sleep(0.1)

    async def announce_ready(self, timeout: float = 15.0) -> None:
        """READY=1 once bindings have connected or `timeout` passed, naming any that did not."""
        down = await self.wait_connected(timeout)
        status = f"not connected: {', '.join(down)}" if down else f"serving {len(self.adapters)} bindings"
        if down:
            log.warning("bindings not connected after %.0fs: %s", timeout, ", ".join(down))
        self.notifier.ready(status)

    def _adapter_for(self, binding: BindingSpec) -> Adapter:
        return create_adapter(binding, AdapterContext(self.config.gateway))

    # --- reload -------------------------------------------------------------------------

    async def _wait_idle(self, adapters: list[Adapter], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self.runner.uses(a) for a in adapters) and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def reload_from_disk(self) -> tuple[bool, list[str]]:
        """Re-read the config directory; on problems keep the last good config and log each one."""
        from . import extensions

        extensions.register_checks()
        self.notifier.reloading()
        try:
            try:
                config = load_config(self.config.directory)
            except ConfigError as e:
                problems = [str(p) for p in e.problems if not p.warning]
                for problem in problems:
                    log.error("reload refused: %s", problem)
                return False, problems
            changed = await self.apply(config)
            log.info("reloaded: %s", ", ".join(changed) if changed else "no binding changed")
            return True, []
        finally:
            self.notifier.ready(f"serving {len(self.adapters)} bindings")

    async def apply(self, config: LoadedConfig) -> list[str]:
        """Swap to `config`: only bindings whose settings changed reconnect; runs in flight keep
        the config they started with (their Turn holds it)."""
        old = self.config
        for key in ("database", "http"):
            if getattr(old.gateway, key) != getattr(config.gateway, key):
                log.warning("gateway.yaml %s changed: it takes effect at the next restart", key)
        wanted = {b.id: b for b in config.bindings.values() if b.enabled}
        changed = [b for b in sorted(set(wanted) | set(self.adapters)) if old.bindings.get(b) != wanted.get(b)]
        replacements: dict[str, Adapter] = {}
        for binding_id in changed:
            if binding_id in wanted:
                replacements[binding_id] = create_adapter(wanted[binding_id], AdapterContext(config.gateway))
        # Runs in flight on a changed binding finish on the adapter they started with (within the
        # shutdown grace); only then does it stop, and its replacement starts (Telegram allows one
        # poller at a time, so the two never overlap).
        retiring = [a for b, a in self.adapters.items() if b in changed]
        await self._wait_idle(retiring, self.config.gateway.limits.shutdown_grace_seconds)
        for binding_id in changed:
            previous = self.adapters.pop(binding_id, None)
            if previous is not None:
                try:
                    await previous.stop()
                except Exception:
                    log.exception("stopping adapter %s", binding_id)
        self.config = config
        await self.models.apply(config.gateway.providers)
        for binding_id, adapter in replacements.items():
            self.adapters[binding_id] = adapter
            await adapter.start(self)
        self.routes.rebuild(self.adapters.values())
        return changed

    async def sweep(self, *, at_start: bool = False) -> None:
        """Requeue runs whose replica died, keep our leases, and wake conversations with work waiting.

        At start-up this picks up the queue the last process left; afterwards it is the safety
        net for work another replica queued or left behind.
        """
        await self.store.renew_leases(list(self.runner.running_ids))
        interrupted = await self.store.requeue_interrupted(at_start=at_start)
        if interrupted:
            log.info("requeued runs interrupted in %d conversations", len(interrupted))
        for conversation_id in await self.store.conversations_with_queued_runs():
            self.scheduler.wake(conversation_id)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            try:
                await self.sweep()
            except Exception:
                log.exception("sweep failed")

    async def stop(self, grace: float = 10.0) -> None:
        """Finish what is in flight, then close. Messages that arrive meanwhile are still recorded
        (and so acknowledged) and wait in the store for the next start."""
        self.notifier.stopping()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if hasattr(self, "scheduler"):
            if not await self.scheduler.drain(grace):
                stopped = self.runner.cancel_all()
                log.info("asked %d runs to stop after the %.0fs grace period", stopped, grace)
                await self.scheduler.drain(5.0)
            await self.scheduler.cancel()
        # Adapters stop after the runs, so a run finishing in the grace period can still post.
        self._accepting = False
        await self.first_sign.close()
        for binding_id, adapter in list(self.adapters.items()):
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping adapter %s", binding_id)
        for ext in reversed(self.extensions):
            if hasattr(ext, "stop"):
                with contextlib.suppress(Exception):
                    await ext.stop()
        await self.models.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.notifier.stop_watchdog()
        if hasattr(self, "store"):
            await self.store.close()

    @property
    def url(self) -> str:
        host = self.listen.rpartition(":")[0].strip("[]")
        return f"http://{host}:{self.port}"

    # --- the dispatcher -----------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> SubmitResult:
        binding = self.config.bindings.get(message.binding_id)
        if binding is None or not self._accepting:
            return SubmitResult(False, reason="not accepting messages")
        key = conversation_key(message)
        # One message of a conversation at a time: a thread reply that arrives while its root
        # mention is being recorded must see the conversation the mention creates.
        async with self._key_locks.hold(key):
            return await self._submit(binding, message, key)

    async def _submit(self, binding: BindingSpec, message: InboundMessage, key: str) -> SubmitResult:
        platform = message.platform
        event_id = f"{platform}:{message.event_id}"
        existing = await self.store.conversation_by_key(key)
        # Only a thread counts as "the bot is part of it"; a whole group chat does not.
        in_conversation = existing is not None and message.thread is not None
        decision = admit(binding, message, in_conversation=in_conversation)
        if not decision.admitted and message.chat_kind.value == "dm" and binding.dm_policy in ("pairing", "allowlist"):
            # Only a DM turned away for who sent it needs the pairing table.
            decision = admit(binding, message, in_conversation=in_conversation, sender_allowed=await self._paired(message))
        if not decision.admitted:
            duplicate = await self.store.seen(binding.id, [event_id])
            self.metrics.messages_in.labels(platform, "duplicate" if duplicate else "ignored").inc()
            if decision.needs_pairing and not duplicate:
                await self._pairing_reply(message)
            return SubmitResult(False, duplicate=duplicate, reason=decision.reason)
        identity = await self.store.identify(
            platform, message.workspace, message.sender.account_id, message.sender.display_name
        )
        command = parse_command(message.text)
        if command is not None and command.name == "approvals" and self.approvals is not None:
            return await commands.approvals_command(self, message, command.args, key, existing)
        if command is not None and command.name == "memory":
            return await commands.memory_command(self, message, command.raw_args, identity.person_id, binding.agent)
        event_ids = [event_id] + ([f"{platform}:same:{message.dedupe_key}"] if message.dedupe_key else [])
        ref = repo.ConversationRef(
            id=existing.id if existing else "",
            key=key,
            platform=platform,
            binding_id=binding.id,
            workspace=message.workspace,
            channel=message.channel,
            thread=reply_thread(message),
            chat_kind=message.chat_kind.value,
        )
        try:
            ingested = await self.store.ingest(
                binding_id=binding.id,
                event_ids=event_ids,
                conversation=ref,
                identity=identity,
                account_id=message.sender.account_id,
                text=_with_attachments(message),
                agent_id=binding.agent,
                platform_message_id=message.message_id,
                queue_limit=self.config.gateway.limits.queued_messages_per_conversation,
            )
        except repo.Duplicate:
            self.metrics.duplicates.labels(platform).inc()
            self.metrics.messages_in.labels(platform, "duplicate").inc()
            return SubmitResult(False, duplicate=True, reason="duplicate")
        except repo.QueueFull:
            self.metrics.messages_in.labels(platform, "busy").inc()
            await self._tell_busy(message, ref)
            return SubmitResult(False, reason="busy")
        self.metrics.messages_in.labels(platform, "accepted").inc()
        await self.first_sign.show(self.adapters.get(binding.id), ingested.conversation.target(), ingested.conversation.id)
        self.scheduler.wake(ingested.conversation.id)
        return SubmitResult(
            True,
            conversation_id=ingested.conversation.id,
            message_id=str(ingested.message_id),
            run_id=ingested.run_id,
        )

    async def _tell_busy(self, message: InboundMessage, ref: repo.ConversationRef) -> None:
        adapter = self.adapters.get(message.binding_id)
        if adapter is None:
            return
        target = target_for(message)
        text = "I'm still working on earlier messages in this conversation; please send that again in a moment."
        with contextlib.suppress(Exception):
            await adapter.tell_privately(target, message.sender.account_id, text)

    async def _paired(self, message: InboundMessage) -> bool:
        return self.pairing is not None and await self.pairing.is_paired(message)

    async def _pairing_reply(self, message: InboundMessage) -> None:
        if self.pairing is not None:
            await self.pairing.challenge(message)

    async def decide(
        self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str, surface: str
    ) -> DecisionOutcome:
        if self.approvals is None:
            return DecisionOutcome(False, "Approvals are not available on this gateway.")
        return await self.approvals.decide(approval_id, decision, decider, binding_id=binding_id, surface=surface)

    async def get_state(self, binding_id: str, key: str) -> str | None:
        return await self.store.get_state(binding_id, key)

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        await self.store.set_state(binding_id, key, value)

    # --- used by routes -----------------------------------------------------------------

    async def readiness(self) -> dict[str, Any]:
        bindings = {}
        for binding_id, adapter in self.adapters.items():
            h = adapter.health()
            bindings[binding_id] = {"platform": adapter.platform, "connected": h.connected, "detail": h.detail}
        database = True
        try:
            async with self.store.engine.connect() as conn:
                await conn.exec_driver_sql("SELECT 1")
        except Exception:
            database = False
        ready = database and all(b["connected"] for b in bindings.values())
        state: dict[str, Any] = {"ready": ready, "database": database, "bindings": bindings}
        for ext in self.extensions:  # informational parts (MCP servers); they do not decide `ready`
            if hasattr(ext, "readiness"):
                state.update(ext.readiness())
        return state


class KeyedLocks:
    """An asyncio lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def _with_attachments(message: InboundMessage) -> str:
    if not message.attachments:
        return message.text
    files = "; ".join(
        f"{a.name} ({a.mime_type}{f', {a.size} bytes' if a.size is not None else ''})" for a in message.attachments
    )
    return f"{message.text}\n\n[Files shared with this message: {files}]".strip()


def _check_listen(listen: str, config: LoadedConfig) -> None:
    host = listen.rpartition(":")[0].strip("[]")
    if host in ("localhost", ""):
        loopback = host == "localhost"
    else:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback and config.gateway.http.api_token is None:
        raise StartupError(
            f"http.listen is {listen}, beyond loopback, but http.api_token is not set: "
            "set http.api_token (e.g. env:AGENT_GATEWAY_API_TOKEN) or listen on 127.0.0.1"
        )


def freeze_startup_objects() -> None:
    """Keep what start-up built (modules, schemas, config) out of the collector's full passes.

    A full collection walks every tracked object with the event loop stopped: with pydantic-ai,
    SQLAlchemy and the platform SDKs loaded that is about 100 ms, every few thousand messages.
    Frozen objects are skipped, which brings a full pass down to a few ms. Called once, by the
    daemon, after it started (cyclic garbage among frozen objects would never be collected, so
    never again later).
    """
    gc.collect()
    gc.freeze()
