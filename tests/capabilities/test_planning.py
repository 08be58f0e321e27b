"""planning: a plan written in one turn is in the next turn's tail, survives a restart, belongs to its conversation."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai_harness.planning import PlanItem
from sqlalchemy import select

from gateway.messages import ChatKind, Sender
from gateway.store.models import Conversation
from gateway.outbound.adapter import Decision
from gateway.store import repo
from gateway.store.plans import ConversationPlanStore

from ..conftest import wait_for
from .knowledge_script import SCRIPT, call, scripted_agent, world_on
from .support import Account, Place

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
DM_BOB = Place("slack", "slack", "T1", "D2", ChatKind.DM)
AGENTS = {"assistant": scripted_agent({"id": "planning"})}
STEPS = [{"content": "Draft the announcement", "status": "in_progress"}, {"content": "Send it to the team"}]


def _reminder(tail: list[str]) -> str:
    return next((t for t in tail if t.startswith("<plan-reminder>")), "")


async def _a_plan_lives_across_turns_and_restarts(tmp_path: Path, db_url: str | None) -> None:
    async with world_on(tmp_path, db_url, agents=AGENTS) as w:
        await w.run(ALICE, DM_ALICE, call("write_plan", items=STEPS))
        assert SCRIPT.results[0].startswith("Plan updated: 2 step(s).")

        SCRIPT.requests.clear()
        await w.run(ALICE, DM_ALICE, "how far along are we?")
        [request] = SCRIPT.requests
        reminder = _reminder(request.tail)
        assert "1. [~] Draft the announcement" in reminder and "2. [ ] Send it to the team" in reminder
        assert "Draft the announcement" not in request.instructions, "the plan is a tail reminder, not the system prompt"

        SCRIPT.requests.clear()
        await w.run(BOB, DM_BOB, "hello")
        assert not _reminder(SCRIPT.requests[0].tail), "another conversation has no plan"

    async with world_on(tmp_path, db_url, agents=AGENTS) as w:  # a restart: the same database
        SCRIPT.requests.clear()
        await w.run(ALICE, DM_ALICE, call("read_plan"))
        assert "Draft the announcement" in _reminder(SCRIPT.requests[0].tail)
        assert "Send it to the team" in SCRIPT.results[0] and "Summary: 0 completed, 1 in progress, 1 pending" \
            in SCRIPT.results[0]


async def test_a_plan_is_in_the_next_turns_tail_and_survives_a_restart(tmp_path: Path, db_url: str | None) -> None:
    await _a_plan_lives_across_turns_and_restarts(tmp_path, db_url)


async def test_a_finished_plan_is_kept_but_not_seeded_again(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        done = [{"content": "Draft the announcement", "status": "completed"},
                {"content": "Send it to the team", "status": "cancelled"}]
        await w.run(ALICE, DM_ALICE, call("write_plan", items=done))
        SCRIPT.requests.clear()
        await w.run(ALICE, DM_ALICE, call("read_plan"))
        assert not _reminder(SCRIPT.requests[0].tail)
        assert SCRIPT.results[-1] == "No plan yet. Use write_plan to create one."
        turn = await w.turn(ALICE, DM_ALICE, "look")
        [finished] = await ConversationPlanStore(turn.state, turn.conversation.id, turn.clock).finished()
        assert [i.content for i in finished] == ["Draft the announcement", "Send it to the team"]


async def test_a_parked_runs_plan_wins_on_resume(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        turn = await w.turn(ALICE, DM_ALICE, "start")
        await w.gw.store.end_run(turn.run_id, repo.FINISHED)
        store = ConversationPlanStore(turn.state, turn.conversation.id, turn.clock)
        await w.run(ALICE, DM_ALICE, call("write_plan", items=STEPS))
        await store.park("run-parked")  # what the capability does when a run parks on an approval
        await w.run(ALICE, DM_ALICE, call("write_plan", items=[{"content": "Something else"}]))
        await store.begin_run("run-parked")  # its resume
        assert [i.content for i in await store.get_items()] == ["Draft the announcement", "Send it to the team"]
        await store.begin_run("run-parked")
        assert len(await store.get_items()) == 2, "the parked copy is used once"


async def test_subtask_tools_only_under_enable_subtasks(tmp_path: Path) -> None:
    agents = {"assistant": scripted_agent({"id": "planning"}), "deep": scripted_agent(
        {"id": "planning", "config": {"enable_subtasks": True}})}
    bindings = {"slack": {"platform": "slack", "agent": "assistant",
                          "slack": {"bot_token": "env:SLACK_BOT", "app_token": "env:SLACK_APP"}},
                "telegram": {"platform": "telegram", "agent": "deep", "telegram": {"token": "env:TG_TOKEN"},
                             "admission": {"dm": "open"}}}
    async with world_on(tmp_path, agents=agents, bindings=bindings) as w:
        await w.run(ALICE, DM_ALICE, "hello")
        assert "add_subtask" not in SCRIPT.requests[-1].tools and "write_plan" in SCRIPT.requests[-1].tools
        await w.run(Account("telegram", "tg", "7", "t"), Place("telegram", "telegram", "tg", "7", ChatKind.DM), "hi")
        assert {"add_subtask", "set_dependency", "get_available_tasks"} <= set(SCRIPT.requests[-1].tools)


async def test_a_renamed_planning_tool_keeps_the_plan_reminder(tmp_path: Path) -> None:
    agents = {"assistant": scripted_agent({"id": "planning", "tool_overrides": {"write_plan": {"name": "make_plan"}}})}
    async with world_on(tmp_path, agents=agents) as w:
        await w.run(ALICE, DM_ALICE, call("make_plan", items=STEPS))
        assert SCRIPT.results[0].startswith("Plan updated: 2 step(s).")
        SCRIPT.requests.clear()
        await w.run(ALICE, DM_ALICE, "next?")
        assert "Draft the announcement" in _reminder(SCRIPT.requests[0].tail)
        assert "make_plan" in SCRIPT.requests[0].tools and "write_plan" not in SCRIPT.requests[0].tools


async def test_a_parked_runs_plan_wins_on_resume_through_an_approval(tmp_path: Path) -> None:
    gated = {"id": "planning", "tool_approval": {"update_task_status": "required"}}
    async with world_on(tmp_path, agents={"assistant": scripted_agent(gated)}) as w:
        steps = [{"id": "a", "content": "Draft the announcement", "status": "in_progress"},
                 {"id": "b", "content": "Send it to the team"}]
        await w.say(ALICE, DM_ALICE, call("write_plan", items=steps))
        await w.say(ALICE, DM_ALICE, call("update_task_status", task_id="a", status="completed"))  # parks
        [card] = await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        async with w.gw.store.sessions() as s:
            conversation_id = await s.scalar(select(Conversation.id).where(Conversation.channel == "D1"))
        store = ConversationPlanStore(w.gw.store.capability_state, conversation_id, w.gw.clock)
        await store.set_items([PlanItem(content="Something written while the run was parked")])

        outcome = await w.gw.decide(card.items[0].approval_id, Decision.APPROVE, Sender("U1", "alice"),
                                    binding_id="slack", surface="test")
        assert outcome.accepted, outcome.message

        async def resumed() -> list[tuple[str, str]]:
            items = [(i.id, i.status.value) for i in await store.get_items()]
            return items if ("a", "completed") in items else []

        assert await wait_for(resumed, what="the resumed run's update") == [("a", "completed"), ("b", "pending")]
