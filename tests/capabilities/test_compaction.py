"""compaction: a long conversation compacts, says so, and the next turn continues from it after a restart."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, ToolCallPart

from bindings.loader import ConfigError, load_config
from gateway import extensions
from gateway.messages import ChatKind, Sender
from gateway.store import repo
from gateway.outbound.adapter import Decision

from ..conftest import wait_for, write_config
from .shaping_script import SCRIPT, call, chat_text, mcp_server, say
from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
FILLER = "lorem ipsum dolor " * 16  # ~290 characters


def _agent(instructions: str = "You are a test agent.", tools: bool = False, **config: Any) -> dict[str, dict[str, Any]]:
    entries = [{"id": "compaction", "config": config}] + ([{"id": "memory_files"}] if tools else [])
    spec = agent(*entries, model="shaping-scripted")
    spec["instructions"] = instructions
    return {"assistant": spec}


async def _runs(w: Any) -> list[Any]:
    from sqlalchemy import select

    from gateway.store.models import Run

    async with w.gw.store.sessions() as s:
        return list(await s.scalars(select(Run).order_by(Run.created_at)))


async def test_a_long_conversation_compacts_and_the_next_turn_continues_after_a_restart(tmp_path: Path) -> None:
    agents = _agent(context_window=2000, max_fraction=0.5, keep_messages=4)  # compacts at ~1,000 tokens
    sent: list[int] = []
    async with world(tmp_path, agents=agents) as w:
        for i in range(24):
            SCRIPT.reset(say(f"answer {i}"))
            await w.say(ALICE, DM, f"message {i}: {FILLER}")
            sent.append(len(SCRIPT.answered[0].messages))
            if SCRIPT.summaries:
                assert "_summarising the earlier conversation…_" in chat_text(w)
        runs = await _runs(w)
        assert all(r.status == repo.FINISHED for r in runs)
        summarised = [r for r in runs if r.requests == 2]
        assert summarised, "a summary was made, and its request counts in the run's usage"
        # The first turns grow; a summary (keeping the first message and the last 4) cuts the history back.
        first = next(i for i, n in enumerate(sent) if i and n < sent[i - 1])
        assert sent[:first] == list(range(1, 2 * first, 2)) and max(sent) <= 2 * first - 1
        assert max(sent[first:]) <= sent[first - 1], f"the history stays bounded: {sent}"
    # After a restart the next turn starts from what the model last saw, not the transcript.
    async with world(tmp_path, agents=agents) as w:
        w._ids = itertools.count(1000)
        SCRIPT.reset(say("still here"))
        await w.say(ALICE, DM, "what did we talk about?")
        [request] = SCRIPT.answered
        texts = request.user_texts()
        assert texts[0].startswith("message 0:"), "the first message is kept whole (the conversation's goal)"
        summaries = [p.content for m in request.messages if isinstance(m, ModelRequest) for p in m.parts
                     if isinstance(p, SystemPromptPart)]
        assert len(summaries) == 1 and summaries[0].startswith("Summary of previous conversation:\n\nSUMMARY ")
        assert "message 1:" not in str(request.messages), "the older turns live only in the summary"
        assert "answer 23" in str(request.messages) and "message 23:" in str(request.messages)
        assert len(request.messages) < 12


async def test_an_overhead_past_the_trigger_gives_up_and_says_so_once(tmp_path: Path) -> None:
    agents = _agent(instructions="Follow the house style. " * 400, tools=True, context_window=2000, max_fraction=0.5)
    async with world(tmp_path, agents=agents) as w:
        SCRIPT.reset(call("list_memory"), call("list_memory"), say("nothing"))
        await w.say(ALICE, DM, "what do you remember?")
        text = chat_text(w)
        assert text.count("Context management is off for this reply") == 1, text
        assert "past the 1,000-token trigger (0.5 of a 2,000-token window)" in text
        assert SCRIPT.summaries == 0, "no summary can get under the overhead, so none is paid for"
        [run] = await _runs(w)
        assert run.status == repo.FINISHED


async def test_a_sliding_window_drops_the_oldest_without_a_model_call(tmp_path: Path) -> None:
    agents = _agent(strategy="sliding_window", context_window=2000, max_fraction=0.5, keep_messages=4)
    async with world(tmp_path, agents=agents) as w:
        for i in range(20):
            SCRIPT.reset(say(f"answer {i}"))
            await w.say(ALICE, DM, f"message {i}: {FILLER}")
        assert SCRIPT.summaries == 0
        [request] = SCRIPT.answered
        assert "message 1:" not in str(request.messages) and "message 19:" in str(request.messages)


async def test_a_run_parked_for_approval_resumes_from_the_compacted_history_and_keeps_it(tmp_path: Path) -> None:
    spec = _agent(strategy="sliding_window", context_window=2000, max_fraction=0.5, keep_messages=4)
    spec["assistant"]["mcp_servers"] = [mcp_server("svc")]  # its tools ask for approval
    async with world(tmp_path, agents=spec) as w:
        for i in range(18):
            SCRIPT.reset(say(f"answer {i}"))
            await w.say(ALICE, DM, f"message {i}: {FILLER}")
        assert "message 1:" not in str(SCRIPT.answered[0].messages), "compacted by now"
        SCRIPT.reset(call("svc_deploy", service="api"))
        await w.say(ALICE, DM, "deploy the api")
        await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        [card] = w.adapter("slack").cards
        SCRIPT.reset(say("nothing yet"))
        outcome = await w.gw.approvals.decide(card.items[0].approval_id, Decision.APPROVE, Sender("U1", "alice"),
                                              binding_id="slack", surface="slack")
        assert outcome.accepted

        async def finished() -> bool:
            run = await w.gw.store.run(card.run_id)
            return run is not None and run.status == repo.FINISHED

        await wait_for(finished, what="the resumed run")
        [resumed] = SCRIPT.answered
        assert "message 1:" not in str(resumed.messages), "the parked state held the compacted history"
        SCRIPT.reset(say("ok"))
        await w.say(ALICE, DM, "thanks")
        [after] = SCRIPT.answered
        calls = [p for m in after.messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
        assert [c.tool_name for c in calls] == ["svc_deploy"], "the next turn continues from the resumed run"
        assert "deployed api" in str(after.messages)


def test_bad_config_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: compaction\n    config:\n"
                    "      strategy: forget\n      max_fraction: 0.99\n      summary_prompt: 'sum up'\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = sorted(str(p) for p in e.value.problems if not p.warning)
    assert problems == sorted([
        f"{path}:6:7: capabilities.0.config.strategy: Input should be 'summarize', 'tiered', 'clear_tool_results' "
        "or 'sliding_window'",
        f"{path}:7:7: capabilities.0.config.max_fraction: Input should be less than or equal to 0.95",
        f"{path}:8:7: capabilities.0.config.summary_prompt: summary_prompt must contain {{messages}}, where the "
        "conversation to summarise goes",
    ])
