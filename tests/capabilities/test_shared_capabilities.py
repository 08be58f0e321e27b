"""Capabilities built once and held by the agent's shared Agent (`CapabilityDecl.shared`; bench/README.md,
Rounds 12 and 13): runs of one agent at once each see only their own state through them, their tools are
still gated by their entry, and a delegation reuses its delegate's shared Agent.

The memory notes (test_memory_files.py), the clock (test_clock.py) and a shared tool's renames and denials
(test_approval_gate.py) have their own tests; these are the capabilities shared since Round 13.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.profiles import ModelProfile

from capabilities.registry import REGISTRY, BuildContext, CapabilityDecl
from gateway.messages import ChatKind
from gateway.runs import llm
from gateway.runs.agent_run import run_agent
from gateway.runs.runner import TurnAgent
from gateway.store import repo

from ..conftest import wait_for
from . import interleaved
from .interleaved import at_once, step
from .shaping_script import SCRIPT, call, say
from .support import Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
DM_BOB = Place("slack", "slack", "T1", "D2", ChatKind.DM)
DM_ALICE_2 = Place("slack", "slack", "T1", "D4", ChatKind.DM)
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
SKILLS = Path(__file__).parents[2] / "config" / "examples" / "skills"
SKILL = "incident-summary"
SKILL_BODY = "Never speculate about a root cause"


def _reminders(prompt: str) -> str:
    """The text each request of the run `prompt` carried after the person's words (the plan's reminder)."""
    return "\n".join(str(p.content) for sent in interleaved.SENT[prompt] for m in sent if isinstance(m, ModelRequest)
                     for p in m.parts if isinstance(p, UserPromptPart) and p.content != prompt)


async def test_two_conversations_at_once_each_keep_and_are_reminded_of_only_their_own_plan(tmp_path: Path) -> None:
    """planning is built once: a DM's run and a channel's run of one agent, interleaved, each write, read
    and are reminded of their own conversation's plan only, while the other's plan is written."""
    dm_wrote, room_wrote = asyncio.Event(), asyncio.Event()
    interleaved.script({
        "in the dm": [step("write_plan", items=[{"content": "DM-STEP"}]),
                      step("read_plan", signal=dm_wrote, after=room_wrote), step(None)],
        "in the room": [step("write_plan", after=dm_wrote, items=[{"content": "ROOM-STEP"}]),
                        step("read_plan", signal=room_wrote), step(None)],
    })
    async with world(tmp_path, agents={"assistant": agent({"id": "planning"}, model="interleaved")}) as w:
        in_dm, in_room = await w.turn(ALICE, DM_ALICE, "in the dm"), await w.turn(BOB, CHANNEL, "in the room")
        agents = await at_once(w, (in_dm, "in the dm"), (in_room, "in the room"))
        assert [a._capabilities for a in agents] == [[], []], "planning is the shared Agent's, not each run's"
        dm, room = "\n".join(interleaved.SHOWN["in the dm"]), "\n".join(interleaved.SHOWN["in the room"])
        assert "DM-STEP" in interleaved.SHOWN["in the dm"][-1] and "ROOM-STEP" not in dm, dm
        assert "ROOM-STEP" in interleaved.SHOWN["in the room"][-1] and "DM-STEP" not in room, room
        assert "DM-STEP" in _reminders("in the dm") and "ROOM-STEP" not in _reminders("in the dm")
        assert "ROOM-STEP" in _reminders("in the room") and "DM-STEP" not in _reminders("in the room")


async def test_each_persons_workspace_is_their_own_and_a_group_has_none_while_both_run(tmp_path: Path) -> None:
    """sandbox (session_scope user) is built once: each run's instructions and tools are its own person's
    workspace, worked out at the run, and a channel's run beside them has none."""
    alice_wrote, bob_wrote = asyncio.Event(), asyncio.Event()
    interleaved.script({
        "alice": [step("write_file", path="a.md", content="alice-token"),
                  step("ls", signal=alice_wrote, after=bob_wrote, path=""), step(None)],
        "bob": [step("ls", after=alice_wrote, path=""), step("read_file", path="a.md"),
                step("write_file", path="b.md", content="bob-token"), step(None, signal=bob_wrote)],
        "room": [step("ls", after=alice_wrote, path=""), step(None)],
    })
    entry = {"id": "sandbox", "config": {"session_scope": "user"}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="interleaved")}) as w:
        runs = [(await w.turn(ALICE, DM_ALICE, "alice"), "alice"), (await w.turn(BOB, DM_BOB, "bob"), "bob"),
                (await w.turn(ALICE, CHANNEL, "room"), "room")]
        agents = await at_once(w, *runs)
        assert [a._capabilities for a in agents] == [[], [], []], "sandbox is the shared Agent's, not each run's"
        shown = interleaved.SHOWN
        assert "alice's own workspace" in shown["alice"][0] and "bob" not in shown["alice"][0]
        assert "bob's own workspace" in shown["bob"][0] and "alice" not in shown["bob"][0]
        assert "no workspace for you" in shown["room"][0]
        alice, bob, room = ("\n".join(shown[k]) for k in ("alice", "bob", "room"))
        assert "a.md" in shown["alice"][-1] and "b.md" not in alice
        assert "alice-token" not in bob and "a.md" not in shown["bob"][2], bob  # [2]: what its ls listed
        assert "a.md" not in room and "alice-token" not in room


async def test_conversation_search_answers_the_dm_and_refuses_the_channel_at_once(tmp_path: Path) -> None:
    """conversation_search is built once: the DM's run searches the person's conversations while the
    channel's run beside it is refused, each as its own run says."""
    dm_searched = asyncio.Event()
    interleaved.script({
        "find tea": [step("search_conversations", query="tea"), step(None, signal=dm_searched)],
        "find tea here": [step("search_conversations", after=dm_searched, query="tea"), step(None)],
    })
    async with world(tmp_path, agents={"assistant": agent({"id": "conversation_search"}, model="interleaved")}) as w:
        earlier = await w.turn(ALICE, DM_ALICE_2, "we talked about tea yesterday")
        await w.gw.store.end_run(earlier.run_id, repo.FINISHED, reply="ok")
        dm, room = await w.turn(ALICE, DM_ALICE, "find tea"), await w.turn(ALICE, CHANNEL, "find tea here")
        await at_once(w, (dm, "find tea"), (room, "find tea here"))
        [found] = interleaved.SHOWN["find tea"][2:3]
        assert "talked about" in found and "not available here" not in found, found
        [refused] = interleaved.SHOWN["find tea here"][2:3]
        assert "not available here" in refused and "talked about" not in refused, refused


async def test_a_skill_one_run_loaded_is_not_loaded_in_another_run_beside_it(tmp_path: Path) -> None:
    """skills is built once: which skills a run loaded is the run's own (pydantic-ai's run context), so a
    run beside one that loaded a skill neither reads its files nor gets its body."""
    loaded = asyncio.Event()
    template = {"skill_name": SKILL, "resource_name": "template.md"}
    interleaved.script({
        "load it": [step("load_capability", id=SKILL), step("read_skill_resource", signal=loaded, **template),
                    step(None)],
        "read it": [step("read_skill_resource", after=loaded, **template), step(None)],
    })
    shutil.copytree(SKILLS, tmp_path / "skills")
    entry = {"id": "skills", "config": {"skills": [SKILL]}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="interleaved")}) as w:
        loading, reading = await w.turn(ALICE, DM_ALICE, "load it"), await w.turn(BOB, CHANNEL, "read it")
        agents = await at_once(w, (loading, "load it"), (reading, "read it"))
        assert [a._capabilities for a in agents] == [[], []], "skills is the shared Agent's, not each run's"
        assert interleaved.SHOWN["load it"][-1].startswith("**Incident summary"), interleaved.SHOWN["load it"]
        assert SKILL_BODY in str(interleaved.SENT["load it"][-1]), "the run that loaded it got its body"
        refused, sent = interleaved.SHOWN["read it"][-1], interleaved.SENT["read it"][-1]
        assert "is not loaded" in refused and "Incident summary" not in refused, refused
        assert not any(SKILL_BODY in str(p.content) for m in sent if isinstance(m, ModelRequest) for p in m.parts)


THOUGHT: list[object] = []  # each request's thinking, as pydantic-ai resolved it for the model


async def _thinking(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    THOUGHT.append(info.model_request_parameters.thinking)
    yield "done"


llm.register_model("thinks", lambda: FunctionModel(stream_function=_thinking, model_name="thinks",
                                                   profile=ModelProfile(supports_thinking=True)))


async def test_thinking_is_the_shared_agents_and_every_run_asks_for_it(tmp_path: Path) -> None:
    THOUGHT.clear()
    spec = agent({"id": "thinking", "config": {"effort": "high"}}, model="thinks")
    async with world(tmp_path, agents={"assistant": spec}) as w:
        for where in (DM_ALICE, CHANNEL):
            turn = await w.turn(ALICE, where, "hello")
            built = w.gw.runner.build_agent(turn)
            assert isinstance(built, TurnAgent) and built._capabilities == []
            await run_agent(built, "hello", deps=turn)
            await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply="done")
    assert THOUGHT == ["high", "high"]


# --- the gate: a shared capability's tool asks as its entry says --------------------------------------------

GATED: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
    ({"id": "planning"}, "write_plan", {"items": [{"content": "x"}]}),
    ({"id": "sandbox"}, "write_file", {"path": "a.md", "content": "x"}),
    ({"id": "code_execution"}, "run_python", {"code": "1 + 1"}),
    ({"id": "conversation_search"}, "search_conversations", {"query": "tea"}),
    ({"id": "schedules"}, "schedule_task", {"task": "say hi", "at": "2099-01-01T09:00Z"}),
    ({"id": "skills", "config": {"skills": [SKILL]}}, "read_skill_resource",
     {"skill_name": SKILL, "resource_name": "template.md"}),
    ({"id": "web_fetch", "config": {"method": "local"}}, "web_fetch", {"url": "https://example.com/"}),
    ({"id": "web_research", "config": {"method": "duckduckgo"}}, "web_search", {"query": "tea"}),
]


@pytest.mark.parametrize(("entry", "tool", "args"), GATED, ids=[e["id"] for e, _, _ in GATED])
async def test_a_shared_capabilitys_tool_needing_approval_parks_and_does_not_run(
        tmp_path: Path, entry: dict[str, Any], tool: str, args: dict[str, Any]) -> None:
    required = {**entry, "tool_approval": {tool: "required"}}
    shutil.copytree(SKILLS, tmp_path / "skills")
    async with world(tmp_path, agents={"assistant": agent(required, model="shaping-scripted")}) as w:
        SCRIPT.reset(call(tool, **args))
        turn = await w.turn(ALICE, DM_ALICE, "do it")
        built = w.gw.runner.build_agent(turn)
        assert isinstance(built, TurnAgent) and built._capabilities == [], f"{entry['id']} is the shared Agent's"
        result = await run_agent(built, "do it", deps=turn)
        await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
        assert isinstance(result.output, DeferredToolRequests), result.output
        assert [c.tool_name for c in result.output.approvals] == [tool]
        assert len(SCRIPT.requests) == 1, "nothing ran and went back to the model before a person decided"


def _noticing(ctx: BuildContext) -> None:
    ctx.turn.notices.append("noticed: off for this agent")  # as web_fetch says when it cannot be gated
    return None


async def test_what_a_shared_build_tells_the_person_is_told_in_every_run(tmp_path: Path) -> None:
    REGISTRY["noticing"] = CapabilityDecl(id="noticing", name="Noticing", category="utility", tools=(),
                                          build=_noticing, shared=True)
    try:
        async with world(tmp_path, agents={"assistant": agent({"id": "noticing"}, model="shaping-scripted")}) as w:
            for where in (DM_ALICE, CHANNEL, DM_ALICE):
                turn = await w.turn(ALICE, where, "hello")
                w.gw.runner.build_agent(turn)
                assert turn.notices == ["noticed: off for this agent"]
                await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply="done")
    finally:
        del REGISTRY["noticing"]


# --- delegations: the delegate's agent is made once per parent agent and binding -----------------------------


async def test_delegations_of_one_delegate_from_two_runs_reuse_its_one_shared_agent(tmp_path: Path) -> None:
    parent = {**agent({"id": "subagents", "config": {"mode": "sync"}}, model="shaping-scripted"),
              "subagents": ["researcher"]}
    researcher = {**agent({"id": "clock"}, {"id": "planning"}, model="shaping-scripted"),
                  "description": "Finds things out"}
    async with world(tmp_path, agents={"assistant": parent, "researcher": researcher}) as w:
        agents = w.gw.runner._shared_agent
        built = []
        for n in range(3):
            SCRIPT.reset(call("task", agent="researcher", prompt=f"look {n}"), say(f"found {n}"), say("done"))
            turn = await w.turn(ALICE, DM_ALICE if n % 2 else CHANNEL, f"ask {n}")
            result = await run_agent(w.gw.runner.build_agent(turn), f"ask {n}", deps=turn)
            await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
            assert f"found {n}" in SCRIPT.requests[2].tool_results()[0]
            assert "current date and time" in SCRIPT.requests[1].instructions, "the delegate has its own capabilities"
            built.append(agents.cache_info().misses)
        assert built[1] == built[2] == built[0], f"Agents built after each delegation: {built}"


async def _spent_at_once(tmp_path: Path, entry: dict[str, Any], tool: str, alice: dict[str, Any],
                         bob: dict[str, Any], spent: Any, gateway: dict[str, Any] | None = None) -> list[Any]:
    """Alice's run and Bob's call `tool` at once (Bob's once Alice's call is done), a third run of Bob's beside
    them only answers; what each run's row says it spent (`spent` of the row), its agent the shared Agent's."""
    first = asyncio.Event()
    interleaved.script({"alice": [step(tool, **alice), step(None, signal=first)],
                        "bob": [step(tool, after=first, **bob), step(None)], "bob chats": [step(None)]})
    async with world(tmp_path, agents={"assistant": agent(entry, model="interleaved")}, gateway=gateway) as w:
        runs = [(await w.turn(ALICE, DM_ALICE, "alice"), "alice"), (await w.turn(BOB, CHANNEL, "bob"), "bob"),
                (await w.turn(BOB, DM_BOB, "bob chats"), "bob chats")]
        agents = await at_once(w, *runs)
        assert [a._capabilities for a in agents] == [[], [], []], f"{entry['id']} is the shared Agent's"
        return [spent(await w.gw.store.run(turn.run_id)) for turn, _ in runs]


async def test_two_peoples_images_drawn_at_once_are_each_spent_on_their_own_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """image_generation is built once: two people's runs draw at once, and each drawing is recorded on the
    run that asked for it (its row: what is billed to whom), none on a third run of one of them beside."""
    from tests.fakes.openai import FakeOpenAI

    from .test_image_generation import _drawing, _png

    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-image-key")
    images = await FakeOpenAI().start()
    images.image = _png()
    try:
        drawn = await _spent_at_once(tmp_path, _drawing(images), "generate_image", {"prompt": "alice's cat"},
                                     {"prompt": "bob's dog"}, lambda run: run.images)
    finally:
        await images.stop()
    assert drawn == [1, 1, 0], drawn
    assert sorted(body["prompt"] for body, _ in images.image_requests) == ["alice's cat", "bob's dog"]
    assert all("drawn but not posted" in interleaved.SHOWN[p][-1] for p in ("alice", "bob"))


async def _one_run(w: World, who: Account, where: Place, text: str) -> TurnAgent:
    """One run of `text` through the runner's agent for it, to its end; that agent."""
    turn = await w.turn(who, where, text)
    built = w.gw.runner.build_agent(turn)
    assert isinstance(built, TurnAgent)
    result = await run_agent(built, text, deps=turn)
    await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
    return built


async def test_the_reminder_cadence_is_each_conversations_own_through_the_shared_agent(tmp_path: Path) -> None:
    """system_reminders is built once: a run counts its own conversation's requests only, so the second
    request of the DM is reminded and a channel's first request, between the DM's two, is not."""
    from .test_system_reminders import LINE, _tail

    entry = {"id": "system_reminders", "config": {"reminders": [{"text": LINE, "interval": 2}]}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="shaping-scripted")}) as w:
        tails = []
        for who, where in ((ALICE, DM_ALICE), (BOB, CHANNEL), (ALICE, DM_ALICE)):
            SCRIPT.reset(say("ok"))
            built = await _one_run(w, who, where, "hello")
            assert built._capabilities == [], "system_reminders is the shared Agent's, not each run's"
            tails.append(_tail(SCRIPT.requests[0]))
    assert tails == ["", "", f"<system-reminder>\n{LINE}\n</system-reminder>"], tails


async def test_guardrails_screen_each_runs_own_words_through_the_shared_agent(tmp_path: Path) -> None:
    """guardrails is built once: Alice's pasted key is redacted in her run, Bob's run right after reaches the
    model with his own words, and a blocked term ends only the run it is in."""
    from .test_guardrails import PASTED

    entry = {"id": "guardrails", "config": {"redact_secrets_in": True, "blocked_keywords_in": "nightjar"}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="shaping-scripted")}) as w:
        SCRIPT.reset(say("noted"))
        built = await _one_run(w, ALICE, DM_ALICE, f"my key is {PASTED}")
        assert built._capabilities == [], "guardrails is the shared Agent's, not each run's"
        assert SCRIPT.requests[0].user_texts() == ["my key is [redacted:anthropic_key]"]
        SCRIPT.reset(say("hi bob"))
        await _one_run(w, BOB, CHANNEL, "what is new?")
        assert SCRIPT.requests[0].user_texts() == ["what is new?"]
        SCRIPT.reset(say("sure"))
        with pytest.raises(Exception, match="blocked term"):
            await _one_run(w, BOB, DM_BOB, "tell me about nightjar")
        assert SCRIPT.requests == []
        SCRIPT.reset(say("hello alice"))
        await _one_run(w, ALICE, DM_ALICE_2, "and now?")
        assert SCRIPT.requests[0].user_texts() == ["and now?"]


HANDLE = re.compile(r"stored to handle '([^']+)'")


def _handle(prompt: str) -> str:
    """The handle of the first spill the run `prompt` was shown."""
    match = HANDLE.search("\n".join(interleaved.SHOWN[prompt]))
    assert match, interleaved.SHOWN[prompt]
    return match.group(1)


def _reading(prompt: str, of: str, pattern: str, *, after: asyncio.Event | None = None,
             signal: asyncio.Event | None = None) -> Any:
    """A model step: read back the handle the run `of` was last shown."""
    async def take() -> interleaved.Action:
        if signal is not None:
            signal.set()
        if after is not None:
            await after.wait()
        return ("read_tool_result", {"handle": _handle(of), "pattern": pattern})

    return take


async def test_two_runs_at_once_each_read_back_only_their_own_spilled_result(tmp_path: Path) -> None:
    """tool_output_limits is built once: two people's runs spill a large result at once; each reads its own
    back, and a handle of the other run's reads nothing; each run's spills are gone when it ends."""
    alice_spilled, bob_spilled, bob_read = asyncio.Event(), asyncio.Event(), asyncio.Event()
    big = "print('\\n'.join('{}-line-%d' % i for i in range(3000)))"
    interleaved.script({
        "alice": [step("run_python", code=big.format("alice")),
                  _reading("alice", "alice", "alice-line-600", signal=alice_spilled, after=bob_spilled),
                  step(None, after=bob_read)],
        "bob": [step("run_python", after=alice_spilled, code=big.format("bob")),
                _reading("bob", "alice", "alice", signal=bob_spilled),
                _reading("bob", "bob", "bob-line-600"), step(None, signal=bob_read)],
    })
    async with world(tmp_path, agents={"assistant": agent({"id": "code_execution"}, {"id": "tool_output_limits"},
                                                          model="interleaved")}) as w:
        runs = [(await w.turn(ALICE, DM_ALICE, "alice"), "alice"), (await w.turn(BOB, DM_BOB, "bob"), "bob")]
        agents = await at_once(w, *runs)
        assert [a._capabilities for a in agents] == [[], []], "tool_output_limits is the shared Agent's"
        left = [await w.gw.store.capability_state.get("tool_output_limits", turn.run_id, _handle(p))
                for turn, p in runs]
    alice, bob = ([t for t in interleaved.SHOWN[p] if not t.startswith("You are a test agent.")] for p in ("alice", "bob"))
    assert "alice-line-600" in alice[-1] and "bob-line" not in "\n".join(alice), alice[-1]
    assert "No stored tool result" in bob[-2] and "alice-line" not in bob[-2], bob[-2]
    assert "bob-line-600" in bob[-1], bob[-1]
    assert left == [None, None], "each run's spills are gone when it ends"


async def test_a_conversations_compacted_history_is_never_another_conversations(tmp_path: Path) -> None:
    """compaction is built once: Alice's long DM compacts and is continued from its snapshot, and Bob's
    channel run after it starts from his own conversation, with nothing of hers."""
    from .test_compaction import FILLER

    entry = {"id": "compaction", "config": {"strategy": "sliding_window", "context_window": 2000,
                                            "max_fraction": 0.5, "keep_messages": 4}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="shaping-scripted")}) as w:
        turn = await w.turn(ALICE, DM_ALICE_2, "hello")
        assert w.gw.runner.build_agent(turn)._capabilities == [], "compaction is the shared Agent's"  # type: ignore[attr-defined]
        await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply="done")
        sent = []
        for i in range(8):
            SCRIPT.reset(say(f"answer {i}"))
            await w.say(ALICE, DM_ALICE, f"message {i}: {FILLER * 3}")
            sent.append(len(SCRIPT.answered[0].messages))
        assert sent[-1] < 2 * len(sent) - 1, f"Alice's history was compacted: {sent}"
        SCRIPT.reset(say("hi bob"))
        await w.say(BOB, CHANNEL, "hello, what do you know?")
        [request] = SCRIPT.answered
        assert "message" not in str(request.messages) and "lorem" not in str(request.messages), request.messages
        assert len(request.messages) == 1, request.messages


async def test_two_peoples_speech_at_once_is_each_spent_on_their_own_run(tmp_path: Path) -> None:
    """audio is built once: two people's runs speak at once, and each one's characters are recorded on its
    own run, none on a third run beside them."""
    from tests.fakes.openai import FakeOpenAI

    server = await FakeOpenAI().start()
    providers = {"providers": {"fake": {"kind": "openai-chat", "base_url": server.base_url}}}
    try:
        spoken = await _spent_at_once(tmp_path, {"id": "audio", "config": {"provider": "fake"}}, "generate_speech",
                                      {"text": "alice's words"}, {"text": "bob says a longer line"},
                                      lambda run: run.spoken_characters, gateway=providers)
    finally:
        await server.stop()
    assert spoken == [len("alice's words"), len("bob says a longer line"), 0], spoken
    assert sorted(r["input"] for r in server.speech_requests) == ["alice's words", "bob says a longer line"]


async def test_two_peoples_handoffs_each_act_for_their_sender_from_their_own_conversation(tmp_path: Path) -> None:
    """handoffs is built once: Alice's hand-over from a channel and Bob's from his DM each start a run for
    their own sender, counted in their own conversation."""
    from .scripted import say_calls
    from .test_handoffs import handed_runs, member, send

    agents = {"assistant": member("Assistant"), "researcher": member("Researcher", "Finds things out")}
    async with world(tmp_path, agents=agents) as w:
        turn = await w.turn(ALICE, DM_ALICE_2, "hello")
        assert w.gw.runner.build_agent(turn)._capabilities == [], "handoffs is the shared Agent's"  # type: ignore[attr-defined]
        await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply="done")
        for who, where in ((ALICE, CHANNEL), (BOB, DM_BOB)):
            seen = await w.say(who, where, say_calls(send("researcher", f"for {who.name}", False)))
            assert seen.tool_results[0].startswith("Handed over to Researcher"), seen.tool_results

        async def both_answered() -> bool:
            runs = await handed_runs(w)
            return len(runs) == 2 and all(r.status == repo.FINISHED for r in runs)

        await wait_for(both_answered, what="the researcher's two runs")
        runs = await handed_runs(w)
        assert [(r.requester_name, r.requester_person_id) for r in runs] == [
            ("alice", await w.person(ALICE)), ("bob", await w.person(BOB))]
        for run, where in zip(runs, (CHANNEL, DM_BOB), strict=True):
            origin = json.loads(await w.gw.store.capability_state.get("handoffs", run.conversation_id, "origin") or "{}")
            source = await w.gw.store.conversation(origin["from_conversation"])
            assert source is not None and where.channel in source.key.split(":"), source


async def test_two_peoples_mcp_calls_at_once_go_through_the_shared_agent_and_each_gets_its_own(
        tmp_path: Path) -> None:
    """An MCP server's kept offer is the shared Agent's: two people's runs call its tool at once, each is
    answered for its own call only; the server's tools are in each run's gate map."""
    from .shaping_script import mcp_server

    alice_called = asyncio.Event()
    interleaved.script({
        "alice asks": [step("svc_leak", service="alice-billing"), step(None, signal=alice_called)],
        "bob asks": [step("svc_leak", after=alice_called, service="bob-payroll"), step(None)],
    })
    spec = {**agent(model="interleaved"), "mcp_servers": [mcp_server("svc", tools={"leak": "allow"})]}
    async with world(tmp_path, agents={"assistant": spec}) as w:
        runs = [(await w.turn(ALICE, DM_ALICE, "alice asks"), "alice asks"),
                (await w.turn(BOB, CHANNEL, "bob asks"), "bob asks")]
        agents = await at_once(w, *runs)
        assert [a._capabilities for a in agents] == [[], []], "the MCP tools are the shared Agent's"
        assert all(turn.tools["svc_leak"].from_mcp for turn, _ in runs)
    alice, bob = "\n".join(interleaved.SHOWN["alice asks"]), "\n".join(interleaved.SHOWN["bob asks"])
    assert "alice-billing config" in alice and "bob-payroll" not in alice, alice
    assert "bob-payroll config" in bob and "alice-billing" not in bob, bob
