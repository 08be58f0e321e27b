"""The gateway as one object: start-up, the dispatcher adapters call, and an orderly stop.

Start-up order: database (migrated), the HTTP server, adapters, then the queue left by the
last process. Stop order is the reverse, and each step's failure is logged without skipping
the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from typing import Any

from aiohttp import web

from adapters.base import AdapterContext, create_adapter
from bindings.loader import LoadedConfig

from . import http
from .admission import admit
from .clock import Clock
from .conversations import Scheduler
from .events import EventBus
from .messages import InboundMessage, conversation_key, reply_thread
from .metrics import Metrics
from .runner import Runner
from .store import repo
from .store.engine import create_engine, migrate
from .surface import Adapter, Decision, DecisionOutcome, ReplyTarget, Sender, SubmitResult

log = logging.getLogger("gateway")


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
        self.adapters: dict[str, Adapter] = {}
        self.store: repo.Store
        self.scheduler: Scheduler
        self.extensions: list[Any] = []  # approvals, capabilities: objects with optional start/stop
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._accepting = False
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
            for binding_id, binding in self.config.bindings.items():
                if binding.enabled:
                    self.adapters[binding_id] = create_adapter(binding, AdapterContext(self.config.gateway))
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
            for binding_id, adapter in self.adapters.items():
                await adapter.start(self)
            self._accepting = True
            interrupted = await self.store.requeue_interrupted()
            if interrupted:
                log.info("requeued %d runs interrupted by the last stop", interrupted)
            for conversation_id in await self.store.conversations_with_queued_runs():
                self.scheduler.wake(conversation_id)
        except BaseException:
            await self.stop()
            raise
        log.info("gateway listening on http://%s:%d/", host, self.port)

    async def stop(self, grace: float = 10.0) -> None:
        self._accepting = False
        for binding_id, adapter in list(self.adapters.items()):
            try:
                await adapter.stop()
            except Exception:
                log.exception("stopping adapter %s", binding_id)
        if hasattr(self, "scheduler"):
            if not await self.scheduler.drain(grace):
                stopped = self.runner.cancel_all()
                log.info("asked %d runs to stop after the %.0fs grace period", stopped, grace)
                await self.scheduler.drain(5.0)
            await self.scheduler.cancel()
        for ext in reversed(self.extensions):
            if hasattr(ext, "stop"):
                with contextlib.suppress(Exception):
                    await ext.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if hasattr(self, "store"):
            await self.store.close()

    @property
    def url(self) -> str:
        host = self.listen.rpartition(":")[0].strip("[]")
        return f"http://{host}:{self.port}"

    # --- the dispatcher -----------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> SubmitResult:
        binding = self.config.bindings.get(message.binding_id)
        platform = message.platform
        if binding is None or not self._accepting:
            return SubmitResult(False, reason="not accepting messages")
        event_id = f"{platform}:{message.event_id}"
        key = conversation_key(message)
        existing = await self.store.conversation_by_key(key)
        # Only a thread counts as "the bot is part of it"; a whole group chat does not.
        in_conversation = existing is not None and message.thread is not None
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
        target = ReplyTarget(
            message.platform, message.binding_id, message.workspace, message.channel, ref.thread, message.chat_kind
        )
        text = "I'm still working on earlier messages in this conversation; please send that again in a moment."
        with contextlib.suppress(Exception):
            await adapter.tell_privately(target, message.sender.account_id, text)

    async def _paired(self, message: InboundMessage) -> bool:
        pairing = getattr(self, "pairing", None)
        return bool(pairing and await pairing.is_paired(message))

    async def _pairing_reply(self, message: InboundMessage) -> None:
        pairing = getattr(self, "pairing", None)
        if pairing is not None:
            await pairing.challenge(message)

    async def decide(
        self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str, surface: str
    ) -> DecisionOutcome:
        approvals = getattr(self, "approvals", None)
        if approvals is None:
            return DecisionOutcome(False, "Approvals are not available on this gateway.")
        return await approvals.decide(approval_id, decision, decider, binding_id=binding_id, surface=surface)

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
        return {"ready": ready, "database": database, "bindings": bindings}


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


async def run_until_signalled(gateway: Gateway, stop: asyncio.Event) -> None:
    async with gateway:
        await stop.wait()
