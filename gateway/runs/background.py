"""Background runs: work detached from the turn that started it, which reports back into the conversation.

The turn that starts one (`subagents` in mode async) gets a run id at once and ends. The work
goes on here, in this process, as an asyncio task with its own cancellation token; its row in
the store (`gateway.store.background`) holds a lease, the transcript so far and, at the end, the
outcome. Ending queues a `report` run in the same transaction, so the report-back is the
conversation's ordinary queue: it waits behind a turn in flight and behind an open approval,
runs as the person who started the work (the runner prepares it like any run: rights
re-resolved at that moment), and survives a restart or another replica claiming it.

A restart ends a running background run as `partial` with what its saved transcript shows: on a
stop of the gateway its task is cancelled and ended here; after a crash, at the next start (or
at a sweep, once another replica sees its lease lapse).

pydantic-ai-harness `BackgroundTools` was the first candidate; it delivers a background tool's
result to the same agent run, in memory, which cannot outlive the turn or the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic_ai import CancellationToken
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart

from gateway.clock import Clock, new_id
from gateway.periodic import every
from gateway.runs.in_flight import InFlight
from gateway.outbound.delivery import ReplyStream
from gateway.http.events import EventBus
from gateway.store import repo
from gateway.store.background import (
    FAILED,
    FINISHED,
    PARTIAL,
    RUNNING,
    STOPPED,
    BackgroundStore,
    NewBackground,
    Usage,
)
from gateway.store.models import BackgroundRun
from gateway.outbound.adapter import PostsReportCards, ReplyTarget, offered
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.runs.background")

T = TypeVar("T")

__all__ = ["BackgroundRuns", "Ended", "Launched", "NewBackground", "Progress", "Usage", "clip", "last_text"]


def clip(text: str, limit: int, whole: str = "the whole answer is stored with this conversation's delegate runs") -> str:
    """Keep both ends (a conclusion sits at the end) and say how much was cut, and where the rest is."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    dropped = len(text) - limit
    return (f"{text[:head]}\n[… {dropped} characters of the delegate's answer cut here (max_result_chars "
            f"{limit}); {whole} …]\n{text[-tail:]}")


@dataclass(frozen=True)
class Ended:
    """How the work ended. `status`: finished, failed, or stopped (a person's Stop, or the gateway
    stopping: told apart here); `answer` whole (stored), `shown` as the report carries it."""

    status: str
    answer: str
    shown: str
    reason: str = ""
    transcript: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class Launched:
    """`run_id` when it started; otherwise `refusal`, the sentence the model is told instead."""

    run_id: str = ""
    refusal: str = ""


class Progress:
    """Handed to the work: it saves what it has done so far, so a crash still reports it."""

    def __init__(self, db: BackgroundStore, run_id: str) -> None:
        self._db, self.run_id = db, run_id

    async def save(self, transcript: str, usage: Usage) -> None:
        try:
            await self._db.save_progress(self.run_id, transcript, usage)
        except Exception as e:  # progress is for the crash case; the run goes on without it
            log.warning("background run %s: progress not saved: %s", self.run_id, e)


Work = Callable[[CancellationToken, Progress], Awaitable[Ended]]


class Limits(Protocol):
    background_runs_per_conversation: int
    background_runs_per_gateway: int


class BackgroundRuns:
    """The background runs this process works on, and the ones nobody works on any more."""

    def __init__(self, store: repo.Store, limits: Callable[[], Limits], wake: Callable[[str], None],
                 events: EventBus, *, sweep_every: float) -> None:
        self.db = BackgroundStore(store)
        self._limits, self._wake, self._events = limits, wake, events
        self._sweep_every = sweep_every
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._in_flight = InFlight()
        self._sweeper: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()  # set (and replaced) whenever a run here ends or its inbox changes

    # --- lifecycle (a gateway extension) --------------------------------------------------

    async def start(self) -> None:
        """End what the last process left running as partial (its reports queue), then keep sweeping."""
        await self._end_interrupted(at_start=True)
        self._sweeper = asyncio.create_task(every(self._sweep_every, self.sweep, "background sweep", log),
                                            name="background:sweep")

    async def stop(self) -> None:
        """The gateway is stopping: every run here ends as partial, with what it did, and reports (the
        report waits in the queue for the next start)."""
        await cancel_and_wait(self._sweeper)
        self._in_flight.cancel_all()
        tasks = list(self._tasks.values())
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=5.0)
            for task in pending:  # a tool that ignores cancellation: cut it (ended from what it saved)
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def sweep(self) -> None:
        """Keep our leases, take Stops pressed on another replica, end runs whose replica died."""
        here = self._in_flight.ids()
        await self.db.renew(here)
        for run_id, who in (await self.db.stop_requests(here)).items():
            self.stop_here(run_id, who)
        await self._end_interrupted(at_start=False)

    # --- waiting (wait_tasks, a delegate's question) -----------------------------------------

    def poke(self) -> None:
        """Something a waiter may be waiting for changed here: every waiter looks again now."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def until(self, check: Callable[[], Awaitable[T | None]], timeout: float) -> T | None:
        """`check()` until it gives something, at most `timeout` s: woken at once by a change in this
        process (`poke`), and every sweep interval for one on another replica (it reads the store)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            changed = self._changed  # taken before the check, so a change during it is not missed
            found = await check()
            left = deadline - loop.time()
            if found is not None or left <= 0:
                return found
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, self._sweep_every))

    # --- starting -------------------------------------------------------------------------

    async def launch(self, new: NewBackground, work: Work) -> Launched:
        """Start `work` in the background unless a limit is reached (then say which, for the model)."""
        limits = self._limits()
        run_id = await self.db.open(new, per_conversation=limits.background_runs_per_conversation,
                                    per_gateway=limits.background_runs_per_gateway)
        if not run_id:
            here = len(await self.db.of_conversation(new.conversation_id, running=True))
            if here >= limits.background_runs_per_conversation:
                why = (f"this conversation already has {here} background runs in flight, the most the gateway allows "
                       "per conversation")
            else:
                why = "the gateway already has as many background runs in flight as it allows"
            return Launched(refusal=f"Not started: {why}. Wait for one to report back, run this one with the answer "
                                    "awaited if you may, or do this part yourself.")
        token = self._in_flight.start(run_id)
        self._tasks[run_id] = asyncio.create_task(self._drive(run_id, work, token), name=f"background:{run_id}")
        return Launched(run_id=run_id)

    async def _drive(self, run_id: str, work: Work, token: CancellationToken) -> None:
        progress = Progress(self.db, run_id)
        try:
            try:
                ended = await work(token, progress)
            except asyncio.CancelledError:  # cut at shutdown: what was saved is what it did
                await asyncio.shield(self._end_from_saved(run_id, "the gateway stopped while it worked"))
                raise
            except Exception as e:  # the work reports its own failures; this is a bug guard
                log.exception("background run %s crashed", run_id)
                ended = Ended(FAILED, "", "", reason=f"{type(e).__name__}: {e}")
            status, reason = ended.status, ended.reason
            if status == STOPPED:
                who = self._in_flight.stopped_by(run_id)
                status, reason = (STOPPED, f"stopped by {who}") if who else (PARTIAL, "the gateway stopped while it worked")
            row = await self.db.get(run_id)
            if row is None:
                return
            report = report_text(row, status, reason, ended.shown, tools_called(ended.transcript or row.transcript))
            await self._ended(await self.db.end(run_id, status, reason=reason, answer=ended.answer, report=report,
                                                transcript=ended.transcript, usage=ended.usage))
        finally:
            self._tasks.pop(run_id, None)
            self._in_flight.done(run_id)

    async def _end_from_saved(self, run_id: str, reason: str) -> None:
        row = await self.db.get(run_id)
        if row is None or row.status != RUNNING:
            return
        text, tools = so_far(row.transcript)
        shown = clip(text, 2000) if text else ""
        await self._ended(await self.db.end(run_id, PARTIAL, reason=reason, answer=text,
                                            report=report_text(row, PARTIAL, reason, shown, tools)))

    async def _end_interrupted(self, *, at_start: bool) -> None:
        for row in await self.db.interrupted(at_start=at_start):
            if row.id not in self._in_flight:
                log.info("background run %s was interrupted; ending it as partial", row.id)
                await self._end_from_saved(row.id, "the gateway restarted while it worked")

    async def _ended(self, row: BackgroundRun | None) -> None:
        if row is None:
            return  # it had ended already (it reports once)
        log.info("background run %s ended %s; report queued as run %s", row.id, row.status, row.report_run_id)
        self.poke()
        self._events.publish(row.conversation_id, {"type": "background_end", "run_id": row.id, "status": row.status})
        self._wake(row.conversation_id)

    # --- stopping -------------------------------------------------------------------------

    def stop_here(self, run_id: str, who: str) -> bool:
        return self._in_flight.stop(run_id, who)

    async def stop_run(self, run_id: str, who: str) -> bool:
        """Stop one background run wherever it works; False when it is not running."""
        if not self.stop_here(run_id, who):
            row = await self.db.get(run_id)
            if row is None or row.status != RUNNING:
                return False
            await self.db.request_stop(run_id, who)  # its replica takes it up at its next sweep
        return True

    async def stop_children(self, parent_run_id: str, who: str) -> int:
        """Stop on a turn stops the background runs it started."""
        return sum([await self.stop_run(row.id, who) for row in await self.db.children(parent_run_id)])

    # --- reading --------------------------------------------------------------------------

    async def parent_of(self, run_id: str) -> str | None:
        row = await self.db.get(run_id)
        return row.parent_run_id if row is not None else None

    async def running_parents(self, conversation_id: str) -> list[str]:
        """The turns whose background runs are still running in this conversation (for `/stop`)."""
        return list(dict.fromkeys(r.parent_run_id for r in await self.db.of_conversation(conversation_id, running=True)))

    @property
    def running_here(self) -> list[str]:
        return self._in_flight.ids()


def so_far(transcript: str) -> tuple[str, list[str]]:
    """From a saved transcript: the last thing the delegate wrote, and the tools it called."""
    try:
        messages = ModelMessagesTypeAdapter.validate_json(transcript or "[]")
    except ValueError:
        return "", []
    return last_text(messages), tools_called(transcript)


def last_text(messages: Sequence[ModelMessage]) -> str:
    """The delegate's last substantive text: a step that produced no text does not erase the one before."""
    text = ""
    for message in messages:
        if isinstance(message, ModelResponse):
            said = "".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
            if said:
                text = said
    return text


def tools_called(transcript: str | None) -> list[str]:
    try:
        messages = ModelMessagesTypeAdapter.validate_json(transcript or "[]")
    except ValueError:
        return []
    return [p.tool_name for m in messages if isinstance(m, ModelResponse) for p in m.parts
            if isinstance(p, ToolCallPart)]


def report_text(row: BackgroundRun, status: str, reason: str, shown: str, tools: list[str]) -> str:
    """The report as people see it on every surface: whose run, how it ended, what it did."""
    head = {FINISHED: "finished", FAILED: f"failed ({reason})", STOPPED: f"⏹ {reason}",
            PARTIAL: f"partial: {reason}"}.get(status, status)
    lines = [f"📋 Report from background run {row.id[:8]} ({row.delegate}, started by {row.requester_name or 'someone'}): "
             f"{head}."]
    if status != FINISHED:
        counted: dict[str, int] = {}
        for name in tools:
            counted[name] = counted.get(name, 0) + 1
        did = ", ".join(name + (f" ×{n}" if n > 1 else "") for name, n in counted.items())
        lines.append(f"Before that it ran {did}." if did else "It had not called any tool yet.")
        if shown:
            lines.append("What it had written so far:" if status != FAILED else "Its last words:")
    if shown:
        lines.append(shown)
    return "\n\n".join(lines)


def report_markdown(text: str) -> str:
    """A report as a card in plain Markdown: its heading bold, its body quoted, so it never reads as a
    message someone typed or as the agent's answer."""
    head, _, body = text.partition("\n\n")
    quoted = "\n".join(f"> {line}" if line else ">" for line in body.splitlines())
    return f"**{head}**" + (f"\n{quoted}" if quoted else "")


async def post_report(adapter: object, target: ReplyTarget, text: str, store: repo.Store, clock: Clock) -> None:
    """Post the report card ahead of the turn that continues; a card that cannot be posted is logged,
    and the turn still runs (the report is in the conversation's messages either way)."""
    try:
        cards = offered(adapter, PostsReportCards)
        if cards is not None:
            await cards.post_report(target, text)
            return
        stream = ReplyStream(adapter, target, store, f"report-{new_id()}", clock, fresh=True)  # type: ignore[arg-type]
        await stream.finish(report_markdown(text))
    except Exception as e:
        log.warning("report card not posted to %s: %s", target.platform, e)


def report_prompt(text: str) -> str:
    """How the continuing turn's model reads a report: from the gateway, not from a person."""
    return ("[Not a message from a person: the gateway reports that a background delegation you started has "
            "ended. Continue the work it was for, for the person who asked; if it did not finish, say so.]\n\n" + text)


def as_json(row: BackgroundRun) -> dict[str, Any]:
    return {"run_id": row.id, "delegate": row.delegate, "status": row.status, "reason": row.reason,
            "started_at": row.created_at.isoformat(),
            "ended_at": row.finished_at.isoformat() if row.finished_at else None,
            "usage": {"requests": row.requests, "input_tokens": row.input_tokens, "output_tokens": row.output_tokens}}
