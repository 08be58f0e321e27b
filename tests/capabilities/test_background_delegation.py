"""subagents, async: the tool returns a run id at once and the turn ends; when the background run ends, a report
card arrives in the same conversation, followed by a turn that continues — behind a turn in flight, never while an
approval is open, and after a restart (as partial). Limits and gated tools answer as tool results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from bindings.loader import ConfigError, load_config
from gateway import extensions
from gateway.messages import ChatKind, Sender
from gateway.store import repo
from gateway.store.models import BackgroundRun, Run
from gateway.outbound.adapter import Decision

from ..conftest import running_gateway, wait_for, write_config
from .scripted import database, say_calls  # noqa: F401 - `database` is a fixture used here
from .held import GATES, gate
from .support import SEEN, Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
OTHER_DM = Place("slack", "slack", "T1", "D2", ChatKind.DM)


@pytest.fixture(autouse=True)
def _gates() -> None:
    GATES.clear()


def delegating(config: dict[str, Any], *others: dict[str, Any]) -> dict[str, Any]:
    return {**agent({"id": "subagents", "config": config}, *others, model="held"), "subagents": ["researcher"]}


def researcher(*capabilities: dict[str, Any]) -> dict[str, Any]:
    return {**agent(*capabilities, model="held"), "name": "Researcher", "description": "Finds things out"}


def task(prompt: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("task", {"agent": "researcher", "prompt": prompt, **extra})


async def background_runs(w: World) -> list[BackgroundRun]:
    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(BackgroundRun).order_by(BackgroundRun.created_at)))


async def report_runs(w: World) -> list[Run]:
    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(Run).where(Run.kind == "report").order_by(Run.created_at)))


async def ended(w: World, status: str = "finished") -> BackgroundRun:
    async def done() -> BackgroundRun | None:
        rows = [r for r in await background_runs(w) if r.status != "running"]
        return rows[-1] if rows else None

    row = await wait_for(done, what="the background run to end")
    assert row.status == status, (row.status, row.reason)
    return row


async def settled(w: World, run_id: str) -> Run:
    async def done() -> Run | None:
        run = await w.gw.store.run(run_id)
        return run if run is not None and run.status in repo.ENDED else None

    return await wait_for(done, what=f"run {run_id} to end")


async def test_through_the_web_api_the_turn_ends_then_a_report_card_and_a_continuing_turn_arrive(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w, aiohttp.ClientSession(w.gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        events: list[dict[str, Any]] = []

        async def listen() -> None:
            async with s.get(f"/api/v1/conversations/{conv}/events") as r:
                async for raw in r.content:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))

        listener = asyncio.create_task(listen())
        await wait_for(lambda: w.gw.events._listeners.get(conv), what="SSE subscription")
        r = await s.post(f"/api/v1/conversations/{conv}/messages",
                         json={"text": say_calls(task("HOLD:bg the three vendors, compared"))})
        parent = (await r.json())["run_id"]

        # The parent's turn ends while the delegate is still working: its answer is the run id.
        first = await settled(w, parent)
        assert first.status == repo.FINISHED
        [row] = await background_runs(w)
        assert row.status == "running" and row.parent_run_id == parent and row.delegate == "researcher"
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [t["role"] for t in turns] == ["user", "assistant"]
        assert f"Started in the background as run {row.id}" in turns[1]["text"]

        gate("bg").set()
        row = await ended(w)
        [report] = await report_runs(w)
        assert (await settled(w, report.id)).status == repo.FINISHED
        assert (report.requester_account, report.requester_person_id) == (first.requester_account,
                                                                          first.requester_person_id)

        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [t["role"] for t in turns] == ["user", "assistant", "report", "assistant"]
        card, continued = turns[2], turns[3]
        assert card["run_id"] == continued["run_id"] == report.id
        assert card["text"].startswith(f"📋 Report from background run {row.id[:8]} (researcher")
        assert "finished" in card["text"] and "You said: HOLD:bg the three vendors, compared" in card["text"]
        assert continued["status"] == "final" and continued["text"], "the continuing turn answered"
        # On the page the card is its own kind of event, before the continuing turn's text.
        await wait_for(lambda: sum(e["type"] == "run_end" for e in events) >= 2, what="the continuing turn's end")
        listener.cancel()
        kinds = [e["type"] for e in events]
        assert "report" in kinds
        after = kinds[kinds.index("report"):]
        assert "delta" in after, "the continuing turn streams after the card"
        assert row.transcript and json.loads(row.transcript)[0]["parts"][-1]["content"].startswith("HOLD:bg")


async def test_the_report_waits_behind_a_turn_in_flight(tmp_path: Path, database: dict[str, Any] | None) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        await w.say(ALICE, DM, say_calls(task("HOLD:bg look it up")))
        busy = asyncio.create_task(w.say(ALICE, DM, "HOLD:turn and meanwhile, this"))
        [running] = await wait_for(lambda: w.gw.store.runs_in([repo.RUNNING]), what="the second turn to start")

        gate("bg").set()
        await ended(w)
        [report] = await report_runs(w)
        await w.gw.sweep()  # every replica looks for queued work: the report still waits
        assert (await w.gw.store.run(report.id)).status == repo.QUEUED  # type: ignore[union-attr]

        gate("turn").set()
        await busy
        turn = await settled(w, running.id)
        done = await settled(w, report.id)
        assert done.status == repo.FINISHED and done.started_at >= turn.finished_at  # type: ignore[operator]
        posts = [text for _, text in w.adapter("slack").posts.values()]
        card = next(i for i, text in enumerate(posts) if text.startswith("**📋 Report from background run"))
        assert "You said: HOLD:turn" in "\n".join(posts[:card]), "the turn in flight answered first"
        assert posts[card + 1:], "a continuing turn followed the card"
        assert "\n> You said: HOLD:bg look it up" in posts[card], "the card quotes the delegate's answer"


async def test_the_report_waits_while_an_approval_is_open_until_it_is_decided(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}, {"id": "memory_files", "approval": "required"}),
              "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        await w.say(ALICE, DM, say_calls(task("HOLD:bg look it up")))
        await w.say(ALICE, DM, say_calls(("list_memory", {})))
        [parked] = await w.gw.store.runs_in([repo.PARKED])

        gate("bg").set()
        await ended(w)
        [report] = await report_runs(w)
        await w.gw.sweep()
        assert (await w.gw.store.run(report.id)).status == repo.QUEUED, "never while an approval is open"  # type: ignore[union-attr]
        assert not any("Report from background run" in t for _, t in w.adapter("slack").posts.values())

        [card] = w.adapter("slack").cards
        [item] = card.items
        outcome = await w.gw.decide(item.approval_id, Decision.APPROVE, Sender(ALICE.account_id, ALICE.name),
                                    binding_id="slack", surface="button")
        assert outcome.accepted, outcome.message
        resumed = await settled(w, parked.id)
        done = await settled(w, report.id)
        assert done.started_at >= resumed.finished_at  # type: ignore[operator]
        assert any(t.startswith("**📋 Report from background run") for _, t in w.adapter("slack").posts.values())


async def test_a_restart_ends_a_running_background_run_as_partial_and_it_still_reports(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher({"id": "memory_files"})}
    plan = say_calls(("list_memory", {}))
    async with world(tmp_path, agents=agents) as w:
        await w.say(ALICE, DM, say_calls(task("HOLD:bg " + plan)))

        async def worked() -> bool:  # it listed its notes, then waits
            rows = await background_runs(w)
            return bool(rows) and "list_memory" in rows[0].transcript

        await wait_for(worked, what="the delegate's first step to be saved")
    # The gateway stopped with the delegate still working; a new one starts on the same database.
    async with world(tmp_path, agents=agents) as w:
        [row] = await background_runs(w)
        assert row.status == "partial" and "stopped while it worked" in row.reason, (row.status, row.reason, row.answer, row.transcript[-600:])
        [report] = await report_runs(w)
        done = await settled(w, report.id)
        assert done.status == repo.FINISHED and done.requester_account == ALICE.account_id
        shown = [m for m in await w.gw.store.messages(row.conversation_id) if m.run_id == report.id]
        assert [m.role for m in shown] == ["report", "assistant"]
        assert "partial: the gateway stopped while it worked" in shown[0].text
        assert "Before that it ran list_memory." in shown[0].text
        posts = [t for _, t in w.adapter("slack").posts.values()]
        assert any(t.startswith("**📋 Report from background run") and "partial" in t for t in posts)


async def test_limits_answer_as_tool_results(tmp_path: Path, database: dict[str, Any] | None) -> None:
    agents = {"assistant": delegating({"mode": "async", "max_fanout": 5}), "researcher": researcher()}
    limits = {"limits": {"background_runs_per_conversation": 1, "background_runs_per_gateway": 2}, **(database or {})}
    async with world(tmp_path, agents=agents, gateway=limits) as w:
        seen = await w.say(ALICE, DM, say_calls(task("HOLD:a one"), task("HOLD:b two")))
        assert seen.tool_results[0].startswith("Started in the background as run ")
        assert seen.tool_results[1].startswith("Not started: this conversation already has 1 background runs in "
                                               "flight, the most the gateway allows per conversation")
        seen = await w.say(BOB, OTHER_DM, say_calls(task("HOLD:c three")))
        assert seen.tool_results[0].startswith("Started in the background")
        seen = await w.say(BOB, Place("slack", "slack", "T1", "D3", ChatKind.DM), say_calls(task("HOLD:d four")))
        assert seen.tool_results[0].startswith("Not started: the gateway already has as many background runs in "
                                               "flight as it allows")
        assert len(await background_runs(w)) == 2
        for name in "ac":
            gate(name).set()
        await ended(w)


async def test_a_gated_tool_in_a_background_delegate_is_refused_with_the_seeds_message(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}),
              "researcher": researcher({"id": "planning", "approval": "required"})}
    async with world(tmp_path, agents=agents) as w:
        await w.say(ALICE, DM, say_calls(task(say_calls(("write_plan", {"items": [{"content": "look"}]})))))
        row = await ended(w, "finished")
        assert "Refused: write_plan needs a person's approval, and a background delegation cannot ask for one" in row.answer
        assert 'delegated with mode="sync"' in row.answer
        assert not w.adapter("slack").cards, "no approval card: nobody is waiting to answer"
        [report] = await report_runs(w)
        await settled(w, report.id)
        turn = await w.turn(ALICE, DM, "later")
        plan = await turn.state.items("planning", turn.conversation.id)
        assert plan.get("current", "[]") == "[]", "the gated tool never ran: no plan was written"


async def test_lifecycle_tools_and_modes_are_offered_as_configured(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "auto"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.say(ALICE, DM, say_calls(task("HOLD:bg slow one", mode="async"), ("list_active_tasks", {})))
        assert {"task", "check_task", "list_active_tasks"} <= set(seen.tools)
        assert "mode" in json.dumps(seen.defs["task"].parameters_json_schema)
        [row] = await background_runs(w)
        assert seen.tool_results[1].startswith(f"- {row.id}: researcher, started ")
        gate("bg").set()
        await ended(w)
        seen = await w.say(ALICE, DM, say_calls(("check_task", {"task_id": row.id}), task("quick one")))
        assert seen.tool_results[0].startswith(f"Run {row.id} (researcher): finished")
        assert "You said: quick one" in seen.tool_results[1], "mode left out: sync, the answer in the tool result"

    # async for the whole agent, sync for one specialist: its line says so; no mode argument to choose with.
    config = {"mode": "async", "inline": [{"name": "quick", "description": "Answers fast", "model": "held",
                                           "mode": "sync"}]}
    async with world(tmp_path / "b", agents={"assistant": delegating(config), "researcher": researcher()}) as w:
        seen = await w.say(ALICE, DM, say_calls(("task", {"agent": "quick", "prompt": "now"})))
        assert "You said: now" in seen.tool_results[0]
        assert "mode" not in seen.defs["task"].parameters_json_schema["properties"]
        assert any("- quick: Answers fast (waits: its answer comes back as the tool's result)" in i
                   for i in seen.instructions)
        assert any("- researcher: Finds things out\n" in i + "\n" for i in seen.instructions)


async def test_stop_in_the_conversation_stops_its_background_run_which_reports_stopped(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        await w.say(ALICE, DM, say_calls(task("HOLD:bg look it up")))
        await w._command(BOB, DM, "/stop", lambda: bool(w.adapter("slack").private))
        [(_, account, refusal)] = w.adapter("slack").private  # someone else's Stop changes nothing
        assert account == BOB.account_id and refusal.startswith("Only the person who started it")
        assert [r.status for r in await background_runs(w)] == ["running"]
        await w._command(ALICE, DM, "/stop", lambda: True)  # a stop that works is not answered
        row = await ended(w, "stopped")
        assert row.reason == "stopped by alice"
        [report] = await report_runs(w)
        await settled(w, report.id)
        [card] = [t for _, t in w.adapter("slack").posts.values() if t.startswith("**📋 Report from background run")]
        assert "⏹ stopped by alice" in card and "finished" not in card


async def test_stop_on_the_turn_that_started_it_stops_its_background_run_too(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        # The parent delegates, then keeps writing (held) while its delegate works (held).
        waiting = asyncio.create_task(w.say(ALICE, DM, "HOLD:parent " + say_calls(task("HOLD:bg look it up"))))
        [row] = await wait_for(lambda: background_runs(w), what="the background run to start")
        [parent] = await w.gw.store.runs_in([repo.RUNNING])
        assert row.parent_run_id == parent.id

        refused = await w.gw.stops.stop(parent.id, Sender(BOB.account_id, BOB.name))
        assert not refused.stopped and [r.status for r in await background_runs(w)] == ["running"]
        outcome = await w.gw.stops.stop(parent.id, Sender(ALICE.account_id, ALICE.name))
        assert outcome.stopped, outcome.message
        await waiting
        assert (await settled(w, parent.id)).status == repo.STOPPED
        row = await ended(w, "stopped")
        assert row.reason == "stopped by alice"


async def test_a_background_delegates_own_delegations_wait_and_it_is_told_so(tmp_path: Path) -> None:
    middle = {**delegating({"mode": "async"}), "name": "Researcher", "subagents": ["helper"]}
    agents = {"assistant": delegating({"mode": "async", "max_depth": 2}), "researcher": middle,
              "helper": {**agent(model="held"), "name": "Helper"}}
    async with world(tmp_path, agents=agents) as w:
        nested = say_calls(("task", {"agent": "helper", "prompt": "the detail"}))
        await w.say(ALICE, DM, say_calls(task(nested)))
        row = await ended(w)
        assert "You said: the detail" in row.answer, "the nested delegation waited and answered into the delegate"
        assert "Started in the background" not in row.answer
        assert len(await background_runs(w)) == 1, "exactly one background run: one report"
        assert any("You are working as a delegate yourself, so your own delegations do not run in the background"
                   in i for seen in SEEN for i in seen.instructions)


def test_a_mode_for_something_that_is_not_a_pinned_delegate_is_refused_at_load(tmp_path: Path) -> None:
    config = {"mode": "sync", "modes": {"ghost": "async"}, "inline": [{"name": "quick", "model": "held"}]}
    cfg = write_config(tmp_path, agents={"assistant": delegating(config), "researcher": researcher()})
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    path = cfg / "agents" / "assistant.yaml"
    assert problem.startswith(f"{path}:") and problem.split(":")[1].isdigit(), problem
    assert "capabilities.0.config.modes.ghost: 'ghost' is not a pinned delegate of this agent" in problem


@pytest.mark.postgres
async def test_across_replicas_a_stop_reaches_the_replica_running_it_and_the_report_is_shared(
        tmp_path: Path, pg_url: str) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    configs = [write_config(tmp_path / name, agents=agents, bindings={"web": {"platform": "web", "agent": "assistant"}},
                            gateway={"database": {"url": pg_url}}) for name in ("a", "b")]
    async with running_gateway(configs[0]) as a, running_gateway(configs[1]) as b:
        async with aiohttp.ClientSession(a.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": say_calls(task("HOLD:bg on a"))})

        async def started() -> list[BackgroundRun]:
            async with b.store.sessions() as session:
                return list(await session.scalars(select(BackgroundRun).where(BackgroundRun.status == "running")))

        [row] = await wait_for(started, what="the background run on replica a")
        assert row.lease_owner == a.store.owner
        # A Stop that reaches replica b is stored; replica a, which runs it, stops it at its next sweep.
        assert b.stops.background is not None and a.stops.background is not None
        assert await b.stops.background.stop_run(row.id, "alice")
        async with b.store.sessions() as session:
            assert (await session.get(BackgroundRun, row.id)).status == "running"  # type: ignore[union-attr]
        await a.stops.background.sweep()

        async def report() -> Run | None:
            async with b.store.sessions() as session:
                return await session.scalar(select(Run).where(Run.kind == "report"))

        queued = await wait_for(report, what="the report to be queued")
        async with b.store.sessions() as session:
            stopped = await session.get(BackgroundRun, row.id)
        assert stopped is not None and (stopped.status, stopped.reason) == ("stopped", "stopped by alice")
        done = await wait_for(lambda: _ended_run(b, queued.id), what="the report run to end")
        assert done.status == repo.FINISHED
        said = [m for m in await b.store.messages(conv) if m.run_id == queued.id]
        assert [m.role for m in said] == ["report", "assistant"] and "⏹ stopped by alice" in said[0].text


async def _ended_run(gw: Any, run_id: str) -> Run | None:
    run = await gw.store.run(run_id)
    return run if run is not None and run.status in repo.ENDED else None


async def test_the_web_stop_door_takes_a_background_runs_id(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "async"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w, aiohttp.ClientSession(w.gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": say_calls(task("HOLD:bg look"))})
        await settled(w, (await r.json())["run_id"])
        [row] = await background_runs(w)
        r = await s.post(f"/api/v1/runs/{row.id}/stop", json={})
        assert r.status == 200 and (await r.json())["stopped"]
        row = await ended(w, "stopped")
        assert row.reason.startswith("stopped by ")
        r = await s.post(f"/api/v1/runs/{row.id}/stop", json={})
        assert r.status == 409, "it has ended: nothing left to stop"
        assert (await s.post("/api/v1/runs/nosuchrun/stop", json={})).status == 404
