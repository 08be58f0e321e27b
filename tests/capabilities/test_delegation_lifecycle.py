"""subagents: following, steering and stopping a background delegation (wait_tasks, send_message_to_subagent,
soft_cancel_task, hard_cancel_task), answer_subagent offered to no model and ask_parent to no background
delegate (allow_questions is for sync delegates: tests/adapters/slack/test_e2e_questions.py), and specialists the model writes (allow_dynamic: create_agent, delegate) — each through scripted runs, with
its refusals, on SQLite and PostgreSQL, and across a restart."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bindings.loader import ConfigError, load_config
from capabilities.subagents import delegate_runs
from gateway import extensions
from gateway.ops import cli
from gateway.messages import ChatKind, Sender
from gateway.outbound.adapter import Decision
from gateway.runs.background import tools_called
from gateway.store import repo
from gateway.store.models import BackgroundRun, Run

from ..conftest import wait_for, write_config
from .held import GATES, gate
from .scripted import database, say_calls  # noqa: F401 - `database` is a fixture used here
from .support import SEEN, Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
OTHER_DM = Place("slack", "slack", "T1", "D2", ChatKind.DM)
ACTING = ("send_message_to_subagent", "soft_cancel_task", "hard_cancel_task")
LIFECYCLE = {"task", "check_task", "wait_tasks", "list_active_tasks", *ACTING}


@pytest.fixture(autouse=True)
def _gates() -> None:
    GATES.clear()


def delegating(config: dict[str, Any], *others: dict[str, Any], gated: bool = False) -> dict[str, Any]:
    """The parent: the three tools that act are let through unless `gated` (their default is to ask)."""
    entry: dict[str, Any] = {"id": "subagents", "config": {"mode": "async", **config}}
    if not gated:
        entry["tool_approval"] = {name: "never" for name in ACTING}
    return {**agent(entry, *others, model="held"), "subagents": ["researcher"]}


def researcher(*capabilities: dict[str, Any]) -> dict[str, Any]:
    return {**agent(*capabilities, model="held"), "name": "Researcher", "description": "Finds things out"}


def task(prompt: str) -> tuple[str, dict[str, Any]]:
    return ("task", {"agent": "researcher", "prompt": prompt})


async def background_runs(w: World) -> list[BackgroundRun]:
    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(BackgroundRun).order_by(BackgroundRun.created_at)))


async def report_runs(w: World) -> list[Run]:
    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(Run).where(Run.kind == "report").order_by(Run.created_at)))


async def started(w: World, prompt: str, who: Account = ALICE, where: Place = DM) -> BackgroundRun:
    seen = await w.say(who, where, say_calls(task(prompt)))
    assert seen.tool_results[0].startswith("Started in the background as run "), seen.tool_results
    rows = [r for r in await background_runs(w) if r.prompt == prompt]
    return rows[-1]


async def ended(w: World, run_id: str, status: str) -> BackgroundRun:
    async def done() -> BackgroundRun | None:
        row = next((r for r in await background_runs(w) if r.id == run_id), None)
        return row if row is not None and row.status != "running" else None

    row = await wait_for(done, what="the background run to end")
    assert row.status == status, (row.status, row.reason, row.answer)
    return row


async def settled(w: World, run_id: str) -> Run:
    async def done() -> Run | None:
        run = await w.gw.store.run(run_id)
        return run if run is not None and run.status in repo.ENDED else None

    return await wait_for(done, what=f"run {run_id} to end")


def cards(w: World) -> list[str]:
    return [t for _, t in w.adapter("slack").posts.values() if t.startswith("**")]


# --- what is offered ------------------------------------------------------------------------


async def test_offered_tools_follow_the_config(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.say(ALICE, DM, "hello")
        assert set(seen.tools) == LIFECYCLE, "a default async config offers seven"
        seen = await w.say(ALICE, DM, say_calls(("answer_subagent", {"task_id": "x", "answer": "y"}),
                                                ("create_agent", {"name": "a", "instructions": "b", "model": "held"})))
        assert seen.retries[0].startswith("Unknown tool name: 'answer_subagent'"), "declared, offered to no model"
        assert "Unknown tool name: 'create_agent'" in seen.retries[1], "allow_dynamic off: not offered"
    config = {"mode": "auto", "allow_questions": True, "allow_dynamic": True}
    async with world(tmp_path / "b", agents={"assistant": delegating(config), "researcher": researcher()}) as w:
        seen = await w.say(ALICE, DM, "hello")
        assert set(seen.tools) == LIFECYCLE | {"create_agent", "delegate"}, "answer_subagent is never offered"
        for name in seen.tools:  # the house rule: each says what comes back
            assert "<returns>" in (seen.defs[name].description or ""), name


# --- wait_tasks -----------------------------------------------------------------------------


async def test_wait_tasks_waits_for_the_answer_and_the_report_is_not_told_again(
        tmp_path: Path, database: dict[str, Any] | None) -> None:
    agents = {"assistant": delegating({"max_result_chars": 200}), "researcher": researcher()}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        row = await started(w, "HOLD:bg " + "the long comparison " * 20)
        seen = await w.say(ALICE, DM, say_calls(("wait_tasks", {"task_ids": [row.id], "timeout_seconds": 0})))
        assert seen.tool_results[0].startswith(f"Run {row.id} (researcher): running;")
        assert "Still working" in seen.tool_results[0]

        waiting = asyncio.create_task(w.say(ALICE, DM, say_calls(
            ("wait_tasks", {"task_ids": [row.id, "nosuchrun"], "timeout_seconds": 300})), timeout=30))
        await wait_for(lambda: w.gw.store.runs_in([repo.RUNNING]), what="the waiting turn to start")
        gate("bg").set()
        seen = await waiting
        result = seen.tool_results[0]
        assert result.startswith(f"Run {row.id} (researcher): finished;"), result
        assert result.count("the long comparison") < 20
        assert result.endswith("in this conversation. list_active_tasks lists the ones still running here.")
        assert f'check_task("{row.id}") gives the whole answer' in result, "cut past max_result_chars, and says so"
        assert "No background run 'nosuchrun' in this conversation." in result

        [report] = await report_runs(w)
        done = await settled(w, report.id)
        assert done.reason.startswith("its answer went to run ") and "wait_tasks" in done.reason
        assert not any("Report from background run" in c for c in cards(w)), "the reply had it: no second telling"

        seen = await w.say(ALICE, DM, say_calls(("check_task", {"task_id": row.id})))
        assert seen.tool_results[0].rstrip().endswith("the long comparison"), "check_task gives the whole answer"
        assert "cut here" not in seen.tool_results[0]


async def test_another_conversations_task_is_unknown_to_every_tool(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        row = await started(w, "HOLD:bg alice's work")
        calls = [("wait_tasks", {"task_ids": [row.id], "timeout_seconds": 0}), ("check_task", {"task_id": row.id}),
                 ("send_message_to_subagent", {"task_id": row.id, "message": "stop that"}),
                 ("soft_cancel_task", {"task_id": row.id}), ("hard_cancel_task", {"task_id": row.id})]
        seen = await w.say(BOB, OTHER_DM, say_calls(*calls))
        assert len(seen.tool_results) == len(calls)
        for result in seen.tool_results:
            assert result.startswith(f"No background run {row.id!r} in this conversation."), result
        [still] = await background_runs(w)
        assert still.status == "running", "nothing reached it"
        gate("bg").set()
        await ended(w, row.id, "finished")


# --- send_message_to_subagent ---------------------------------------------------------------


async def test_a_message_reaches_the_running_delegate_at_its_next_model_request(
        tmp_path: Path, database: dict[str, Any] | None) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher()}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        row = await started(w, "HOLD:bg the vendors")
        seen = await w.say(ALICE, DM, say_calls(("send_message_to_subagent",
                                                 {"task_id": row.id, "message": "Only the EU ones, please."})))
        assert seen.tool_results[0].startswith(f"Sent to researcher (run {row.id}): it reads it before its next")
        gate("bg").set()  # it was writing its answer: the message redirects it instead of letting it end
        done = await ended(w, row.id, "finished")
        assert "while you work on it]\nOnly the EU ones, please." in done.answer
        assert "Only the EU ones, please." in done.transcript
        [report] = await report_runs(w)
        await settled(w, report.id)

        seen = await w.say(ALICE, DM, say_calls(("send_message_to_subagent", {"task_id": row.id, "message": "more"}),
                                                ("send_message_to_subagent", {"task_id": "nosuchrun", "message": "x"})))
        assert seen.tool_results[0].startswith(f"Run {row.id} (researcher) has already ended (finished), so nothing "
                                               "reads messages for it any more")
        assert seen.tool_results[1].startswith("No background run 'nosuchrun' in this conversation.")


async def test_the_three_that_act_ask_for_approval_by_default(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}, gated=True), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        row = await started(w, "HOLD:bg the vendors")
        await w.say(ALICE, DM, say_calls(("hard_cancel_task", {"task_id": row.id})))
        [parked] = await w.gw.store.runs_in([repo.PARKED])
        [card] = w.adapter("slack").cards
        assert [item.tool_name for item in card.items] == ["hard_cancel_task"]
        assert [r.status for r in await background_runs(w)] == ["running"], "nothing stopped before a decision"
        gate("bg").set()
        await ended(w, row.id, "finished")
        assert parked.id


# --- soft_cancel_task and hard_cancel_task ---------------------------------------------------


async def test_soft_cancel_withholds_the_tools_and_the_partial_answer_comes_back(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher({"id": "memory_files"})}
    async with world(tmp_path, agents=agents) as w:
        plan = say_calls(("list_memory", {}), ("list_memory", {}), ("list_memory", {}))
        row = await started(w, "STEP:bg " + plan)
        seen = await w.say(ALICE, DM, say_calls(("soft_cancel_task", {"task_id": row.id}),
                                                ("soft_cancel_task", {"task_id": row.id})))
        assert seen.tool_results[0].startswith(f"Asked researcher (run {row.id}) to wrap up")
        assert seen.tool_results[1].startswith(f"Run {row.id} (researcher) was already asked to wrap up")
        gate("bg").set()
        done = await ended(w, row.id, "partial")
        assert done.reason == "wrapped up early, as Agent (the agent that started it) asked"
        assert tools_called(done.transcript) == ["list_memory"], "its next request was its last"
        assert "wrap up now. Stop calling tools and answer with what you have" in done.transcript
        assert done.answer.startswith("`list_memory` answered:"), "what it had is its answer"
        [report] = await report_runs(w)
        await settled(w, report.id)
        [card] = [c for c in cards(w) if "Report from background run" in c]
        assert "partial: wrapped up early" in card

        seen = await w.say(ALICE, DM, say_calls(("soft_cancel_task", {"task_id": row.id})))
        assert seen.tool_results[0].startswith(f"Run {row.id} (researcher) has already ended (partial), so there is "
                                               "nothing to wrap up")


async def test_hard_cancel_stops_it_now_and_it_reports_stopped(tmp_path: Path, database: dict[str, Any] | None) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher()}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        row = await started(w, "HOLD:bg the vendors")
        seen = await w.say(ALICE, DM, say_calls(("hard_cancel_task", {"task_id": row.id}),
                                                ("hard_cancel_task", {"task_id": "nosuchrun"})))
        assert seen.tool_results[0].startswith(f"Stopped run {row.id} (researcher).")
        assert seen.tool_results[1].startswith("No background run 'nosuchrun' in this conversation.")
        done = await ended(w, row.id, "stopped")
        assert done.reason == "stopped by Agent (the agent that started it)"
        [report] = await report_runs(w)
        await settled(w, report.id)
        assert any("⏹ stopped by Agent" in c for c in cards(w))
        seen = await w.say(ALICE, DM, say_calls(("hard_cancel_task", {"task_id": row.id})))
        assert seen.tool_results[0].startswith(f"Run {row.id} (researcher) has already ended (stopped), so there is "
                                               "nothing to stop")


# --- allow_questions: only for delegates that wait -----------------------------------------


async def test_a_background_delegate_is_never_given_ask_parent(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "auto", "allow_questions": True}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        prompt = say_calls(("ask_parent", {"questions": []}))
        seen = await w.say(ALICE, DM, say_calls(("task", {"agent": "researcher", "prompt": prompt, "mode": "async"})))
        assert seen.tool_results[0].startswith("Started in the background as run "), seen.tool_results
        [row] = await background_runs(w)
        done = await ended(w, row.id, "finished")
        assert "Unknown tool name: 'ask_parent'" in done.answer, "nobody is left to answer a background delegate"
        assert not [r for r in await report_runs(w) if "Question" in r.reason], "nothing was asked"


def test_allow_questions_where_every_delegate_detaches_is_refused_at_load(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, agents={"assistant": delegating({"mode": "async", "allow_questions": True}),
                                         "researcher": researcher()})
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem.startswith(f"{cfg / 'agents' / 'assistant.yaml'}:")
    assert "capabilities.0.config.allow_questions: allow_questions reaches only delegates that wait (mode sync)" \
           in problem


# --- allow_dynamic: create_agent and delegate -----------------------------------------------


async def test_a_specialist_the_model_writes_runs_on_a_configured_model_only(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "sync", "allow_dynamic": True}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.say(ALICE, DM, say_calls(
            ("create_agent", {"name": "poet", "instructions": "You write haiku.", "model": "openai:gpt-4o"}),
            ("create_agent", {"name": "researcher", "instructions": "x", "model": "held"}),
            ("delegate", {"agent": "poet", "prompt": "rain"}),
            ("create_agent", {"name": "poet", "instructions": "You write haiku.", "model": "held"}),
            ("delegate", {"agent": "poet", "prompt": "a haiku on rain"}),
        ))
        refused, configured, unknown, created, answer = seen.tool_results
        assert refused == ("Not created: 'openai:gpt-4o' is not a model this deployment runs. A specialist you write "
                           "may use only a model the config already names: held.")
        assert configured.startswith("Not created: 'researcher' is one of your configured delegates")
        assert unknown.startswith("No specialist named 'poet' was created in this reply.")
        assert created.startswith("Created poet on held.")
        assert "You said: a haiku on rain" in answer
        assert any("these models: held" in i for i in seen.instructions), "the model is told what it may choose"

        seen = await w.say(ALICE, DM, say_calls(("delegate", {"agent": "poet", "prompt": "again"})))
        assert seen.tool_results[0].startswith("No specialist named 'poet' was created in this reply."), \
            "a specialist lasts the reply it was created in"
        [run] = await delegate_runs(await w.turn(ALICE, DM, "later"))
        assert (run["agent"], run["kind"], run["outcome"]) == ("poet", "dynamic", "finished")
        assert "You write haiku." in json.dumps(run["transcript"])


async def test_a_written_specialist_may_run_in_the_background_and_never_asks(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"mode": "auto", "allow_dynamic": True, "allow_questions": True}),
              "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.say(ALICE, DM, say_calls(
            ("create_agent", {"name": "poet", "instructions": "You write haiku.", "model": "held"}),
            ("delegate", {"agent": "poet", "prompt": say_calls(("ask_parent", {"question": "rhyme?"})),
                          "mode": "async"})))
        assert seen.tool_results[1].startswith("Started in the background as run ")
        [row] = await background_runs(w)
        done = await ended(w, row.id, "finished")
        assert (row.delegate, row.kind) == ("poet", "dynamic")
        assert "Unknown tool name: 'ask_parent'" in done.answer, "instructions a model wrote do not ask anyone"


# --- the catalog ----------------------------------------------------------------------------

# The seed catalog's row for subagents ("What ships"), in its order.
SEED_TOOLS = ["task", "check_task", "wait_tasks", "list_active_tasks", "answer_subagent", "send_message_to_subagent",
              "soft_cancel_task", "hard_cancel_task", "create_agent", "delegate"]


def test_the_cli_lists_every_tool_the_seed_lists_for_subagents(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["capabilities", "--json"]) == 0
    [entry] = [c for c in json.loads(capsys.readouterr().out)["capabilities"] if c["id"] == "subagents"]
    assert [t["id"] for t in entry["tools"]] == SEED_TOOLS
    assert [t["id"] for t in entry["tools"] if t["side_effecting"]] == list(ACTING), "only the three that act ask"
    assert cli.main(["capabilities"]) == 0
    text = capsys.readouterr().out
    for name in SEED_TOOLS:
        assert f"  tool {name}" in text, name


async def test_a_written_specialist_lasts_through_an_approval_park_of_its_reply(tmp_path: Path) -> None:
    parent = delegating({"mode": "sync", "allow_dynamic": True}, {"id": "memory_files", "approval": "required"})
    async with world(tmp_path, agents={"assistant": parent, "researcher": researcher()}) as w:
        await w.say(ALICE, DM, say_calls(
            ("create_agent", {"name": "poet", "instructions": "You write haiku.", "model": "held"}),
            ("list_memory", {}),
            ("delegate", {"agent": "poet", "prompt": "a haiku on snow"})))
        [parked] = await w.gw.store.runs_in([repo.PARKED])
        [card] = w.adapter("slack").cards
        [item] = card.items
        outcome = await w.gw.decide(item.approval_id, Decision.APPROVE, Sender(ALICE.account_id, ALICE.name),
                                    binding_id="slack", surface="button")
        assert outcome.accepted, outcome.message
        assert (await settled(w, parked.id)).status == repo.FINISHED
        posted = "\n".join(t for _, t in w.adapter("slack").posts.values())
        assert "You said: a haiku on snow" in posted, "the specialist created before the park answered after it"
