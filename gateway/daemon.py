"""The gateway as one object: start-up, the dispatcher adapters call, and an orderly stop.

Start-up order: database (migrated), the HTTP server, adapters, then the queue left by the
last process. Stop order is the reverse, and each step's failure is logged without skipping
the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bindings.loader import ConfigError, LoadedConfig, load_config
from bindings.models import BindingSpec

from gateway.http import slow_clients
from gateway.http import server as http

from gateway import private_api
from gateway.inbound import pairing
from gateway.adapter_registry import AdapterContext, create_adapter
from gateway.approvals.service import Approvals
from gateway.approvals.questions import Questions
from gateway.clock import Clock
from gateway.periodic import every
from gateway.ops.retention import Pruning
from gateway.inbound.commands import Commands
from gateway.runs.queue import Scheduler
from gateway.outbound.delivery import Outbound
from gateway.http.event_relay import EventRelay
from gateway.http.events import EventBus
from gateway.outbound.typing_indicator import TypingIndicator
from gateway.inbound.pipeline import Inbound
from gateway.inbound.memory_card import MemoryCards, MemoryClick, MemoryClickOutcome
from gateway.membership import Membership
from gateway.messages import InboundMessage
from gateway.ops.metrics import Metrics
from gateway.runs.models_cache import ModelCache
from gateway.runs.runner import Runner
from gateway.runs.warm_up import warm_up
from gateway.runs.stop import Stops
from gateway.spool import spool_directory
from gateway.store import message_index, repo
from gateway.store.availability import NotAccepting, StoreUnavailable
from gateway.store.daemon_lock import DaemonLock, DatabaseInUse, sqlite_file
from gateway.store.engine import SchemaError, create_engine, migrate
from gateway.ops.systemd import Notifier
from gateway.outbound.adapter import Adapter, ApprovalItem, Decision, DecisionOutcome, Sender, StopOutcome, SubmitResult
from gateway.inbound.uploads import Uploads
from gateway.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gateway.mcp.pool import McpPool

log = logging.getLogger("gateway")

SWEEP_EVERY = 20.0  # well inside the run lease, so a live replica never loses its runs
OPENING_WAIT = 10.0  # how long a message arriving during start waits for the gate, then "deliver again"
# The collector's young-generation threshold once started (CPython's default is 700; the older two keep
# theirs, 10 and 10). See `freeze_startup_objects`.
YOUNG_COLLECTION_EVERY = 10_000


class StartupError(Exception):
    """The gateway cannot start with this configuration (the message says why)."""


# gateway.yaml settings that the process reads once, at start (the store's engine, the listener, the
# scheduler's slots, the uploads' memory budget, the adapters' pacers, which a reload keeps unless their
# binding changed): a reload that changes one says so rather than appearing to apply it.
READ_AT_START = ("database", "http", "limits.concurrent_runs", "limits.uploads_max_bytes",
                 "limits.platform_budget_scale")


def _setting(gateway: object, dotted: str) -> object:
    for part in dotted.split("."):
        gateway = getattr(gateway, part)
    return gateway


class Gateway:
    """Implements `gateway.outbound.adapter.Dispatcher` for the adapters it starts."""

    def __init__(self, config: LoadedConfig, *, clock: Clock | None = None, listen: str | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.listen = listen or config.gateway.http.listen
        # Beside the database the process opened (a reload's new `database` waits for a restart too).
        self._spool = spool_directory(config.gateway.database.url, config.directory)
        self.metrics = Metrics()
        self.events = EventBus()
        self.runner = Runner(self)
        # One model client per provider and model, shared by every run (closed in stop).
        self.models = ModelCache(lambda: self.runner.running_ids, config.gateway.limits.shutdown_grace_seconds,
                                 config.gateway.limits.concurrent_runs)
        self.typing_indicator = TypingIndicator(self.clock)  # shown as soon as a message is stored
        # Files uploaded through the API, in memory until their run reads them (one budget for all).
        self.uploads = Uploads(config.gateway.limits.uploads_max_bytes)
        self.adapters: dict[str, Adapter] = {}
        self.store: repo.Store
        self.scheduler: Scheduler
        # The parts start() builds on the store, each handed what it uses (no service locator).
        self.outbound: Outbound
        self.membership: Membership
        self.approvals: Approvals
        self.questions: Questions | None = None
        self.stops: Stops
        self.memory_cards: MemoryCards
        self.inbound: Inbound
        self.mcp: McpPool | None = None  # the MCP servers' connections, once installed
        self.extensions: list[Any] = []  # capabilities' parts: objects with optional start/stop
        self.extra_routes: list[web.AbstractRouteDef] = []  # routes extensions serve (the capability catalog)
        self.warm_ups: list[Callable[[LoadedConfig], None]] = []  # extensions' part of the warm-up (its thread)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._accepting = False
        self._settled = asyncio.Event()  # opened or stopping: a message arriving at start waits for it
        self._sweeper: asyncio.Task[None] | None = None
        self._warm_up: asyncio.Task[None] | None = None  # the models and a first run, after the gate opened
        self.relay: EventRelay | None = None  # the event stream across replicas (PostgreSQL only)
        self.notifier = Notifier()
        self.routes = http.AdapterRoutes()
        self.port = 0
        self._database_lock: DaemonLock | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        missing = private_api.problems(in_use=True)
        if missing:  # a dependency upgraded past what this version was built on
            raise StartupError("; ".join(missing))
        exposure = self.config.gateway.http.exposure_problem(self.listen)
        if exposure is not None:  # the config's own listen was checked at load; this is an override
            raise StartupError(f"http.listen: {exposure}")
        database = self.config.gateway.database
        try:
            engine = create_engine(database.url, busy_timeout=database.busy_timeout_seconds)
            # Held until stop: `db restore` refuses while it is (SQLite; see daemon_lock).
            file = sqlite_file(database.url)
            if file is not None:
                self._database_lock = DaemonLock(file)
                self._database_lock.hold()
        except (OSError, DatabaseInUse) as e:  # SQLite: the file's directory cannot be made; a restore runs
            raise StartupError(_database_failure(database.url, e)) from e
        try:
            await migrate(engine, database.migrate)
        except Exception as e:
            await engine.dispose()
            self._release_database()
            raise StartupError(_database_failure(database.url, e)) from e
        self.store = repo.Store(engine, self.clock, lease_seconds=database.run_lease_seconds)
        if self.store.shared:  # other replicas may serve the browser watching a run of ours
            self.relay = EventRelay(engine, self.store, self.events)
            self.events.relay = self.relay
            await self.relay.start()
        self.scheduler = Scheduler(self.store, self.runner.execute, self.config.gateway.limits.concurrent_runs,
                                   on_active=self.metrics.queue_depth.set)
        adapter_for = lambda binding_id: self.adapters.get(binding_id)  # noqa: E731 - the dict is replaced at start
        self.outbound = Outbound(adapter_for, self.store, self.clock,
                                 lambda platform, kind: self.metrics.platform_errors.labels(platform, kind).inc())
        self.metrics.outbound_pending.set_function(self.outbound.pending)
        self.membership = Membership(adapter_for, self.clock)  # who is in a channel now: deciders, search
        self.approvals = Approvals(self.store, self.outbound, adapter_for, lambda: self.config.bindings,
                                   self.events, self.metrics, self.scheduler.wake, self.membership)
        self.extensions.append(self.approvals)
        self.questions = Questions(self.approvals, adapter_for)
        self.runner.park_handler = self.approvals.park
        self.runner.resume_results = self.approvals.results_for
        self.stops = Stops(self.store, self.approvals, self.runner.stop, sweep_every=SWEEP_EVERY,
                           ended=self.events.run_ended, adapter_for=adapter_for)
        self.memory_cards = MemoryCards(self.store, self.approvals, lambda: self.config.bindings, adapter_for)
        self.inbound = Inbound(config=lambda: self.config, store=self.store,
                               pairing=pairing.through(self.store, self.outbound),
                               commands=Commands(self.store, self.approvals, self.outbound, self.stops,
                                                 self.memory_cards),
                               outbound=self.outbound, scheduler=self.scheduler, metrics=self.metrics,
                               show_typing=lambda conv: self.typing_indicator.show(adapter_for(conv.binding_id),
                                                                                   conv.target(), conv.id),
                               answer_reply=self.questions.reply)
        try:
            from gateway import extensions

            extensions.install(self)
            self.adapters = {b.id: self._adapter_for(b) for b in self.config.bindings.values() if b.enabled}
            app = http.build_app(self)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0,
                                         **slow_clients.runner_options(self.config.gateway.http.header_timeout_seconds))
            await self._runner.setup()
            host, port = self.listen.rpartition(":")[0].strip("[]"), int(self.listen.rpartition(":")[2])
            self._site = web.TCPSite(self._runner, host, port)
            try:
                await self._site.start()
            except OSError as e:
                raise StartupError(_listen_failure(self.listen, e)) from e
            if self._runner.addresses:  # the bound socket tells the real port when 0 was asked
                self.port = self._runner.addresses[0][1]
            for ext in self.extensions:
                if hasattr(ext, "start"):
                    await ext.start()
            for adapter in self.adapters.values():
                await adapter.start(self)
            # The start-up sweep first: on SQLite it requeues every run still marked running (the last
            # process's), which would include a run a message let in meanwhile had just claimed.
            await self.sweep(at_start=True)
            self._accepting = True
            self._settled.set()
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="gateway:sweep")
            self.metrics.start()
            # Not awaited: READY does not wait for it; a message meanwhile is served (gateway.runs.warm_up).
            self._warm_up = asyncio.create_task(warm_up(self.config, self.models, self.warm_ups), name="gateway:warm-up")
        except BaseException:
            await self.stop()
            raise
        log.info("gateway listening on http://%s:%d/", host, self.port)
        self.notifier.start_watchdog()

    async def warmed(self) -> None:
        """Until the start's warm-up has ended (`gateway.runs.warm_up`): the models built, a first run done."""
        if self._warm_up is not None:
            await asyncio.wait([self._warm_up])  # never raises: a failed warm-up logged itself

    async def wait_connected(self, timeout: float) -> list[str]:
        """Wait until every binding is connected, or `timeout`; returns the ones that are not."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            down = [b for b, a in self.adapters.items() if not a.health().connected]
            if not down or loop.time() >= deadline:
                return down
            await asyncio.sleep(0.02)  # only while starting: READY goes out within 20 ms of the last connect

    async def announce_ready(self, timeout: float = 15.0) -> None:
        """READY=1 once bindings have connected or `timeout` passed, naming any that did not."""
        down = await self.wait_connected(timeout)
        status = f"not connected: {', '.join(down)}" if down else f"serving {len(self.adapters)} bindings"
        if down:
            log.warning("bindings not connected after %.0fs: %s", timeout, ", ".join(down))
        self.notifier.ready(status)

    def _adapter_for(self, binding: BindingSpec) -> Adapter:
        return create_adapter(binding, self._adapter_context(self.config))

    def _adapter_context(self, config: LoadedConfig) -> AdapterContext:
        return AdapterContext(config.gateway, clock=self.clock, spool=self._spool)

    # --- reload -------------------------------------------------------------------------

    async def _wait_idle(self, adapters: list[Adapter], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self.runner.uses(a) for a in adapters) and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def reload_from_disk(self) -> tuple[bool, list[str]]:
        """Re-read the config directory; on problems keep the last good config and log each one."""
        from gateway import extensions

        extensions.rescan()  # a capability or adapter package installed since start is found now
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
            missing = private_api.problems(in_use=True)  # a capability the new config binds: checked now
            if missing:
                log.error("reload refused: %s", "; ".join(missing))
                return False, missing
            changed = await self.apply(config)
            log.info("reloaded: %s", ", ".join(changed) if changed else "no binding changed")
            return True, []
        finally:
            self.notifier.ready(f"serving {len(self.adapters)} bindings")

    async def apply(self, config: LoadedConfig) -> list[str]:
        """Swap to `config`: only bindings whose settings changed reconnect; runs in flight keep
        the config they started with (their Turn holds it)."""
        old = self.config
        for key in READ_AT_START:
            if _setting(old.gateway, key) != _setting(config.gateway, key):
                log.warning("gateway.yaml %s changed: it takes effect at the next restart", key)
        wanted = {b.id: b for b in config.bindings.values() if b.enabled}
        changed = [b for b in sorted(set(wanted) | set(self.adapters)) if old.bindings.get(b) != wanted.get(b)]
        replacements: dict[str, Adapter] = {}
        for binding_id in changed:
            if binding_id in wanted:
                replacements[binding_id] = create_adapter(wanted[binding_id], self._adapter_context(config))
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
        for ext in self.extensions:  # what they hold for a config this one no longer names is let go
            if hasattr(ext, "reloaded"):
                ext.reloaded(config)
        await self.models.apply(config.gateway.providers)
        await self.models.warm(config)
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
        # Stops pressed on another replica, or before a crash requeued their runs (before those are woken)
        await self.stops.take_requests(self.runner.running_ids)
        for conversation_id in await self.store.conversations_with_queued_runs():
            self.scheduler.wake(conversation_id)
        await self.approvals.show_unshown(at_start=at_start)  # cards a dead process never posted

    async def _sweep_forever(self) -> None:
        pruning = Pruning(self.store, self.config.gateway.retention, self.clock)

        async def sweep_and_prune() -> None:
            await self.sweep()
            await pruning.when_due()
            await message_index.catch_up(self.store.engine)  # searches catch up too: this keeps theirs short

        await every(min(SWEEP_EVERY, self.store.lease_seconds / 3), sweep_and_prune, "sweep", log)

    async def stop(self, grace: float = 10.0) -> None:
        """Finish what is in flight, then close. Messages that arrive meanwhile are still recorded
        (and so acknowledged) and wait in the store for the next start."""
        self.notifier.stopping()
        await self.metrics.stop()
        if self._sweeper is not None:
            await cancel_and_wait(self._sweeper)
            self._sweeper = None
        # Its thread ends on its own; models it had not handed to `self.models` yet never connected.
        await cancel_and_wait(self._warm_up)
        if hasattr(self, "scheduler"):
            if not await self.scheduler.drain(grace):
                stopped = self.runner.cancel_all()
                log.info("asked %d runs to stop after the %.0fs grace period", stopped, grace)
                await self.scheduler.drain(5.0)
            await self.scheduler.cancel()
        # Adapters stop after the runs, so a run finishing in the grace period can still post.
        self._accepting = False
        self._settled.set()
        await self.typing_indicator.close()
        if hasattr(self, "outbound"):
            await self.outbound.drain(2.0)
        # In parallel: each closes its own connections, none waits for another's peer.
        stopped = await asyncio.gather(*(a.stop() for a in self.adapters.values()), return_exceptions=True)
        for binding_id, error in zip(list(self.adapters), stopped):
            if isinstance(error, Exception):
                log.error("stopping adapter %s", binding_id, exc_info=error)
        for ext in reversed(self.extensions):
            if hasattr(ext, "stop"):
                try:
                    await ext.stop()
                except Exception:  # the rest still stops; the log says which part did not
                    log.exception("stopping %s", type(ext).__name__)
        if self.relay is not None:
            self.events.relay = None
            await self.relay.stop()
            self.relay = None
        await self.models.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.notifier.stop_watchdog()
        if hasattr(self, "store"):
            await self.store.close()
        self._release_database()

    def _release_database(self) -> None:
        if self._database_lock is not None:
            self._database_lock.release()
            self._database_lock = None

    @property
    def url(self) -> str:
        host = self.listen.rpartition(":")[0].strip("[]")
        return f"http://{host}:{self.port}"

    # --- the dispatcher -----------------------------------------------------------------

    async def submit(self, message: InboundMessage) -> SubmitResult:
        """Hand a message to the one inbound path (`gateway.inbound.pipeline`).

        Before the gate opens (a platform connected while later ones still start, or the web API
        answering first) a message waits a little for it; while stopping, or if it stays shut,
        `NotAccepting` tells the adapter that nothing was stored, so it is delivered again."""
        if not self._accepting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), OPENING_WAIT)
            if not self._accepting:
                raise NotAccepting()
        return await self.inbound.submit(message)

    def stored_lately(self, binding_id: str, platform: str, dedupe_key: str) -> bool:
        return self.inbound.stored_lately(binding_id, platform, dedupe_key)

    async def decide(
        self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str, surface: str
    ) -> DecisionOutcome:
        return await self.approvals.decide(approval_id, decision, decider, binding_id=binding_id, surface=surface)

    async def answer(self, question_id: str, choice: int, who: Sender, *, binding_id: str) -> DecisionOutcome:
        assert self.questions is not None
        return await self.questions.answer(question_id, choice, who, binding_id=binding_id)

    async def stop_run(self, run_id: str, who: Sender, *, binding_id: str) -> StopOutcome:
        return await self.stops.stop(run_id, who, binding_id=binding_id)

    async def approval_item(self, approval_id: str, *, binding_id: str) -> ApprovalItem | None:
        return await self.approvals.item_on(binding_id, approval_id)

    async def memory_click(self, click: MemoryClick) -> MemoryClickOutcome:
        return await self.memory_cards.click(click)

    async def get_state(self, binding_id: str, key: str) -> str | None:
        return await self.store.get_state(binding_id, key)

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        await self.store.set_state(binding_id, key, value)

    def publish(self, conversation_id: str, event: dict[str, Any]) -> None:
        self.events.publish(conversation_id, event)

    # --- used by routes -----------------------------------------------------------------

    async def readiness(self) -> dict[str, Any]:
        bindings = {}
        for binding_id, adapter in self.adapters.items():
            h = adapter.health()
            bindings[binding_id] = {"platform": adapter.platform, "connected": h.connected, "detail": h.detail}
        database = await self.store.health()  # "degraded" (writes waiting) still serves: ready
        # Not ready until messages are taken: the HTTP server answers while extensions and adapters
        # are still starting (and while stopping), when a message would be refused.
        ready = self._accepting and database["status"] != "down" and all(b["connected"] for b in bindings.values())
        state: dict[str, Any] = {"ready": ready, "accepting": self._accepting, "database": database,
                                 "bindings": bindings}
        if self.relay is not None:
            state["event_stream"] = self.relay.state()
        for ext in self.extensions:  # informational parts (MCP servers); they do not decide `ready`
            if hasattr(ext, "readiness"):
                state.update(ext.readiness())
        return state


def _listen_failure(listen: str, error: OSError) -> str:
    """What to change when the HTTP server cannot bind `listen` (one line, no traceback)."""
    port = listen.rpartition(":")[2]
    fix = {
        errno.EADDRINUSE: f"another process listens there (`ss -ltnp 'sport = :{port}'` names it): stop it, "
                          "or set http.listen to a free port",
        errno.EADDRNOTAVAIL: "this machine has no such address: set http.listen to one of its addresses",
        errno.EACCES: "a port below 1024 needs privileges: set http.listen to a port above 1023",
    }.get(error.errno or 0, "set http.listen to an address and port this machine can listen on")
    reason = os.strerror(error.errno) if error.errno else str(error)  # aiohttp's own text repeats the address
    return f"http.listen {listen}: {reason}; {fix}"


def _database_failure(url: str, error: Exception) -> str:
    """What to change when the database cannot be opened or migrated at start (the URL without its password)."""
    from sqlalchemy.engine import make_url

    shown = make_url(url).render_as_string(hide_password=True)
    if isinstance(error, (SchemaError, DatabaseInUse)):
        return f"database.url {shown}: {error}"
    if isinstance(error, StoreUnavailable):
        return f"database.url {shown}: the database did not answer ({error}); check that it runs and is reachable"
    return f"database.url {shown}: {type(error).__name__}: {error}"


def freeze_startup_objects() -> None:
    """Keep what start-up built (modules, schemas, config) out of the collector's full passes.

    A full collection walks every tracked object with the event loop stopped: with pydantic-ai,
    SQLAlchemy and the platform SDKs loaded that is about 100 ms, every few thousand messages.
    Frozen objects are skipped, which brings a full pass down to a few ms. Called once, by the
    daemon, after it started (cyclic garbage among frozen objects would never be collected, so
    never again later).

    No collection first: that one full pass was ~0.13 s of start-up CPU on the 2-core machine, to
    free the ~3,000 objects of cyclic garbage start-up leaves (its allocator pages stay mapped
    either way: RSS is the same); they are frozen with the rest.

    The young generation is collected every `YOUNG_COLLECTION_EVERY` allocations, not CPython's 700: a
    model run allocates thousands of short-lived tracked objects (events, parts, pydantic-ai's run
    context copies, the OpenAI SDK's chunk models), and with 32 runs in flight every 700th allocation
    found hundreds of them still alive, walked them and promoted them, so the middle and full passes
    came often too. In a burst (bench/cpu_diff.py, bench/README.md Round 8) that was 1.9 ms of CPU per
    message (1.4 young passes and 0.13 middle ones per message, and a full pass over the in-flight state,
    80 ms with the loop stopped, every ~75 messages); 0.46 ms after, no full pass in 400 messages. The
    cost: fewer, longer young passes (one every ~17 messages of a burst, up to ~16 ms on a loaded
    machine) and cyclic garbage kept up to 10,000 allocations longer (a few MB at most).
    """
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])
    gc.enable()  # `agent-gateway run` keeps the collector off until here (gateway.ops.cli.main)
