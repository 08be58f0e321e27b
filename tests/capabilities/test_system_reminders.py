"""system_reminders: the cadence counts the conversation's model requests, across turns and a restart."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, UserPromptPart

from bindings.loader import ConfigError, load_config
from capabilities.registry import BuildContext, load_all
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store import repo

from ..conftest import write_config
from .shaping_script import SCRIPT, Request, call, say
from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
LINE = "Answer in English, and cite the note you used."


def _agent(**config: Any) -> dict[str, Any]:
    return {"assistant": agent({"id": "system_reminders", "config": config}, {"id": "memory_files"}, model="shaping-scripted")}


def _tail(request: Request) -> str:
    """The reminder text appended to this request's last message, if any."""
    last = request.messages[-1]
    assert isinstance(last, ModelRequest)
    texts = [p.content for p in last.parts if isinstance(p, UserPromptPart) and not isinstance(p.content, str)]
    return " ".join(str(c) for content in texts for c in content if isinstance(c, str))


async def test_a_reminder_fires_on_its_cadence_across_two_turns_and_a_restart(tmp_path: Path) -> None:
    agents = _agent(reminders=[{"text": LINE, "interval": 3}], goal_reanchor={"interval": 4, "max_fires": 1})
    async with world(tmp_path, agents=agents) as w:
        SCRIPT.reset(call("list_memory"), say("nothing saved yet"))  # requests 1 and 2
        await w.say(ALICE, DM, "what do you know about me?")
        assert [_tail(r) for r in SCRIPT.requests] == ["", ""]
        SCRIPT.reset(say("hello"))  # request 3
        await w.say(ALICE, DM, "hello")
        [third] = SCRIPT.requests
        assert _tail(third) == f"<system-reminder>\n{LINE}\n</system-reminder>"
    # A restart: the counter comes back from the store.
    async with world(tmp_path, agents=agents) as w:
        w._ids = itertools.count(100)  # new platform event ids after the restart
        SCRIPT.reset(call("list_memory"), say("still nothing"))  # requests 4 and 5
        await w.say(ALICE, DM, "anything new?")
        fourth, fifth = SCRIPT.requests
        assert _tail(fourth) == ('The request you are answering is: "anything new?". Check that your next action '
                                 "advances it. If it is already satisfied, give the final answer.")
        assert _tail(fifth) == ""
        SCRIPT.reset(say("bye"))  # request 6: the line again; the goal's one fire is spent (max_fires)
        await w.say(ALICE, DM, "bye")
        assert _tail(SCRIPT.requests[0]) == f"<system-reminder>\n{LINE}\n</system-reminder>"
        # Never in the transcript or a run's stored state.
        SCRIPT.reset(call("list_memory"), say("ok"))
        await w.say(ALICE, DM, "last one")  # requests 7, 8
        history = SCRIPT.requests[0].messages[:-1]
        assert LINE not in str(history) and "advances it" not in str(history)
        assert [_tail(r) for r in SCRIPT.requests] == ["", ""]
        assert "reminder:0" in (await w.gw.store.capability_state.get("system_reminders", await _conversation(w),
                                                                        "cadence") or "")


async def _conversation(w: Any) -> str:
    from sqlalchemy import select

    from gateway.store.models import Run

    async with w.gw.store.sessions() as s:
        return (await s.scalars(select(Run.conversation_id).limit(1))).one()


async def test_an_llm_reminder_uses_the_runs_model_and_counts_in_its_usage(tmp_path: Path) -> None:
    async with world(tmp_path, agents=_agent(llm_reminder={"interval": 2})) as w:
        SCRIPT.reset(call("list_memory"), say("Stay on the user's question about tea."), say("green tea"))
        await w.say(ALICE, DM, "which tea do I like?")
        first, writer, second = SCRIPT.requests
        assert _tail(first) == "" and "Original goal: which tea do I like?" in writer.user_texts()[0]
        assert _tail(second) == "Stay on the user's question about tea."
        from sqlalchemy import select

        from gateway.store.models import Run

        async with w.gw.store.sessions() as s:
            run = (await s.scalars(select(Run))).one()
        assert run.status == repo.FINISHED and run.requests == 3, "the reminder's model call is the run's usage"


async def test_an_empty_config_attaches_nothing_and_bad_config_is_refused(tmp_path: Path) -> None:
    async with world(tmp_path, agents=_agent()) as w:
        turn = await w.turn(ALICE, DM, "hi")
    decl = load_all()["system_reminders"]
    assert decl.build(BuildContext(turn, turn.agent.capabilities[0], decl.config_model(), None)) is None

    extensions.register_checks()
    cfg = write_config(tmp_path / "bad")
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: system_reminders\n    config:\n"
                    "      reminders:\n        - {text: '', interval: 0}\n      goal_reanchor: {every: 3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = sorted(str(p) for p in e.value.problems if not p.warning)
    assert problems == sorted([
        f"{path}:7:12: capabilities.0.config.reminders.0.text: String should have at least 1 character",
        f"{path}:7:22: capabilities.0.config.reminders.0.interval: Input should be greater than or equal to 1",
        f"{path}:8:23: capabilities.0.config.goal_reanchor.every: Extra inputs are not permitted",
    ])
