"""subagents (sync): a delegate's answer comes back into the parent's turn; ceilings answer as tool results; bad config is refused at load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.subagents import delegate_runs
from gateway import extensions
from gateway.messages import ChatKind

from ..conftest import wait_for, write_config
from .scripted import say_calls
from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
LIFECYCLE = {"check_task", "wait_tasks", "list_active_tasks", "answer_subagent", "send_message_to_subagent",
             "soft_cancel_task", "hard_cancel_task", "create_agent", "delegate"}


def delegating(config: dict[str, Any], *others: dict[str, Any], subagents: tuple[str, ...] = ("researcher",)) -> dict[str, Any]:
    spec = agent({"id": "subagents", "config": config}, *others, model="scripted")
    return {**spec, "subagents": list(subagents)}


def researcher(**extra: Any) -> dict[str, Any]:
    return {**agent(model="scripted"), "name": "Researcher", "description": "Finds things out",
            "instructions": "You are the researcher.", **extra}


def task(name: str, prompt: str) -> tuple[str, dict[str, Any]]:
    return ("task", {"agent": name, "prompt": prompt})


async def test_a_sync_delegate_answers_into_the_parents_turn_and_its_run_is_stored(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}, {"id": "planning"}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        plan = say_calls(("write_plan", {"items": [{"content": "look"}]}))
        seen = await w.run(ALICE, DM, say_calls(task("researcher", "the capital of France?"), task("researcher", plan)))
        first, second = seen.tool_results
        assert "You said: the capital of France?" in first
        assert "Unknown tool name: 'write_plan'" in second, "the parent's planning is not lent to the delegate"
        assert seen.output == second
        assert "task" in seen.defs and not LIFECYCLE & set(seen.defs), "a sync-only agent is offered task alone"
        assert any("- researcher: Finds things out" in i for i in seen.instructions)
        assert any(i.startswith("You are the researcher.") for i in seen.instructions)

        turn = await w.turn(ALICE, DM, "later")
        runs = await delegate_runs(turn)
        assert [(r["agent"], r["kind"], r["outcome"]) for r in runs] == [("researcher", "pinned", "finished")] * 2
        assert runs[0]["usage"]["requests"] == 1 and runs[1]["usage"]["requests"] == 2
        assert runs[0]["transcript"][0]["parts"][-1]["content"] == "the capital of France?"


async def test_the_person_reads_the_delegates_answer_in_the_reply(tmp_path: Path) -> None:
    agents = {"assistant": delegating({}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        await w.say(ALICE, DM, say_calls(task("researcher", "the tallest mountain?")))
        posted = "\n".join(text for _, text in w.adapter("slack").posts.values())
        assert "You said: the tallest mountain?" in posted


async def test_shared_capabilities_and_inline_specialists(tmp_path: Path) -> None:
    config = {"inline": [{"name": "planner", "description": "Plans", "model": "scripted"}],
              "share_with_delegates": ["planning"]}
    agents = {"assistant": delegating(config, {"id": "planning"}, subagents=())}
    async with world(tmp_path, agents=agents) as w:
        plan = say_calls(("write_plan", {"items": [{"content": "look"}]}))
        seen = await w.run(ALICE, DM, say_calls(task("planner", plan)))
        assert "Plan updated: 1 step(s)." in seen.tool_results[-1], "a shared capability is lent"
        [run] = await delegate_runs(await w.turn(ALICE, DM, "later"))
        assert (run["agent"], run["kind"], run["outcome"]) == ("planner", "specialist", "finished")


async def test_past_max_fanout_the_model_is_told_in_a_tool_result(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"max_fanout": 1}), "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.run(ALICE, DM, say_calls(task("researcher", "one"), task("researcher", "two")))
        assert "You said: one" in seen.tool_results[0]
        assert seen.tool_results[1].startswith("Not delegated: this reply has already made 1 delegations")
        assert len(await delegate_runs(await w.turn(ALICE, DM, "later"))) == 1


@pytest.mark.parametrize(("root_depth", "middle_depth", "reached"), [(1, 3, False), (2, 1, True), (3, 1, True)])
async def test_each_agent_is_held_to_its_own_max_depth(tmp_path: Path, root_depth: int, middle_depth: int,
                                                       reached: bool) -> None:
    middle = {**delegating({"max_depth": middle_depth}, subagents=("bottom",)), "name": "Middle"}
    bottom = {**delegating({"max_depth": 3}, subagents=("researcher",)), "name": "Bottom"}
    agents = {"assistant": delegating({"max_depth": root_depth}, subagents=("middle",)), "middle": middle,
              "bottom": bottom, "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        deepest = say_calls(task("researcher", "too deep"))
        seen = await w.run(ALICE, DM, say_calls(task("middle", say_calls(task("bottom", deepest)))))
        answer = seen.tool_results[-1]
        if reached:  # middle delegates to bottom; bottom is at the bound and has no task tool
            assert "Unknown tool name: 'task'" in answer and "too deep" not in answer
            assert [r["agent"] for r in await delegate_runs(await w.turn(ALICE, DM, "x"))] == ["middle", "bottom"]
        else:  # the root's 1 leaves middle no delegation at all
            assert "Unknown tool name: 'task'" in answer
            assert [r["agent"] for r in await delegate_runs(await w.turn(ALICE, DM, "x"))] == ["middle"]


async def test_a_long_answer_is_clipped_with_a_marker_and_stored_whole(tmp_path: Path) -> None:
    agents = {"assistant": delegating({"max_result_chars": 200}), "researcher": researcher()}
    long = "word " * 200
    async with world(tmp_path, agents=agents) as w:
        seen = await w.run(ALICE, DM, say_calls(task("researcher", long)))
        result = seen.tool_results[0]
        assert "characters of the delegate's answer cut here (max_result_chars 200)" in result
        assert len(result) < 400 and result.rstrip().endswith("word")
        [run] = await delegate_runs(await w.turn(ALICE, DM, "later"))
        assert long.strip() in run["answer"]


def test_bad_delegation_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    config = {"inline": [{"name": "nomodel", "instructions": "x"}],
              "share_with_delegates": ["web_search", "subagents"]}
    cfg = write_config(tmp_path, agents={"assistant": delegating(config, subagents=("ghost",))})
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = [str(p) for p in e.value.problems if not p.warning]
    path = cfg / "agents" / "assistant.yaml"
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert f"{path}:" in text
    for message in ("subagents.0: unknown delegate 'ghost'", "capabilities.0.config.inline.0: specialist 'nomodel' "
                    "names no model", "share_with_delegates.0: 'web_search' is not a capability this agent holds",
                    "share_with_delegates.1: subagents cannot be shared"):
        [line] = [p for p in problems if message in p]
        assert line.startswith(str(path)) and line.split(":")[1].isdigit(), line


async def test_a_delegate_needing_approval_parks_the_parents_run_on_a_card_naming_it(tmp_path: Path) -> None:
    gated = researcher(capabilities=[{"id": "planning", "approval": "required"}])
    agents = {"assistant": delegating({}), "researcher": gated}
    async with world(tmp_path, agents=agents) as w:
        plan = say_calls(("write_plan", {"items": [{"content": "look"}]}))
        await w.say(ALICE, DM, say_calls(task("researcher", plan)))  # returns once parked
        cards = w.adapter("slack").cards
        await wait_for(lambda: bool(cards), what="the approval card")
        [card] = cards
        [item] = card.items
        assert item.headline == "researcher wants to run write_plan" and item.capability == "planning"
        parent = await w.gw.store.run(card.run_id)
        assert parent is not None and parent.status == "parked", "the whole run parks, not just the delegate"
        [stored] = (await w.gw.store.capability_state.items("subagents", parent.conversation_id)).values()
        run = json.loads(stored)
        assert run["outcome"] == "parked"
        parts = [p for m in run["transcript"] for p in m["parts"]]
        assert any(p.get("tool_name") == "write_plan" for p in parts), "its messages are stored to resume from"
        assert not [p for p in parts if p["part_kind"] == "tool-return"], "the gated tool never ran"
