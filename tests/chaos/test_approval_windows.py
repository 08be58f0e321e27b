"""The windows kill -9 found in approvals, each hit on purpose (tests/chaos/test_approvals_kill9.py
finds them at random): an approved call killed after it started is not started again; a card
posted just before a kill is not posted twice; a card whose post failed is posted later.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from capabilities.approval_gate import ALREADY_STARTED
from tests.support.settled import settled

from .harness import ANSWER, CHANNEL, PERSON, World, _request, _until, kill_and_restart, world
from .parked import _answers, _async, _card, _cards, approve_value, database_after_drain, tool_runs


async def _web_page(api: str, conv: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        status, body = await _request(http, "GET", f"{api}/api/v1/conversations/{conv}/messages",
                                      deadline=time.monotonic() + 30)
    assert status == 200, (status, body)
    return body  # type: ignore[no-any-return]


async def _approved_then_killed_after_the_call(w: World, text: str, *,
                                               kill_when: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
    """Sends `text` on the web, approves the one card it parks on, SIGKILLs the daemon as soon as
    `deploy` ran (or, later, once `kill_when()`; the model's answers after it stream slowly, so the
    run has not ended), restarts it, and returns the conversation's turns once an answer is final."""
    async with aiohttp.ClientSession() as http:
        _, body = await _request(http, "POST", f"{w.api}/api/v1/conversations", json={}, deadline=time.monotonic() + 30)
        conv = body["id"]
        status, _ = await _request(http, "POST", f"{w.api}/api/v1/conversations/{conv}/messages",
                                   json={"text": text}, deadline=time.monotonic() + 30)
        assert status == 202

        async def pending() -> list[str]:
            return [i["approval_id"] for c in (await _web_page(w.api, conv))["cards"] for i in c["items"]
                    if i["state"] == "pending"]
        assert await _until(pending, 30)
        (approval,) = await pending()
        status, _ = await _request(http, "POST", f"{w.api}/api/v1/approvals/{approval}",
                                   json={"decision": "approve"}, deadline=time.monotonic() + 30)
        assert status == 200

    async def ran() -> bool:
        return tool_runs(w)["api"] >= 1 and (kill_when is None or kill_when())
    assert await _until(ran, 30)
    await kill_and_restart(w)

    async def answered() -> bool:
        turns = (await _web_page(w.api, conv))["messages"]
        return any(t["role"] == "assistant" and t["status"] == "final" for t in turns)
    assert await _until(answered, 60)
    return (await _web_page(w.api, conv))["messages"]  # type: ignore[no-any-return]


def _told(request: dict[str, Any]) -> list[Any]:
    """The tool results a model request carried."""
    return [m.get("content") for m in request["messages"] if m.get("role") == "tool"]


async def test_an_approved_call_killed_after_it_started_is_not_started_again(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite", gated=True, model_delay=1.0) as w:
        turns = await _approved_then_killed_after_the_call(w, "deploy api")
    assert tool_runs(w) == {"api": 1}  # the deploy a person allowed once happened once
    assert [t["text"].strip() for t in turns if t["role"] == "assistant"] == [ANSWER]
    # The model, resumed again, was told the call had already been started and not why it has no result.
    assert _told(w.model.requests[-1]) == [ALREADY_STARTED]


@pytest.mark.parametrize("levels", [1, 2], ids=["delegate", "nested-delegate"])
async def test_a_delegates_approved_call_killed_after_it_started_is_not_started_again(tmp_path: Path,
                                                                                        levels: int) -> None:
    """The same window inside a sync delegate (one or two levels down): the parent's run resumes its
    `task` call, which resumes the delegate from its stored messages with the same decision again."""
    text = " ".join(["delegate middle"] * (levels == 2) + ["delegate ops deploy api"])
    async with world(tmp_path / "config", "sqlite", gated=True, delegated=levels, model_delay=1.0) as w:
        turns = await _approved_then_killed_after_the_call(w, text)
    assert tool_runs(w) == {"api": 1}  # the deploy a person allowed once happened once
    assert [t["text"].strip() for t in turns if t["role"] == "assistant"] == [ANSWER]
    # The delegate holding the tool (the one offered `deploy`), resumed again, was told the call had
    # already been started; each agent above it was told its delegate's answer.
    asked = [r for r in w.model.requests if any(t["function"]["name"] == "deploy" for t in r.get("tools") or [])]
    assert _told(asked[-1]) == [ALREADY_STARTED]
    assert _told(w.model.requests[-1]) == [ANSWER]


async def test_a_delegate_that_answered_before_the_kill_is_not_asked_again(tmp_path: Path) -> None:
    """Killed later: the delegate ended (its answer stored) while its parent's model was answering. The
    parent's run resumes its `task` call again, which gives the stored answer back; it is not told that
    nothing ran (the deploy did), and the delegate is not run again."""
    async with world(tmp_path / "config", "sqlite", gated=True, delegated=1, model_delay=1.0) as w:
        def answering() -> bool:  # the parent's model was asked with the delegate's answer
            return any(_told(r) and any(t["function"]["name"] == "task" for t in r.get("tools") or [])
                       for r in w.model.requests)
        turns = await _approved_then_killed_after_the_call(w, "delegate ops deploy api", kill_when=answering)
        delegate_asked = [r for r in w.model.requests
                          if any(t["function"]["name"] == "deploy" for t in r.get("tools") or [])]
    assert tool_runs(w) == {"api": 1}
    assert [t["text"].strip() for t in turns if t["role"] == "assistant"] == [ANSWER]
    assert _told(w.model.requests[-1]) == [ANSWER], "the parent was told its delegate's answer again"
    assert len(delegate_asked) == 2, "the delegate's model: asked once to call deploy, once with its result"


@pytest.mark.chaos_smoke
async def test_a_card_posted_just_before_sigkill_is_not_posted_again(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite", gated=True) as w:
        w.slack.post_answer_delay = 30.0  # the card lands in the thread; its answer never reaches the process
        msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> deploy web")
        for event in events:
            await w.slack.send_event(event)
        await w.slack.wait_for(lambda: _card(w, msg.ts), timeout=30)
        w.slack.post_answer_delay = 0.0
        await kill_and_restart(w)
        await settled(*w.parts())  # the start-up sweep is done: it would have posted a second card by now
        assert _cards(w, msg.ts) == 1
        card = _card(w, msg.ts)
        approve = approve_value(card)
        await w.slack.click(PERSON, card, approve)
        await w.slack.wait_for(lambda: _answers(w, msg.ts), timeout=30)
        await settled(*w.parts())
        assert (_cards(w, msg.ts), _answers(w, msg.ts), tool_runs(w)) == (1, [ANSWER], {"web": 1})
        # The card found again is the one updated with the decision: no buttons left on it.
        assert "approve:" not in json.dumps(_card(w, msg.ts).blocks)


async def test_a_card_whose_post_failed_is_posted_by_the_sweep(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite", gated=True) as w:
        w.slack.fail_next("chat.postMessage", status=200, error="internal_error", retry_after=None)
        msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> deploy db")
        for event in events:
            await w.slack.send_event(event)
        # Without the sweep the run would stay parked with nothing anyone could click.
        await w.slack.wait_for(lambda: _card(w, msg.ts), timeout=40)
        assert _cards(w, msg.ts) == 1
        card = _card(w, msg.ts)
        approve = approve_value(card)
        await w.slack.click(PERSON, card, approve)
        await w.slack.wait_for(lambda: _answers(w, msg.ts), timeout=30)
        assert (_answers(w, msg.ts), tool_runs(w)) == ([ANSWER], {"db": 1})
    assert "could not post approval card" in w.daemon.log()


async def _asked_for_deploy(w: World) -> tuple[Any, Any, str]:
    """A Slack thread asking for the gated deploy: its message, its card, the card's Approve value."""
    msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> deploy api")
    for event in events:
        await w.slack.send_event(event)
    assert await _until(lambda: _async(_card(w, msg.ts)), 30)
    card = _card(w, msg.ts)
    approve = approve_value(card)
    assert approve is not None
    return msg, card, approve


async def test_an_answer_posted_below_a_card_just_before_sigkill_is_continued_not_posted_again(tmp_path: Path) -> None:
    """The approved run posts its answer below the card, the process dies before it records that
    post: the run, resumed again after the restart, finishes that post instead of a second answer."""
    async with world(tmp_path / "config", "sqlite", gated=True, model_delay=0.2) as w:
        msg, card, approve = await _asked_for_deploy(w)
        w.slack.post_answer_delay = 30.0  # the answer's post lands; its answer never reaches the process
        await w.slack.click(PERSON, card, approve)
        assert await _until(lambda: _async(bool(_answers(w, msg.ts))), 30)
        w.slack.post_answer_delay = 0.0
        await kill_and_restart(w)

        await _run_finished(w)  # the resumed run, run again, ended: nothing more will post
        assert [a.strip() for a in _answers(w, msg.ts)] == [ANSWER]
    assert tool_runs(w) == {"api": 1}


async def test_an_answer_recorded_below_a_card_before_sigkill_is_continued_not_posted_again(tmp_path: Path) -> None:
    """The approved run's answer below the card is posted and recorded, the process dies while it
    streams: the run, resumed again, edits that post to the end instead of posting a second answer
    below it. (Found by bench/chaos.py on SQLite: 1 approval in about 40 answered twice.)"""
    async with world(tmp_path / "config", "sqlite", gated=True, model_delay=1.0) as w:
        msg, card, approve = await _asked_for_deploy(w)
        await w.slack.click(PERSON, card, approve)

        async def draft_recorded() -> bool:  # the answer's first draft is in the thread and in its delivery row
            posts = [m.ts for m in w.slack.bot_messages(CHANNEL) if m.thread_ts == msg.ts and m.text.strip()
                     and m.text.strip() != ANSWER and not (m.blocks and "deploy" in json.dumps(m.blocks))]
            return bool(posts) and posts[0] in _recorded(w)
        assert await _until(draft_recorded, 30)
        await kill_and_restart(w)
        await _run_finished(w)
        assert [a.strip() for a in _answers(w, msg.ts)] == [ANSWER]
    assert tool_runs(w) == {"api": 1}


def _recorded(w: World) -> set[str]:
    """The platform message ids the delivery rows name."""
    with sqlite3.connect(w.url.split("///", 1)[1]) as db:
        return {r[0] for r in db.execute("SELECT platform_message_id FROM deliveries") if r[0]}


async def _run_finished(w: World) -> None:
    """Until the one run ended in the database: nothing more will post after that."""
    async def done() -> bool:
        return (await database_after_drain(w))["runs"] == {"finished": 1}
    assert await _until(done, 60)
