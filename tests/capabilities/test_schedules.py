"""schedules: a task set in a conversation runs there on its own, at its time, once; late after an outage;
as its creator, parked on an approval like any run; listed with its next run and cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from gateway.clock import ManualClock
from gateway.messages import ChatKind, Sender
from gateway.ops import cli
from gateway.outbound.adapter import Decision
from gateway.runs.scheduled import Schedules
from gateway.store import repo
from gateway.store.models import Conversation, Run, ScheduleOccurrence
from gateway.store.schedules import CHAT, NewTask, SCHEDULED

from ..conftest import running_gateway, wait_for, write_config
from ..fakes.chat import fake_platforms
from .knowledge_script import OPENINGS, SCRIPT, call, scripted_agent
from .support import SEEN, Account, Place, World, slack_binding, telegram_binding

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)  # a Monday
UNGATED = {"id": "schedules", "tool_approval": {"schedule_task": "never"}}


@contextlib.asynccontextmanager
async def scheduled_world(directory: Path, clock: ManualClock, database: str | None = None,
                          entry: dict[str, Any] | None = None,
                          bindings: dict[str, Any] | None = None) -> AsyncIterator[tuple[World, Schedules]]:
    """A gateway on a clock the test moves, the agent granted `schedules` (ungated unless `entry` says)."""
    cfg = write_config(directory, agents={"assistant": scripted_agent(entry or UNGATED)},
                       gateway={"database": {"url": database}} if database else None,
                       bindings=bindings or {"slack": slack_binding(), "telegram": telegram_binding()})
    with fake_platforms("slack", "telegram", "mattermost"):
        async with running_gateway(cfg, clock=clock) as gw:
            SEEN.clear()
            SCRIPT.requests.clear()
            SCRIPT.results.clear()
            SCRIPT.retries.clear()
            w = World(gw)
            w._ids = itertools.count(next(OPENINGS) * 100_000)
            [schedules] = [e for e in gw.extensions if isinstance(e, Schedules)]
            yield w, schedules


async def scheduled_runs(w: World) -> list[Run]:
    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(Run).where(Run.kind == SCHEDULED).order_by(Run.created_at)))


async def ended(w: World, n: int) -> list[Run] | None:
    runs = await scheduled_runs(w)
    return runs if len(runs) >= n and all(r.status in repo.ENDED | {repo.PARKED} for r in runs) else None


def posts_in(w: World, channel: str, thread: str | None) -> list[str]:
    return [text for target, text in w.adapter("slack").posts.values()
            if target.channel == channel and target.thread == thread]


async def _a_one_shot_runs_once_at_its_time(tmp_path: Path, db_url: str | None) -> None:
    clock = ManualClock(T0)
    async with scheduled_world(tmp_path, clock, db_url) as (w, schedules):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="Remind alice to send the invoice",
                                         at="2026-03-02T10:00", timezone="Europe/Warsaw"), thread="100.000")
        assert SCRIPT.results[-1].startswith("Scheduled task ID: ")
        assert "next run 2026-03-02T10:00+01:00 (Europe/Warsaw)" in SCRIPT.results[-1]
        before = len(w.adapter("slack").posts)

        clock.advance(3600 - 1)  # 08:59:59 UTC, a second before 10:00 in Warsaw
        assert await schedules.sweep() == 0
        clock.advance(1)
        assert await schedules.sweep() == 1
        [run] = await wait_for(lambda: ended(w, 1), what="the scheduled run")
        assert run.status == repo.FINISHED and run.requester_account == "U1" and run.requester_name == "alice"
        shown = list(w.adapter("slack").posts.values())[before:]
        assert all(target.channel == "C1" and target.thread == "100.000" for target, _ in shown), \
            "it posts in the thread it was made in"
        texts = [text for _, text in shown]
        assert any("⏰ Scheduled task" in t and "set by alice" in t and "Remind alice to send the invoice" in t
                   for t in texts), texts
        assert not any("Running late" in t for t in texts)
        assert "[Not a message from a person: a task scheduled" in SCRIPT.requests[-1].tail[-1]

        clock.advance(3600)  # later sweeps, on any replica: nothing more
        assert await schedules.sweep() == 0
        assert len(await scheduled_runs(w)) == 1
        async with w.gw.store.sessions() as s:
            assert await s.scalar(select(func.count()).select_from(ScheduleOccurrence)) == 1


async def test_a_one_shot_runs_at_its_time_in_its_thread_exactly_once(tmp_path: Path, db_url: str | None) -> None:
    await _a_one_shot_runs_once_at_its_time(tmp_path, db_url)


async def test_a_one_shot_does_not_run_before_its_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    async with scheduled_world(tmp_path, clock) as (w, schedules):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="Say hello", at="2026-03-02T10:00Z"))
        clock.advance(3600)  # 09:00 UTC
        assert await schedules.sweep() == 0
        clock.advance(3600)  # 10:00 UTC
        assert await schedules.sweep() == 1
        await wait_for(lambda: ended(w, 1), what="the scheduled run")


async def test_a_task_due_while_the_gateway_was_stopped_runs_once_after_the_start_and_says_it_is_late(
        tmp_path: Path) -> None:
    clock = ManualClock(T0)
    async with scheduled_world(tmp_path, clock) as (w, _):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="Post the standup notes", at="2026-03-02T08:30Z"),
                    thread="200.000")
    clock.advance(3 * 3600)  # down from 08:00 to 11:00
    async with scheduled_world(tmp_path, clock) as (w, schedules):
        [run] = await wait_for(lambda: ended(w, 1), what="the late run, with no sweep but the start's")
        assert run.status == repo.FINISHED
        texts = posts_in(w, "C1", "200.000")
        late = [t for t in texts if "⏰ Scheduled task" in t]
        assert len(late) == 1 and "Running late: it was due at 2026-03-02T08:30+00:00" in late[0], texts
        assert await schedules.sweep() == 0
        assert len(await scheduled_runs(w)) == 1


async def test_a_recurring_task_is_listed_with_its_next_run_and_cancelled(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 3, 25, 12, 0, tzinfo=timezone.utc))  # a Wednesday, before DST
    async with scheduled_world(tmp_path, clock) as (w, schedules):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="Post the open incidents", cron="0 9 * * MON",
                                         timezone="Europe/Warsaw"))
        # The next Monday is past the change to summer time: 09:00 there is 07:00 UTC.
        assert "next run 2026-03-30T09:00+02:00 (Europe/Warsaw)" in SCRIPT.results[-1]
        await w.say(ALICE, CHANNEL, call("list_scheduled_tasks"))
        [line] = SCRIPT.results[-1].splitlines()
        task_id = line.split(" — ")[0]
        assert "Post the open incidents" in line and "next 2026-03-30T09:00+02:00" in line and "by alice" in line
        assert " — posts in channel C1 on slack, thread " in line, "a top-level mention's thread: not this one"

        await w.say(BOB, CHANNEL, call("list_scheduled_tasks"))
        assert SCRIPT.results[-1] == "No scheduled tasks.", "bob sees only his own"
        await w.say(BOB, CHANNEL, call("cancel_scheduled_task", id=task_id))
        assert "no scheduled task" in SCRIPT.retries[-1]

        await w.say(ALICE, CHANNEL, call("cancel_scheduled_task", id=task_id))
        assert SCRIPT.results[-1].startswith(f"Cancelled task ID: {task_id}")
        await w.say(ALICE, CHANNEL, call("list_scheduled_tasks"))
        assert SCRIPT.results[-1] == "No scheduled tasks."
        clock.advance(7 * 86400)
        assert await schedules.sweep() == 0


async def test_limits_per_person_are_a_refusal_the_model_can_relay(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    entry = {**UNGATED, "config": {"per_person": 1}}
    async with scheduled_world(tmp_path, clock, entry=entry) as (w, _):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="one", cron="0 9 * * *"))
        await w.say(ALICE, CHANNEL, call("schedule_task", task="two", cron="0 10 * * *"))
        assert SCRIPT.results[-1].startswith("Not scheduled: you already have 1 scheduled tasks")
        await w.say(ALICE, CHANNEL, call("schedule_task", task="three", cron="0 9 * *"))
        assert "needs five fields" in SCRIPT.retries[-1]
        await w.say(ALICE, CHANNEL, call("schedule_task", task="four", cron="0 9 * * *", at="2026-03-03T09:00"))
        assert "exactly one of" in SCRIPT.retries[-1]


async def test_a_scheduled_run_that_needs_approval_parks_with_a_card_in_its_thread_and_resumes(
        tmp_path: Path) -> None:
    clock = ManualClock(T0)
    async with scheduled_world(tmp_path, clock, entry={"id": "schedules"}) as (w, schedules):
        await w.say(ALICE, CHANNEL, "hello", thread="300.000")
        async with w.gw.store.sessions() as s:
            conversation_id = await s.scalar(select(Conversation.id).where(Conversation.thread == "300.000"))
        person = await w.person(ALICE)

        async def one_shot(what: str, minutes: int) -> None:
            made = await schedules.db.create(NewTask(
                conversation_id=conversation_id, binding_id="slack", task=what, cron=None,
                at=T0 + timedelta(minutes=minutes), timezone="UTC", creator_person_id=person, creator_account="U1",
                creator_name="alice", origin=CHAT), per_person=10, per_conversation=10)
            assert not isinstance(made, str)

        # The first task calls a gated tool (schedule_task itself: side-effecting, gated by default here).
        await one_shot(call("schedule_task", task="Say hello again", cron="0 9 * * *"), 5)
        await one_shot("Say good morning", 6)
        clock.advance(5 * 60 + 30)
        assert await schedules.sweep() == 1
        [card] = await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        [parked] = await wait_for(lambda: ended(w, 1), what="the parked run")
        assert parked.status == repo.PARKED and card.run_id == parked.id
        assert card.deciders == "Only alice can decide."
        shown = [target for target, text in w.adapter("slack").posts.values() if "⏰ Scheduled task" in text]
        assert [(t.channel, t.thread) for t in shown] == [("C1", "300.000")], "its card, in the task's thread"

        # The next occurrence in that conversation is claimed and queued, and waits while the approval is open.
        clock.advance(60)
        assert await schedules.sweep() == 1
        runs = await scheduled_runs(w)
        assert [r.status for r in runs] == [repo.PARKED, repo.QUEUED]
        assert await w.gw.store.claim_next_run(conversation_id) is None, "the open approval holds the conversation"
        outcome = await w.gw.decide(card.items[0].approval_id, Decision.APPROVE, Sender("U1", "alice"),
                                    binding_id="slack", surface="test")
        assert outcome.accepted, outcome.message

        first, second = await wait_for(lambda: ended(w, 2), what="both scheduled runs")
        assert first.status == second.status == repo.FINISHED
        texts = [text for target, text in w.adapter("slack").posts.values() if target.thread == "300.000"]
        resumed = max(i for i, t in enumerate(texts) if t == "answered.")
        waited = next(i for i, t in enumerate(texts) if "Say good morning" in t)
        assert resumed < waited, "the waiting one ran after the decided one had answered, not beside it"
        [task] = await schedules.db.listed(conversation_id=conversation_id)
        assert task.task == "Say hello again" and task.creator_name == "alice", "the approved call ran"


async def test_a_person_who_lost_access_has_the_task_paused_and_is_told(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    allowed = {"slack": slack_binding(admission={"channels": ["C1"]}), "telegram": telegram_binding()}
    async with scheduled_world(tmp_path, clock, bindings=allowed) as (w, schedules):
        await w.say(ALICE, CHANNEL, call("schedule_task", task="Post the incidents", cron="0 9 * * *"))
        write_config(tmp_path, agents={"assistant": scripted_agent(UNGATED)},
                     bindings={"slack": slack_binding(admission={"channels": ["C2"]}), "telegram": telegram_binding()})
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems
        clock.advance(3600)
        assert await schedules.sweep() == 0
        [task] = await schedules.db.listed()
        assert task.status == "paused" and "channel not on the allowlist" in task.reason
        told = await wait_for(lambda: [t for _, account, t in w.adapter("slack").private if account == "U1"],
                              what="the owner told")
        assert "is paused" in told[-1] and "Post the incidents" in told[-1]
        assert await scheduled_runs(w) == []


async def test_operators_and_people_see_the_tasks_and_operators_pause_resume_and_cancel(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = ManualClock(T0)
    dm = Place("slack", "slack", "T1", "D1", ChatKind.DM)
    async with scheduled_world(tmp_path, clock) as (w, schedules):
        await w.say(ALICE, dm, call("schedule_task", task="Water the plants", cron="30 8 * * *"))
        listed = await w.command(ALICE, dm, "/schedules")
        assert listed.startswith("Scheduled here:") and "Water the plants" in listed and "next 2026-03-02T08:30+00:00" \
            in listed

        def run(*argv: str) -> tuple[int, str]:
            code = cli.main([*argv, "--config", str(tmp_path)])
            out = capsys.readouterr()
            return code, out.out + out.err

        code, out = await asyncio.to_thread(run, "schedules", "list", "--json")
        [row] = [json.loads(line) for line in out.splitlines()]
        assert code == 0 and row["task"] == "Water the plants" and row["next_run"] == "2026-03-02T08:30+00:00"
        assert row["created_by"] == "alice" and row["where"] == "in a direct message on slack"
        code, out = await asyncio.to_thread(run, "schedules", "pause", row["id"][:8])
        assert code == 0 and out.startswith("paused")
        clock.advance(3600)
        assert await schedules.sweep() == 0, "a paused task does not fire"
        code, out = await asyncio.to_thread(run, "schedules", "resume", row["id"][:8])
        # The command line reads the real clock: the task is due next after that now, not what it missed.
        assert code == 0 and out.startswith("resumed") and "T08:30+00:00" in out
        resumed = await schedules.db.get(row["id"])
        assert resumed is not None and resumed.status == "active" and resumed.next_at is not None
        clock.advance((resumed.next_at - clock.now()).total_seconds() + 30)
        assert await schedules.sweep() == 1
        await wait_for(lambda: ended(w, 1), what="the scheduled run")
        assert 'agent_gateway_schedule_occurrences_total{outcome="fired"} 1.0' in w.gw.metrics.render().decode()
        code, out = await asyncio.to_thread(run, "schedules", "cancel", row["id"][:8])
        assert code == 0 and out.startswith("cancelled")
        code, out = await asyncio.to_thread(run, "schedules", "list")
        assert out.strip() == "no scheduled tasks"
        assert await w.command(ALICE, dm, "/schedules") == "No tasks are scheduled in this conversation."
