"""A delegate's state is its own: a sync or a background delegate can neither read nor destroy what its parent
keeps (spills, the compaction snapshot, the reminder cadence, the plan), and what the parent lends on purpose
(`share_with_delegates: [context]`) is the parent's. See docs/security.md, "Delegates".

The model is scripted per agent: the parent's requests take the parent's steps, the researcher's its own, so a
background delegate working beside its parent's turn does not take the parent's next step.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from sqlalchemy import select

from gateway.messages import ChatKind
from gateway.runs import llm
from gateway.store import repo
from gateway.store.models import BackgroundRun, Run

from ..conftest import wait_for
from .scripted import database  # noqa: F401 - a fixture: SQLite, then PostgreSQL
from .support import Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
RESEARCHER = "You are the researcher."
HANDLE = re.compile(r"stored to handle '([^']+)'")
LONG = "the long answer " * 80  # ~1,300 characters: past the spill threshold below

Reply = str | tuple[str, dict[str, Any]]
Step = Callable[[list[ModelMessage]], Reply | Awaitable[Reply]]
STEPS: dict[str, list[Step]] = {"parent": [], "delegate": []}
SENT: dict[str, list[list[ModelMessage]]] = {"parent": [], "delegate": []}
INSTRUCTIONS: dict[str, list[str]] = {"parent": [], "delegate": []}


def _role(info: AgentInfo) -> str:
    return "delegate" if RESEARCHER in (info.instructions or "") else "parent"


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    role = _role(info)
    SENT[role].append(list(messages))
    INSTRUCTIONS[role].append(info.instructions or "")
    step = STEPS[role].pop(0) if STEPS[role] else (lambda m: "done")
    reply = step(messages)
    if inspect.isawaitable(reply):
        reply = await reply
    if isinstance(reply, tuple):
        yield {0: DeltaToolCall(name=reply[0], json_args=json.dumps(reply[1]))}
    else:
        yield reply


llm.register_model("by-agent", lambda: FunctionModel(stream_function=_stream, model_name="by-agent"))


def script(parent: list[Step], delegate: list[Step]) -> None:
    for role, steps in (("parent", parent), ("delegate", delegate)):
        STEPS[role][:] = steps
        SENT[role].clear()
        INSTRUCTIONS[role].clear()


def say(text: str) -> Step:
    return lambda messages: text


def call(tool: str, **args: Any) -> Step:
    return lambda messages: (tool, args)


def results(messages: list[ModelMessage]) -> list[str]:
    last = messages[-1]
    return [str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)]


def spec(*capabilities: dict[str, Any], delegation: dict[str, Any] | None = None) -> dict[str, Any]:
    entry = {"id": "subagents", "config": {"mode": "auto", **(delegation or {})}}
    return {**agent(entry, *capabilities, model="by-agent"), "subagents": ["researcher"]}


def researcher(*capabilities: dict[str, Any]) -> dict[str, Any]:
    return {**agent(*capabilities, model="by-agent"), "name": "Researcher", "description": "Finds things out",
            "instructions": RESEARCHER}


def task(prompt: str, mode: str) -> Step:
    return call("task", agent="researcher", prompt=prompt, mode="async" if mode == "background" else "sync")


async def background_ended(w: World) -> None:
    async def ended() -> bool:
        async with w.gw.store.sessions() as s:
            rows = list(await s.scalars(select(BackgroundRun)))
        return bool(rows) and all(r.status != "running" for r in rows)

    await wait_for(ended, what="the background delegate to end", timeout=20)


async def settled(w: World) -> None:
    """Every run ended: the turns, the background delegates, and each one's report with its continuing turn."""
    async def done() -> bool:
        async with w.gw.store.sessions() as s:
            runs = list(await s.scalars(select(Run)))
            background = list(await s.scalars(select(BackgroundRun)))
        reports = [r for r in runs if r.kind == "report"]
        return (bool(runs) and all(r.status in repo.ENDED for r in runs)
                and all(b.status != "running" for b in background) and len(reports) == len(background))

    await wait_for(done, what="every run to end", timeout=20)


async def leftovers(w: World) -> list[tuple[str, str]]:
    """State rows kept under anything but a conversation: a delegate's, which ends with it."""
    from gateway.store.models import CapabilityStateRow

    async with w.gw.store.sessions() as s:
        conversations = set(await s.scalars(select(Run.conversation_id)))
        rows = list(await s.scalars(select(CapabilityStateRow)))
    kept = {"planning", "system_reminders", "compaction", "tool_output_limits"}
    return [(r.capability, r.scope) for r in rows if r.capability in kept and r.scope not in conversations]


def after_background(then: Step) -> Step:
    """A parent step taken once the background delegate has ended (its turn still open)."""
    async def step(messages: list[ModelMessage]) -> Reply:
        await background_ended(WORLD[0])
        reply = then(messages)
        return await reply if inspect.isawaitable(reply) else reply

    return step


WORLD: list[World] = []
MODES = ["sync", "background"]


def parent_handle() -> str:
    """The handle of the parent's spill, from what the parent's model was sent."""
    return next(m.group(1) for sent in SENT["parent"] for r in results(sent) if (m := HANDLE.search(r)))


# --- tool_output_limits: spills -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_neither_reads_nor_deletes_its_parents_spills(tmp_path: Path, database: Any, mode: str) -> None:
    limits = {"id": "tool_output_limits", "config": {"threshold": 1000}}
    agents = {"assistant": spec(limits), "researcher": researcher(limits)}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        WORLD[:] = [w]
        read_parent = lambda messages: ("read_tool_result", {"handle": parent_handle()})  # noqa: E731
        second = after_background(read_parent) if mode == "background" else read_parent
        script(parent=[task("answer at length", "sync"), task("look at the parent's spill", mode), second,
                       lambda m: results(m)[0]],
               delegate=[say(LONG), read_parent, say("short")])
        await w.say(ALICE, DM, "go", timeout=30)
        await settled(w)
        [spilled] = results(SENT["parent"][1])
        assert "Tool output too large" in spilled, "the parent's own long result was spilled"
        [tried] = results(SENT["delegate"][2])
        assert tried.startswith("[No stored tool result"), f"the delegate read its parent's spill: {tried[:80]}"
        [read] = results(SENT["parent"][3])
        assert "the long answer" in read, f"the delegate's end deleted its parent's spill: {read[:120]}"
        assert await leftovers(w) == []


# --- compaction: the snapshot -------------------------------------------------------------------------------

FILLER = "lorem ipsum dolor " * 30  # ~540 characters


async def _snapshot(w: World) -> dict[str, Any] | None:
    from gateway.store.models import CapabilityStateRow

    async with w.gw.store.sessions() as s:
        conversations = set(await s.scalars(select(Run.conversation_id)))
        rows = list(await s.scalars(select(CapabilityStateRow).where(CapabilityStateRow.capability == "compaction")))
    mine = [r for r in rows if r.scope in conversations]  # the conversation's, not a delegate's own
    return json.loads(mine[0].value) if mine else None


@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_neither_starts_from_nor_replaces_its_parents_compacted_history(
        tmp_path: Path, database: Any, mode: str) -> None:
    compaction = {"id": "compaction", "config": {"strategy": "sliding_window", "context_window": 1000,
                                                 "max_fraction": 0.5, "keep_messages": 4}}
    agents = {"assistant": spec(compaction), "researcher": researcher(compaction)}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        for i in range(12):  # until the conversation's history has compacted and its snapshot is stored
            script(parent=[say(f"answer {i}")], delegate=[])
            await w.say(ALICE, DM, f"message {i}: {FILLER}")
            if await _snapshot(w) is not None:
                break
        assert await _snapshot(w) is not None
        script(parent=[task("count the moons of Mars", mode), say("asked the researcher"), say("reported")],
               delegate=[say("two moons")])
        await w.say(ALICE, DM, "the person's real question: MOONS-OF-MARS")
        await settled(w)
        first = SENT["delegate"][0]
        assert prompts(first) == ["count the moons of Mars"], \
            f"the delegate's first request carried its parent's history: {prompts(first)[:3]}"
        snapshot = await _snapshot(w)
        assert snapshot is not None
        said = [p.get("content") for m in snapshot["messages"] for p in m["parts"] if p.get("part_kind") == "user-prompt"]
        assert any("MOONS-OF-MARS" in str(c) for c in said), f"the parent's snapshot was replaced: {said}"
        assert "count the moons of Mars" not in said
        if mode == "background":  # the report's turn continued from the parent's history, not the delegate's
            report_turn = SENT["parent"][-1]
            assert any("MOONS-OF-MARS" in p for p in prompts(report_turn)), prompts(report_turn)
        assert await leftovers(w) == [], "a delegate's snapshot ends with it"


# --- system_reminders: the cadence --------------------------------------------------------------------------

LINE = "Cite your sources."


def reminded(messages: list[ModelMessage]) -> bool:
    return LINE in str(messages[-1])


@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_counts_its_own_reminder_cadence_not_its_parents(
        tmp_path: Path, database: Any, mode: str) -> None:
    reminders = {"id": "system_reminders", "config": {"reminders": [{"text": LINE, "interval": 3}]}}
    agents = {"assistant": spec(reminders), "researcher": researcher(reminders, {"id": "planning"})}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        # Parent requests 1 and 2; the delegate's own 1, 2, 3 (its third is reminded); the parent's third
        # (the report's turn, or the next message) is the parent's reminder.
        script(parent=[task("three steps", mode), say("asked"), say("third")],
               delegate=[call("read_plan"), call("read_plan"), say("done")])
        await w.say(ALICE, DM, "go")
        await settled(w)
        if mode == "sync":
            await w.say(ALICE, DM, "and then?")
        assert [reminded(m) for m in SENT["delegate"]] == [False, False, True], \
            "the delegate counted on from its parent's requests"
        assert [reminded(m) for m in SENT["parent"]] == [False, False, True], \
            "the delegate's requests moved its parent's cadence"
        assert await leftovers(w) == [], "a delegate's cadence ends with it"


# --- planning: the plan ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_neither_reads_nor_overwrites_its_parents_plan(tmp_path: Path, database: Any, mode: str) -> None:
    agents = {"assistant": spec({"id": "planning"}), "researcher": researcher({"id": "planning"})}
    async with world(tmp_path, agents=agents, gateway=database) as w:
        WORLD[:] = [w]
        read = call("read_plan")
        script(parent=[call("write_plan", items=[{"content": "PARENT STEP"}]), task("plan your own", mode),
                       after_background(read) if mode == "background" else read, say("ok")],
               delegate=[call("read_plan"), call("write_plan", items=[{"content": "DELEGATE STEP"}]), say("planned")])
        await w.say(ALICE, DM, "plan it", timeout=30)
        await settled(w)
        [seen] = results(SENT["delegate"][1])
        assert "PARENT STEP" not in seen and "No plan yet." in seen, f"the delegate read its parent's plan: {seen}"
        [plan] = results(SENT["parent"][3])
        assert "PARENT STEP" in plan and "DELEGATE STEP" not in plan, f"the delegate overwrote its parent's plan: {plan}"
        assert await leftovers(w) == [], "a delegate's plan ends with it"


async def test_a_lent_plan_is_the_parents_on_purpose(tmp_path: Path) -> None:
    agents = {"assistant": spec({"id": "planning"}, delegation={"share_with_delegates": ["planning"]}),
              "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        script(parent=[call("write_plan", items=[{"content": "PARENT STEP"}]), task("read the plan", "sync"),
                       lambda m: results(m)[0]],
               delegate=[call("read_plan"), lambda m: results(m)[0]])
        await w.say(ALICE, DM, "plan it")
        [seen] = results(SENT["delegate"][1])
        assert "PARENT STEP" in seen


# --- context: lent files are the parent's ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_lent_context_gives_the_delegate_its_parents_files(tmp_path: Path, mode: str) -> None:
    (tmp_path / "context" / "assistant").mkdir(parents=True)
    (tmp_path / "context" / "assistant" / "house.md").write_text("The house colour is VERMILION.\n")
    agents = {"assistant": spec({"id": "context"}, delegation={"share_with_delegates": ["context"]}),
              "researcher": researcher()}
    async with world(tmp_path, agents=agents) as w:
        script(parent=[task("what colour?", mode), say("asked"), say("reported")], delegate=[say("noted")])
        await w.say(ALICE, DM, "what colour is the house?")
        await settled(w)
        [seen] = INSTRUCTIONS["delegate"]
        assert "VERMILION" in seen, f"the delegate was not lent its parent's context files: {seen}"


