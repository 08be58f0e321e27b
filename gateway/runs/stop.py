"""Stop: a person ends a run in flight or waiting in its queue — from a Stop control on the streaming reply, `/stop`, or the API.

Every door asks here, so the rule is one: the run's requester or one of the binding's
deciders may stop it (asked of `gateway.approvals.service`, the same deciders as a card), anyone
else changes nothing and alone is told why. A stop cancels the run through its
cancellation token (pydantic-ai keeps the messages so far); the runner then ends it as
`stopped` with a line saying who stopped it and what it had done. A run still waiting in the queue (for a
slot, or behind the conversation's run) ends `stopped` at once, the same line posted, its messages kept as
history asked but not answered, its model never asked; `/stop` stops the conversation's queued runs with
its run in flight. A run this process claimed and
has not started yet (its worker waits for a slot the run before it still holds, or fetches the run's
files) is stopped too: it starts stopped, the model never asked (`Runner.stop`). A run parked on an
approval card is stopped by closing the card (nothing on it runs). A run streaming on another
replica is asked to stop through the store (capability state `stop`/`requests`, keyed by run
id); the replica holding its lease picks the request up at its next sweep and stops it there. Every stop of
a running run is stored so before the person is told "Stopping.": a run a crash puts back in the queue first
(claimed and not started, or cut mid-way) is stopped by the next sweep, its model never asked again. A waiting
run's stopped line is kept with its end (`stop`/`lines`) until it is posted, so a crash loses no line (the history
keeps it once, from that same end, however many posts the platform refuses); a run
that had posted part of a reply before it went back to the queue ends in that reply (`ReplyStream.close_with`).
Stop on a turn also stops the background runs it started (`gateway.runs.background`), and `/stop` with
no turn in flight stops the conversation's background runs, for the same people.

The Stop control itself is an adapter feature (`ShowsStopControl` in `gateway.outbound.adapter`):
the runner shows it when the reply is first posted and takes it away when the reply is final.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.approvals.service import Approvals
from gateway.store import repo
from gateway.outbound.adapter import (Adapter, FinalEditTakesStop, ReplyTarget, Sender, ShowsStopControl,
                                      StopOutcome, offered)
from gateway.outbound.delivery import ReplyStream

log = logging.getLogger("gateway.runs.stop")

# Capability state: a stop of a running run that has not ended yet (for a run on another replica, or claimed here
# and not started: a restart requeues it, and the stop is honoured then), and a queued run's stopped line not posted yet.
STOP, REQUESTS, LINES = "stop", "requests", "lines"


class Stops:
    """Who may stop a run, and the stop itself."""

    def __init__(self, store: repo.Store, approvals: Approvals,
                 cancel: Callable[[str, str], bool], *, sweep_every: float,
                 ended: Callable[[str, str, str], None], adapter_for: Callable[[str], Adapter | None]) -> None:
        """`cancel(run_id, who)`: cancel a run in flight in this process; False when it is not here.
        `sweep_every`: how often each replica looks for stop requests other replicas stored.
        `ended(conversation_id, run_id, status)`: a run stopped before it started (the event a page hears)."""
        self._store, self._approvals, self._cancel = store, approvals, cancel
        self._sweep_every = sweep_every
        self._ended = ended
        self._adapter_for = adapter_for
        self._posting: set[str] = set()  # runs whose stopped line is being posted (`post_lines`)
        # Background runs (`gateway.runs.background`), once installed: Stop on a turn stops the ones it started.
        self.background: BackgroundStops | None = None

    async def stop(self, run_id: str, who: Sender, *, binding_id: str | None = None, post: bool = True) -> StopOutcome:
        """Stop `run_id` for `who` if they may; `binding_id` (when given) must be the run's own binding. `post`: a
        waiting run's stopped line is posted before this returns; else the caller posts it (`post_lines`)."""
        run = await self._store.run(run_id)
        if run is None and self.background is not None:  # a background run's id: stopped by its turn's rule
            parent_id = await self.background.parent_of(run_id)
            return await self._stop_one_background(run_id, parent_id, who, binding_id)
        conv = await self._store.conversation(run.conversation_id) if run is not None else None
        if run is None or conv is None or (binding_id is not None and run.binding_id != binding_id):
            return StopOutcome(False, "There is no such run.", 404)
        if not await self._approvals.may_stop(run, conv, who):
            return StopOutcome(False, f"Only {run.requester_name or 'the person who asked'} or someone who may "
                                      "decide approvals here can stop this.", 403)
        name = who.display_name or who.account_id
        children = await self.background.stop_children(run_id, name) if self.background is not None else 0
        if run.status == repo.QUEUED:  # still waiting in the queue: it ends here, before it starts
            # Others' messages may have joined it: each is stopped by its own asker's rule, the rest still wait.
            senders = [s for s in await self._store.queued_senders(run.id)
                       if await self._approvals.may_stop_for(run.binding_id, conv, who, *s)]
            if await self._stop_queued(run, conv, name, senders):
                if post:
                    await self.post_lines()
                return StopOutcome(True, "Stopped.")
            run = await self._store.run(run_id) or run  # claimed meanwhile: stopped as it runs now
        if run.status in repo.ENDED:
            if children:
                return StopOutcome(True, f"Stopping the {_runs(children)} it started in the background.")
            return StopOutcome(False, "That reply has already ended.", 409)
        if run.status == repo.PARKED:  # waiting on an approval card: close it with the run
            if await self._approvals.stop_parked(run, conv, who):
                return StopOutcome(True, "Stopped.")
            return StopOutcome(False, "That reply has already moved on; try again.", 409)
        if run.status != repo.RUNNING:
            return StopOutcome(False, "That reply is not running.", 409)
        # Stored before anyone is told "Stopping.": a run that is claimed here and not started yet, or one a
        # crash ends before its stop lands, is requeued at the next start, and the sweep stops it then.
        await self._store.capability_state.put(STOP, REQUESTS, run_id, name)
        if self._cancel(run_id, name):
            return StopOutcome(True, "Stopping.")
        if run.lease_owner == self._store.owner:  # ours by the lease but no longer in flight: it just ended
            await self._store.capability_state.delete(STOP, REQUESTS, run_id)
            return StopOutcome(False, "That reply has already ended.", 409)
        return StopOutcome(True, "Stopping: another gateway process is writing that reply; it stops there within "
                                 f"{self._sweep_every:g} s.")

    async def take_requests(self, running_here: list[str]) -> int:
        """At each sweep (after requeueing what a dead process left): stop the runs in flight here that a person
        asked another replica to stop, and those a stop reached before a crash put them back in the queue (they
        end `stopped`, their model never asked again); post the stopped lines a crash kept from being posted;
        forget requests for runs that ended. Returns how many were stopped."""
        state = self._store.capability_state
        stopped = 0
        kept = await state.by_scope(STOP)  # one read a sweep for both: mostly there is nothing
        for run_id, who in kept.get(REQUESTS, {}).items():
            if run_id in running_here:
                stopped += self._cancel(run_id, who)
                await state.delete(STOP, REQUESTS, run_id)
                continue
            run = await self._store.run(run_id)
            conv = await self._store.conversation(run.conversation_id) if run is not None else None
            if run is not None and conv is not None and run.status == repo.QUEUED:
                # Its stopper was allowed then, and it holds what it held then: a run that was claimed takes no
                # message after (`ingest` joins only runs never started), so nobody's message joined it since.
                stopped += await self._stop_queued(run, conv, who, await self._store.queued_senders(run.id))
            elif run is not None and run.status == repo.RUNNING:
                continue  # claimed and not started yet, or on another replica: it stops there
            await state.delete(STOP, REQUESTS, run_id)
        return stopped + await self.post_lines(kept.get(LINES, {}))

    async def _stop_queued(self, run: repo.Run, conv: repo.ConversationRef, who: str,
                           senders: list[tuple[str | None, str | None]]) -> bool:
        """End a waiting run `stopped` for what `senders` asked in it, its stopped line kept with that end until
        posted. False when it was no longer queued (claimed meanwhile) or held nothing of theirs."""
        shown = run.started_at is not None and bool(await self._store.deliveries(run.id))  # a reply partly shown
        line = f"⏹ Stopped by {who} before it went on." if shown else stopped_notice(who, [], False)
        stopped_id = await self._store.stop_queued(run.id, run.conversation_id, f"stopped by {who}", senders, line,
                                                   notice=not shown)
        if stopped_id is None:
            return False
        self._ended(conv.id, stopped_id, repo.STOPPED)
        return True

    async def post_lines(self, lines: dict[str, str] | None = None) -> int:
        """Post the stopped lines of waiting runs not posted yet: those just stopped, and those a crash (or a post
        the platform refused) kept from being posted (`lines`: as the caller read them). Returns how many."""
        state, posted = self._store.capability_state, 0
        for run_id, line in (await state.items(STOP, LINES) if lines is None else lines).items():
            if run_id in self._posting:
                continue  # a stop or a sweep is posting it now
            run = await self._store.run(run_id)
            conv = await self._store.conversation(run.conversation_id) if run is not None else None
            if run is None or conv is None:
                await state.delete(STOP, LINES, run_id)
                continue
            posted += await self._post_line(run_id, line, conv)
        return posted

    async def _post_line(self, run_id: str, line: str, conv: repo.ConversationRef) -> bool:
        """Post a stopped waiting run's line, then forget it. A run that had started before (put back in the queue
        after a failure mid-way, its reply partly shown with a Stop control) closes that reply: the line goes
        there and the control goes away. One that never started gets the line in the thread."""
        adapter = self._adapter_for(conv.binding_id)
        if adapter is None:
            return False  # its binding is not connected now: a later sweep posts it
        self._posting.add(run_id)
        try:
            if await self._store.deliveries(run_id):
                target = conv.target()
                stream = ReplyStream(adapter, target, self._store, run_id, self._store.clock)
                if not await stream.close_with(f"_{line}_"):
                    return False
                await set_stop_control(adapter, target, stream.first_message_id, run_id, False)
            else:
                await self._approvals.notice(conv, line, posted=True, kept=True)  # recorded with the stop, once
            await self._store.capability_state.delete(STOP, LINES, run_id)
        except Exception as e:  # kept: a later sweep posts it; the error's type only (a row's text could be quoted)
            log.warning("the stopped line of run %s was not posted (%s); tried again at the next sweep", run_id,
                        type(e).__name__)
            return False
        finally:
            self._posting.discard(run_id)
        return True

    async def stop_current(self, conversation_id: str, who: Sender) -> StopOutcome:
        """`/stop`: what the gateway does and is about to do in the conversation, each run by the one rule: its
        run in flight and the runs waiting in its queue (those first: the end of the run in flight would start
        one). Stopped if any was; else why not (the first run's refusal)."""
        live = await self._store.runs_in([repo.QUEUED, repo.RUNNING, repo.PARKED], conversation_id)
        if not live:
            return await self._stop_background(conversation_id, who)
        # Every run stopped first, then the lines posted: a platform slow to take a line delays no stop.
        outcomes = [await self.stop(r.id, who, post=False) for r in sorted(live, key=lambda r: r.status != repo.QUEUED)]
        await self.post_lines()
        return next((o for o in outcomes if o.stopped), outcomes[0])

    async def _stop_one_background(self, run_id: str, parent_id: str | None, who: Sender,
                                   binding_id: str | None) -> StopOutcome:
        parent = await self._store.run(parent_id) if parent_id is not None else None
        conv = await self._store.conversation(parent.conversation_id) if parent is not None else None
        if parent is None or conv is None or (binding_id is not None and parent.binding_id != binding_id):
            return StopOutcome(False, "There is no such run.", 404)
        if not await self._approvals.may_stop(parent, conv, who):
            return StopOutcome(False, f"Only {parent.requester_name or 'the person who asked'} or someone who may "
                                      "decide approvals here can stop this.", 403)
        assert self.background is not None
        if await self.background.stop_run(run_id, who.display_name or who.account_id):
            return StopOutcome(True, "Stopping.")
        return StopOutcome(False, "That background run has already ended.", 409)

    async def _stop_background(self, conversation_id: str, who: Sender) -> StopOutcome:
        """`/stop` with no turn in flight: the conversation's background runs, those `who` may stop
        (the same rule as their turn's: its requester or a decider)."""
        parents = await self.background.running_parents(conversation_id) if self.background is not None else []
        if not parents:
            return StopOutcome(False, "Nothing is running here.", 409)
        conv = await self._store.conversation(conversation_id)
        stopped = 0
        for parent_id in parents:
            run = await self._store.run(parent_id)
            if run is not None and conv is not None and await self._approvals.may_stop(run, conv, who):
                stopped += await self.background.stop_children(parent_id, who.display_name or who.account_id)  # type: ignore[union-attr]
        if not stopped:
            return StopOutcome(False, "Only the person who started it or someone who may decide approvals here "
                                      "can stop what is running in the background.", 403)
        return StopOutcome(True, f"Stopping {_runs(stopped)} running in the background.")


class BackgroundStops(Protocol):
    """What Stop asks of the background runs (`gateway.runs.background.BackgroundRuns`)."""

    async def stop_children(self, parent_run_id: str, who: str) -> int: ...

    async def running_parents(self, conversation_id: str) -> list[str]: ...

    async def parent_of(self, run_id: str) -> str | None:
        """The turn that started background run `run_id` (None: no such background run)."""
        ...

    async def stop_run(self, run_id: str, who: str) -> bool: ...


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


async def set_stop_control(adapter: object, target: ReplyTarget, message_id: str | None, run_id: str,
                           present: bool) -> bool:
    """Show or remove the Stop control where the adapter has one; a control is a nicety, never a failure."""
    control = offered(adapter, ShowsStopControl)
    if message_id is None or control is None:
        return False
    try:
        await control.stop_control(target, message_id, run_id, present)
    except Exception as e:
        log.debug("stop control not %s: %s", "shown" if present else "removed", e)
        return False
    return True


def stop_control_ends_with_final(adapter: object, target: ReplyTarget, message_id: str | None) -> None:
    """Before a finished reply's final edit: where the adapter can, that edit takes the Stop control
    away. Where it cannot (or no edit is needed), `set_stop_control(..., False)` after it still does."""
    takes = offered(adapter, FinalEditTakesStop)
    if message_id is not None and takes is not None:
        takes.stop_control_ends_with_edit(target, message_id)


def stopped_notice(who: str, tools_done: list[str], wrote: bool) -> str:
    """The stopped card's line: who stopped the run and what it had managed to do (never the finished mark)."""
    did: list[str] = []
    if tools_done:
        counted = {name: tools_done.count(name) for name in dict.fromkeys(tools_done)}
        did.append("ran " + ", ".join(f"{name}" + (f" ×{n}" if n > 1 else "") for name, n in counted.items()))
    if wrote:
        did.append("wrote what is above")
    done = "; before that I " + " and ".join(did) if did else "; I had not done anything yet"
    return f"⏹ Stopped by {who}{done}."
