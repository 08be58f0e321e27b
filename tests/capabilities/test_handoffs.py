"""handoffs: send_to_agent waits for an answer or hands work over into the same thread under the target's name;
chains stop at depth 4, a conversation makes at most 8; refusals are tool results; bad config is refused at load."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.handoffs import _take_slot
from capabilities.subagents import delegate_runs
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store import repo

from ..conftest import wait_for, write_config
from .scripted import say_calls
from .support import Account, Place, World, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
ENVELOPE = '<untrusted-content source="agent:'


def member(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    """A scripted agent with the handoffs capability."""
    return {"name": name, "description": description, "model": "scripted", "instructions": f"You are {name}.",
            "capabilities": [{"id": "handoffs"}], **extra}


def send(agent: str, message: str, wait: bool) -> tuple[str, dict[str, Any]]:
    return ("send_to_agent", {"agent": agent, "message": message, "wait": wait})


async def handed_runs(w: World) -> list[repo.Run]:
    """Runs of conversations a handoff started, oldest first."""
    runs = await w.gw.store.runs_in(sorted(repo.ENDED | {repo.QUEUED, repo.RUNNING, repo.PARKED}))
    out = []
    for run in runs:
        conv = await w.gw.store.conversation(run.conversation_id)
        if conv is not None and "#handoff:" in conv.key:
            out.append(run)
    return sorted(out, key=lambda r: r.created_at)


async def test_wait_false_hands_over_and_the_target_answers_in_the_same_thread_under_its_name(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant"), "researcher": member("Researcher", "Finds things out")}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.say(ALICE, CHANNEL, say_calls(send("researcher", "what is the capital of France?", False)))
        assert seen.tool_results[0].startswith("Handed over to Researcher (researcher)"), seen.tool_results
        adapter = w.adapter("slack")

        def researcher_posts() -> list[Any]:
            return [(t, text) for t, text in adapter.posts.values() if t.speaker == "Researcher"]

        async def answered() -> bool:
            runs = await handed_runs(w)
            return bool(runs) and runs[0].status == repo.FINISHED

        await wait_for(answered, what="the researcher's run")
        [(target, text)] = researcher_posts()
        [(own_target, _)] = [(t, x) for t, x in adapter.posts.values() if not t.speaker]
        assert (target.channel, target.thread) == (own_target.channel, own_target.thread) == ("C1", "1.000")
        assert text.startswith("**Researcher:**"), "the fake platform cannot post under another name: a header says who"
        assert "what is the capital of France?" in text and ENVELOPE + 'assistant">' in text, \
            "the target read the message inside the untrusted-content envelope"
        [run] = await handed_runs(w)
        assert run.agent_id == "researcher"
        assert target.conversation_id == run.conversation_id != own_target.conversation_id, "a conversation of its own"
        alice = await w.person(ALICE)
        assert run.requester_person_id == alice and run.requester_name == "alice", "it acts for the same person"
        state = await w.gw.store.capability_state.items("handoffs", own_target.conversation_id)
        assert json.loads(state["sent:01"])["conversation"] == run.conversation_id, "counted where it was sent from"
        origin = json.loads(await w.gw.store.capability_state.get("handoffs", run.conversation_id, "origin") or "{}")
        assert (origin["from_conversation"], origin["from_agent"], origin["depth"]) == \
            (own_target.conversation_id, "assistant", 1)


async def test_wait_true_returns_the_answer_into_the_callers_turn(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant"), "researcher": member("Researcher", "Finds things out")}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.run(ALICE, DM, say_calls(("list_agents", {}), send("researcher", "the tallest mountain?", True)))
        listing, answer = seen.tool_results
        assert listing == "- researcher (Researcher): Finds things out"
        assert "You said:" in answer and "the tallest mountain?" in answer and ENVELOPE in answer
        assert seen.output == answer
        assert {"send_to_agent", "list_agents"} <= set(seen.defs)
        turn = await w.turn(ALICE, DM, "later")
        [run] = await delegate_runs(turn)
        assert (run["agent"], run["kind"], run["outcome"]) == ("researcher", "handoff", "finished")
        assert await handed_runs(w) == [], "wait: true starts no conversation of its own"


async def test_an_agent_answering_a_wait_true_may_not_wait_for_another(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant"), "researcher": member("Researcher"), "writer": member("Writer")}
    async with world(tmp_path, agents=agents) as w:
        onward = say_calls(send("writer", "draft it", True))
        seen = await w.run(ALICE, DM, say_calls(send("researcher", onward, True)))
        assert seen.tool_results[-1].startswith("Not sent: you are answering another agent's send_to_agent")
        runs = await delegate_runs(await w.turn(ALICE, DM, "x"))
        assert [r["agent"] for r in runs] == ["researcher"], "the writer never ran"


async def test_a_chain_of_handoffs_stops_at_depth_4_with_a_tool_result(tmp_path: Path) -> None:
    names = ["a", "b", "c", "d", "e", "f"]
    agents = {n: member(n.upper()) for n in names}
    # a → b → c → d → e each hand over (wait: false); e's handoff to f would be the 5th hop.
    script = say_calls(send("f", "too far", False))
    for target in reversed(names[1:5]):
        script = say_calls(send(target, script, False))
    async with world(tmp_path, agents=agents, bindings={"slack": {"platform": "slack", "agent": "a",
                                                                   "slack": {"bot_token": "env:SLACK_BOT",
                                                                             "app_token": "env:SLACK_APP"}}}) as w:
        await w.say(ALICE, DM, script)

        async def chain_ended() -> bool:
            runs = await handed_runs(w)
            return len(runs) == 4 and all(r.status in repo.ENDED for r in runs)

        await wait_for(chain_ended, what="the chain of handoffs", timeout=30)
        runs = await handed_runs(w)
        assert [r.agent_id for r in runs] == ["b", "c", "d", "e"], "f was never started"
        assert all(r.status == repo.FINISHED for r in runs), "a refusal is a tool result, never a failed turn"
        last = [text for t, text in w.adapter("slack").posts.values() if t.speaker == "E"]
        assert len(last) == 1 and "Not sent: this work has already been handed on 4 times" in last[0]


async def test_the_ninth_handoff_of_a_conversation_is_refused_also_after_a_restart(tmp_path: Path,
                                                                                  db_url: str | None) -> None:
    agents = {"assistant": member("Assistant"), "researcher": member("Researcher")}
    database = {"database": {"url": db_url}} if db_url else None
    async with world(tmp_path, agents=agents, gateway=database) as w:
        first = await w.run(ALICE, DM, say_calls(*[send("researcher", f"q{i}", True) for i in range(5)]))
        assert all("You said:" in r for r in first.tool_results)
    async with world(tmp_path, agents=agents, gateway=database) as w:  # the same store, a new process
        w._ids = itertools.count(100)  # the first world's event ids are in the ledger
        second = await w.run(ALICE, DM, say_calls(*[send("researcher", f"r{i}", True) for i in range(4)]))
        assert all("You said:" in r for r in second.tool_results[:3])
        assert second.tool_results[3].startswith("Not sent: this conversation has already made 8 handoffs")
        assert len(await delegate_runs(await w.turn(ALICE, DM, "x"))) == 8


async def test_racing_handoffs_take_at_most_eight_slots(tmp_path: Path, db_url: str | None) -> None:
    """Two replicas racing for the last slots are two connections racing for one key: only one wins each."""
    agents = {"assistant": member("Assistant"), "researcher": member("Researcher")}
    async with world(tmp_path, agents=agents, gateway={"database": {"url": db_url}} if db_url else None) as w:
        turn = await w.turn(ALICE, DM, "x")
        slots = await asyncio.gather(*[_take_slot(turn, {"n": i}) for i in range(12)])
        assert sorted(s for s in slots if s is not None) == list(range(1, 9))
        assert slots.count(None) == 4


async def test_an_agent_not_in_the_list_itself_or_an_unknown_one_is_refused(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant", handoffs=["researcher"]), "researcher": member("Researcher"),
              "writer": member("Writer"), "loner": member("Loner", capabilities=[], handoffs=False)}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.run(ALICE, DM, say_calls(send("writer", "hi", True), send("assistant", "hi", False),
                                                send("ghost", "hi", False), ("list_agents", {})))
        not_listed, itself, unknown, listing = seen.tool_results
        assert not_listed.startswith("Not sent: this agent may not send work to 'writer'")
        assert itself.startswith("Not sent: this agent may not send work to itself")
        assert unknown.startswith("Not sent: there is no agent 'ghost'")
        assert listing == "- researcher (Researcher): no description"
        assert await delegate_runs(await w.turn(ALICE, DM, "x")) == [] and await handed_runs(w) == []


async def test_team_means_the_agents_named_under_subagents(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant", handoffs="team", subagents=["writer"]), "researcher": member("R"),
              "writer": member("Writer")}
    async with world(tmp_path, agents=agents) as w:
        seen = await w.run(ALICE, DM, say_calls(("list_agents", {}), send("researcher", "hi", True)))
        assert seen.tool_results[0] == "- writer (Writer): no description"
        assert seen.tool_results[1].startswith("Not sent: this agent may not send work to 'researcher'")


def test_bad_handoffs_are_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    agents = {"assistant": member("Assistant", handoffs=["researcher", "ghost", "assistant"]),
              "researcher": member("Researcher", handoffs="team"),
              "closed": member("Closed", handoffs=False)}
    cfg = write_config(tmp_path, agents=agents)
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = [str(p) for p in e.value.problems if not p.warning]
    assert len(problems) == 4, problems
    expected = {
        "assistant": ["handoffs.1: unknown agent 'ghost'", "handoffs.2: an agent cannot send work to itself"],
        "researcher": ["handoffs: handoffs: team means the agents named under subagents:"],
        "closed": ["capabilities.0.id: the handoffs capability is listed but handoffs: false"],
    }
    for agent_id, messages in expected.items():
        path = cfg / "agents" / f"{agent_id}.yaml"
        for message in messages:
            [line] = [p for p in problems if message in p]
            assert line.startswith(f"{path}:") and line.split(":")[1].isdigit(), line


def test_the_shipped_example_loads_beside_the_researcher(tmp_path: Path) -> None:
    examples = Path(__file__).parents[2] / "config" / "examples"
    cfg = write_config(tmp_path, agents={}, bindings={"web": {"platform": "web", "agent": "coordinator"}})
    for name in ("coordinator", "researcher"):
        (cfg / "agents" / f"{name}.yaml").write_text((examples / f"{name}.yaml").read_text())
    extensions.register_checks()
    config = load_config(cfg)
    assert config.agents["coordinator"].handoffs == ["researcher"]
