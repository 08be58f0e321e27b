"""One run at a time per conversation, in arrival order, under a global limit.

The queue itself is the store (queued runs and their messages), so what was acknowledged to
a platform survives a restart. In memory there is only one worker task per conversation with
work waiting; `wake` starts it, and it drains the conversation's queued runs one by one.

A message into an idle conversation skips the queue's round trip: the inbound step `reserve`s a
slot under the limit first, the store takes the message and claims its run in one transaction
(`Store.ingest(start=True)`), and `start` runs it at once in a new worker, which then drains the
queue as any other. Nothing waits in memory holding a claimed run: the slot is taken before the claim.

Under a burst most runs wait for a slot. On SQLite the run whose end frees one claims the next waiting
conversation's run in its end's transaction (`Store.end_run`, `repo.Handoff`): one COMMIT instead of two.
That claim is made in the slot still held by the run ending (it is given back right after), and handed
to the worker the limit wakes with that slot: the waiters are kept in the order the limit wakes them.
A claim that fails there never fails the end: the end is recorded without it and the worker claims for
itself. A Stop of a claim waiting so is kept for the run's start (`holds`, `Runner.stop`).

A claim that raises every time (a row sqlite3 cannot read) ends the run it would take `failed` and sets its
messages aside, once (`_unclaimable`): the worker, the conversation's later runs and the sweep go on. Every time
means twice in a row: after a first failure the run stays queued for the next sweep (`_failed_before`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.store.availability import StoreUnavailable
from gateway.store.repo import Claimed, Store
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.runs.queue")


class Scheduler:
    def __init__(self, store: Store, execute: Callable[[Claimed], Awaitable[None]], concurrent_runs: int,
                 *, on_active: Callable[[int], None] = lambda n: None) -> None:
        self.store = store
        self.execute = execute
        self._on_active = on_active  # the `gateway_conversations_active` gauge
        self.limit = asyncio.Semaphore(concurrent_runs)
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._closed = False
        # The hand-off of a claim from a run's end (SQLite): runs our workers execute (each end hands over
        # once), conversations whose worker waits for a slot in the order the limit wakes them, and the
        # claims made for them: (made, claimed), or made False when the end failed before claiming.
        self._running: set[str] = set()
        self._waiting: dict[str, None] = {}
        self._handed: dict[str, asyncio.Future[tuple[bool, Claimed | None]]] = {}
        self._claim_failed: set[str] = set()  # conversations whose last claim raised (`_failed_before`)
        if not store.shared:
            store.handoff = self

    def wake(self, conversation_id: str) -> None:
        """Make sure the conversation's queued runs get run; cheap to call repeatedly."""
        if self._closed:
            return
        task = self._workers.get(conversation_id)
        if task is not None and not task.done():
            self._again.add(conversation_id)  # it may be past its last claim: look once more
            return
        self._keep(conversation_id, asyncio.create_task(self._work(conversation_id), name=f"conversation:{conversation_id}"))

    async def reserve(self, conversation_id: str | None) -> bool:
        """A slot under the limit for a run that starts from its message's ingest (`start`), taken now
        or not at all: only when the limit has room and the conversation has no worker (an unknown
        conversation has none). `unreserve` gives it back when the ingest did not claim the run."""
        if self._closed or self.limit.locked():
            return False
        task = self._workers.get(conversation_id) if conversation_id else None
        if task is not None and not task.done():
            return False
        await self.limit.acquire()  # not locked: taken without waiting
        return True

    def unreserve(self) -> None:
        self.limit.release()

    def start(self, claimed: Claimed) -> None:
        """Run a run claimed with its ingest, in the slot `reserve` took; the worker then goes on
        with the conversation's queue like any other."""
        conversation_id = claimed.run.conversation_id
        self._keep(conversation_id, asyncio.create_task(self._work(conversation_id, claimed),
                                                        name=f"conversation:{conversation_id}"))

    def _keep(self, conversation_id: str, task: asyncio.Task[None]) -> None:
        # Under an eager task factory (runtime.eager_tasks) a worker with nothing to do has already
        # ended here, before it could be kept: keeping it would leave a dead entry per conversation.
        if not task.done():
            self._workers[conversation_id] = task
            self._on_active(len(self._workers))

    async def _work(self, conversation_id: str, first: Claimed | None = None) -> None:
        backoff = 0.0
        try:
            while not self._closed or first is not None:
                self._again.discard(conversation_id)
                if backoff:
                    await asyncio.sleep(backoff)  # outside the limit: other conversations go on
                if first is None:
                    await self._slot(conversation_id)
                try:  # the slot is held from here (`first`: since its `reserve`)
                    try:
                        claimed = first or await self._claim(conversation_id)
                    except Exception as e:  # a busy database is waited out in the claim: this may fail every time
                        claimed = None
                        if self._failed_before(conversation_id, e) and await self._unclaimable(conversation_id, e):
                            self._again.add(conversation_id)  # the conversation's later runs go on
                    else:
                        self._claim_failed.discard(conversation_id)
                    first = None
                    if claimed is None:
                        if conversation_id in self._again:
                            continue
                        return
                    try:
                        self._running.add(claimed.run.id)
                        await self.execute(claimed)
                        backoff = 0.0
                    except asyncio.CancelledError:
                        raise
                    except StoreUnavailable as e:
                        # The database failed the run before it could record an end: it goes back
                        # to the queue and runs again once the database answers (what it had
                        # posted is continued then, gateway.outbound.orphans), not after a lease.
                        log.warning("run %s interrupted, it runs again: the database is busy (%s)", claimed.run.id, e)
                        await self.store.patiently(lambda: self.store.release_run(claimed.run.id),
                                                   f"requeueing run {claimed.run.id}")
                        backoff = min(max(backoff * 2, 0.2), max(self.store.busy_timeout, 1.0))
                        self._again.add(conversation_id)
                        continue
                    except Exception:  # the runner records outcomes; this is a bug guard
                        log.exception("run %s crashed", claimed.run.id)
                    finally:
                        self._running.discard(claimed.run.id)
                finally:
                    self.limit.release()
                # With one process on the database every message queued since the claim woke
                # this worker, and the claim said what was queued before it: an empty look can
                # be skipped. Replicas must look, another one may have queued work.
                if not (self.store.shared or claimed.more or conversation_id in self._again):
                    return
        finally:
            self._handed.pop(conversation_id, None)  # cancelled while waiting (a stop): a start requeues its run
            if self._workers.get(conversation_id) is asyncio.current_task():
                del self._workers[conversation_id]
                self._on_active(len(self._workers))

    async def _slot(self, conversation_id: str) -> None:
        """A slot under the limit; while it is waited for, the conversation is among `_waiting`, in the
        order the limit wakes its waiters (first come, first woken)."""
        if not self.limit.locked():
            await self.limit.acquire()  # not locked: taken without waiting
            return
        self._waiting[conversation_id] = None
        try:
            await self.limit.acquire()
        finally:
            del self._waiting[conversation_id]

    def _failed_before(self, conversation_id: str, error: Exception) -> bool:
        """Whether the conversation's claim failed at its last try too. A first failure is only told: the run stays
        queued and the next sweep's wake tries again, so one that passes (a constraint an operator's session
        broke for a moment) loses nothing; a second in a row is a claim that fails every time."""
        if conversation_id in self._claim_failed:
            self._claim_failed.discard(conversation_id)  # a later run's claim starts afresh
            return True
        self._claim_failed.add(conversation_id)
        log.warning("conversation %s: its next run could not be claimed (%s); tried again at the next sweep",
                    conversation_id, type(error).__name__, extra={"conversation": conversation_id})
        return False

    async def _unclaimable(self, conversation_id: str, error: Exception) -> bool:
        """A claim that raised for anything but a busy database (a row sqlite3 cannot read, a constraint) raises
        again at every try: the run it would take ends `failed`, once, and the worker (and every later sweep)
        goes on. The error's type is logged, never its text: it can quote the row. False when it failed too."""
        try:
            run_id = await self.store.fail_unclaimable(conversation_id, f"could not be claimed: {type(error).__name__}")
        except Exception as e:
            log.error("conversation %s: its next run could not be claimed (%s) nor ended failed (%s)",
                      conversation_id, type(error).__name__, type(e).__name__)
            return False
        if run_id is None:
            log.error("conversation %s: a claim failed (%s), and no run was waiting to end", conversation_id,
                      type(error).__name__)
            return False
        log.error("run %s could not be claimed (%s): it ended failed, its messages set aside",
                  run_id, type(error).__name__, extra={"conversation": conversation_id, "run": run_id})
        return True

    async def _claim(self, conversation_id: str) -> Claimed | None:
        """The conversation's next run: the one a run's end claimed for it, else claimed now."""
        handed = self._handed.get(conversation_id)
        if handed is not None:
            try:
                made, claimed = await handed  # the end's transaction may still be committing
            finally:
                del self._handed[conversation_id]
            if made:
                return claimed
        return await self.store.claim_next_run(conversation_id)

    def next_after(self, run_id: str) -> str | None:
        """`repo.Handoff`: the first waiting conversation nothing was claimed for yet, if `run_id` is a run of
        ours whose end frees its slot. That is whom the limit wakes next with a slot: each earlier waiter
        was handed a claim by an end whose slot wakes it, or has been woken already."""
        if run_id not in self._running:
            return None
        self._running.discard(run_id)
        for conversation_id in self._waiting:
            if conversation_id not in self._handed:
                self._handed[conversation_id] = asyncio.get_running_loop().create_future()
                return conversation_id
        return None

    def handed(self, conversation_id: str, claimed: Claimed | None, made: bool) -> None:
        handed = self._handed.get(conversation_id)
        if handed is not None and not handed.done():
            handed.set_result((made, claimed))

    def holds(self, run_id: str) -> bool:
        """Whether `run_id` was claimed here and has not ended: a worker executes it, or it was claimed for a
        worker still waiting for its slot (`held`). A Stop of one not started yet is kept for its start."""
        return run_id in self._running or run_id in self.held()

    def held(self) -> list[str]:
        """`repo.Handoff`: the runs claimed for a waiting worker that has not taken its claim yet. It waits for
        the ending run's slot, given back only after that run's tail (a card's post, a budget's wait)."""
        return [claimed.run.id for f in self._handed.values() if f.done()
                for made, claimed in [f.result()] if made and claimed is not None]

    @property
    def active(self) -> int:
        return sum(1 for t in self._workers.values() if not t.done())

    async def drain(self, timeout: float) -> bool:
        """Stop starting runs; wait up to `timeout` for those in flight. True if all finished."""
        self._closed = True
        tasks = [t for t in self._workers.values() if not t.done()]
        if not tasks:
            return True
        _done, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def cancel(self) -> None:
        await cancel_and_wait(*self._workers.values())
        self._workers.clear()
