"""Fuzzed input on every adapter's inbound shapes, against the real daemon in its own process.

Hypothesis generates Telegram updates (messages, edits, callback queries of any shape), Mattermost
websocket frames (`posted` / `post_edited` / `reaction_added` events whose fields are anything,
frames that are not JSON), and button callbacks on all three platforms: Slack `block_actions`
payloads in `interactive` envelopes, Telegram `callback_query` updates, Mattermost action POSTs.
Nothing may take the daemon down, nothing may log a traceback, a callback never answers 500,
and afterwards the next good message on each platform is still answered once. Examples are few
here so CI stays quick; bench/chaos.py runs more (the functions take a count).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes.mattermost import wait_until
from tests.support.settled import settled

from .harness import ANSWER, CHANNEL, PERSON, thread_answers
from .platforms import MATTERMOST_BINDING, World, final, mattermost_answers, telegram_answers, world
from .test_fuzz import JSON, TEXT

EXAMPLES = 40
Runner = Callable[[Callable[[], Awaitable[Any]]], Any]


def _settings(examples: int) -> Any:
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _runner(loop: asyncio.AbstractEventLoop) -> Runner:
    """Runs a coroutine in the fakes' loop from hypothesis's thread."""
    def run(make: Callable[[], Awaitable[Any]]) -> Any:
        return asyncio.run_coroutine_threadsafe(make(), loop).result(15)  # type: ignore[arg-type]
    return run


def _or_junk(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right shape, sometimes anything."""
    return strategy | JSON


# --- Telegram -----------------------------------------------------------------------------

def telegram_updates(w: World) -> st.SearchStrategy[dict[str, Any]]:
    bot_message = w.telegram.bot_user
    user = st.fixed_dictionaries(
        {"id": _or_junk(st.integers(-2**63, 2**63)), "is_bot": _or_junk(st.booleans()), "first_name": _or_junk(TEXT)},
        optional={"username": _or_junk(TEXT), "language_code": TEXT})
    chat = st.fixed_dictionaries(
        {"id": _or_junk(st.integers(-2**63, 2**63)),
         "type": _or_junk(st.sampled_from(["private", "group", "supergroup", "channel"]))},
        optional={"is_forum": JSON, "title": TEXT, "first_name": TEXT})
    entity = st.fixed_dictionaries(
        {"type": _or_junk(st.sampled_from(["mention", "bot_command", "text_mention", "bold"])),
         "offset": _or_junk(st.integers(-5, 50)), "length": _or_junk(st.integers(-5, 50))},
        optional={"user": _or_junk(user), "url": TEXT})
    message = st.fixed_dictionaries(
        {"message_id": _or_junk(st.integers(-5, 10**6)), "date": _or_junk(st.integers(0, 2**32)), "chat": _or_junk(chat)},
        optional={"from": _or_junk(user | st.just(bot_message)), "text": _or_junk(TEXT),
                  "entities": _or_junk(st.lists(_or_junk(entity), max_size=3)),
                  "message_thread_id": _or_junk(st.integers(-5, 100)), "is_topic_message": JSON,
                  "reply_to_message": JSON, "caption": _or_junk(TEXT), "document": JSON, "photo": JSON,
                  "edit_date": JSON})
    callback = st.fixed_dictionaries(
        {"id": _or_junk(TEXT), "from": _or_junk(user), "chat_instance": _or_junk(TEXT)},
        optional={"message": _or_junk(message), "data": _or_junk(TEXT | st.sampled_from(["a:1:approve", "s:x", ""]))})
    return (st.builds(lambda m: {"message": m}, message) | st.builds(lambda m: {"edited_message": m}, message)
            | st.builds(lambda c: {"callback_query": c}, callback) | st.dictionaries(TEXT, JSON, max_size=3))


def fuzz_telegram(w: World, run: Runner, examples: int) -> int:
    tried = 0

    @_settings(examples)
    @given(telegram_updates(w))
    def one(update: dict[str, Any]) -> None:
        nonlocal tried
        tried += 1

        async def push() -> None:
            w.telegram.push_raw(update)
        run(push)

    one()
    return tried


# --- Mattermost ---------------------------------------------------------------------------

def mattermost_frames(w: World, person: dict[str, Any], dm: str) -> st.SearchStrategy[tuple[str, Any]]:
    """(event, data) of a numbered event, or ("", raw text) of a frame sent as is."""
    post = st.fixed_dictionaries(
        {"id": _or_junk(TEXT | st.just("p" * 26)), "user_id": _or_junk(st.sampled_from([person["id"], w.mm_bot["id"], ""])),
         "channel_id": _or_junk(st.sampled_from([dm, "c" * 26])), "message": _or_junk(TEXT)},
        optional={"root_id": _or_junk(TEXT), "props": JSON, "type": _or_junk(TEXT), "file_ids": JSON, "metadata": JSON,
                  "create_at": JSON})
    posted = st.fixed_dictionaries(
        {"post": post.map(json.dumps) | TEXT | JSON},
        optional={"channel_type": _or_junk(st.sampled_from(["D", "G", "O", "P"])),
                  "mentions": st.lists(TEXT, max_size=2).map(json.dumps) | JSON,
                  "team_id": _or_junk(TEXT), "sender_name": _or_junk(TEXT), "channel_display_name": TEXT})
    reaction = st.fixed_dictionaries(
        {"reaction": st.fixed_dictionaries({"user_id": _or_junk(TEXT), "post_id": _or_junk(TEXT),
                                            "emoji_name": _or_junk(st.sampled_from(["+1", "-1", "smile"]))}).map(json.dumps)
         | JSON})
    events = (st.tuples(st.sampled_from(["posted", "post_edited"]), posted | JSON)
              | st.tuples(st.just("reaction_added"), reaction | JSON)
              | st.tuples(st.sampled_from(["typing", "status_change", "channel_viewed"]) | TEXT.filter(lambda t: t != "hello"),
                          JSON))
    raw = st.tuples(st.just(""), TEXT | JSON.filter(lambda v: not isinstance(v, dict)).map(json.dumps))
    return events | raw


def fuzz_mattermost(w: World, run: Runner, examples: int, person: dict[str, Any], dm: str) -> int:
    tried = 0

    @_settings(examples)
    @given(mattermost_frames(w, person, dm))
    def one(frame: tuple[str, Any]) -> None:
        nonlocal tried
        tried += 1
        event, data = frame
        if event:
            run(lambda: w.mattermost.push_event(w.mm_bot["id"], event, data))
        else:
            run(lambda: w.mattermost.push_raw(w.mm_bot["id"], str(data).encode("utf-8", "surrogatepass")
                                              .decode("utf-8", "replace")))

    one()
    return tried


def fuzz_mattermost_actions(w: World, examples: int, dm: str) -> int:
    tried = 0
    context = (st.fixed_dictionaries({"approval_id": _or_junk(TEXT), "decision": _or_junk(st.sampled_from(["approve", "deny"])),
                                      "sig": _or_junk(TEXT | st.just("0" * 64))})
               | st.fixed_dictionaries({"stop_run": _or_junk(TEXT), "sig": _or_junk(TEXT)}) | JSON)
    body = st.fixed_dictionaries(
        {"user_id": _or_junk(TEXT), "channel_id": _or_junk(st.just(dm) | TEXT), "context": context},
        optional={"user_name": _or_junk(TEXT), "post_id": _or_junk(TEXT), "trigger_id": TEXT, "type": TEXT,
                  "team_id": JSON})
    raw = body.map(lambda b: json.dumps(b).encode()) | JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40)

    @_settings(examples)
    @given(raw)
    def one(payload: bytes) -> None:
        nonlocal tried
        tried += 1
        request = urllib.request.Request(f"{w.api}/mattermost/actions/{MATTERMOST_BINDING}", data=payload, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        assert status < 500, (payload, status)

    one()
    return tried


# --- Slack buttons ------------------------------------------------------------------------

def fuzz_slack_buttons(w: World, run: Runner, examples: int) -> int:
    tried = 0
    action = st.fixed_dictionaries(
        {"action_id": _or_junk(st.sampled_from(["gw_approve", "gw_deny", "gw_stop", "other"]) | TEXT),
         "value": _or_junk(TEXT | st.sampled_from(["a:x:approve", "stop:x", "{}"])), "type": _or_junk(st.just("button"))},
        optional={"block_id": _or_junk(TEXT), "action_ts": JSON})
    payload = st.fixed_dictionaries(
        {"type": _or_junk(st.sampled_from(["block_actions", "view_submission", "shortcut"]))},
        optional={"user": _or_junk(st.fixed_dictionaries({"id": _or_junk(st.sampled_from([PERSON, "U0NOBODY"]))})),
                  "actions": _or_junk(st.lists(_or_junk(action), max_size=2)),
                  "channel": _or_junk(st.fixed_dictionaries({"id": _or_junk(st.just(CHANNEL))})),
                  "container": JSON, "message": JSON, "team": JSON, "response_url": _or_junk(TEXT),
                  "trigger_id": JSON})

    @_settings(examples)
    @given(payload)
    def one(p: dict[str, Any]) -> None:
        nonlocal tried
        tried += 1
        run(lambda: w.slack.send_envelope({"envelope_id": str(uuid.uuid4()), "type": "interactive", "payload": p,
                                           "accepts_response_payload": False}))

    one()
    return tried


# --- the next good message ----------------------------------------------------------------

async def still_answered(w: World) -> None:
    """One good message per platform, from people the fuzz never spoke as, each answered once."""
    person = w.mattermost.add_user("steady")
    dm = w.mattermost.direct_channel(person["id"], w.mm_bot["id"])["id"]
    msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> still there?")
    for e in events:
        await w.slack.send_event(e)
    user = w.telegram.user(2**40 + 7, "Tess", "tess")  # beyond the ids fuzzed as people
    chat = w.telegram.private_chat(user).id
    w.telegram.push_message(chat, user, "still there?")
    await w.mattermost.user_post(person["id"], dm, "still there?")
    await w.slack.wait_for(lambda: ANSWER in [t.strip() for t in thread_answers(w.slack, msg.ts)], timeout=90)  # type: ignore[arg-type]
    await w.telegram.wait_for(lambda: final(telegram_answers(w, chat)) >= 1, timeout=90, what="telegram answer")
    await wait_until(lambda: final(mattermost_answers(w, dm)) >= 1, timeout=90)
    await settled(*w.parts())  # nothing left that could post a double
    assert [t.strip() for t in thread_answers(w.slack, msg.ts)] == [ANSWER]  # type: ignore[arg-type]
    assert [t.strip() for t in telegram_answers(w, chat)] == [ANSWER]
    assert [t.strip() for t in mattermost_answers(w, dm)] == [ANSWER]


async def test_fuzzed_updates_frames_and_button_callbacks_never_take_the_daemon_down(tmp_path: Path) -> None:
    async with world(tmp_path / "config") as w:
        person = w.mattermost.add_user("fuzzy")
        dm = w.mattermost.direct_channel(person["id"], w.mm_bot["id"])["id"]
        run = _runner(asyncio.get_running_loop())
        tried = await asyncio.to_thread(fuzz_telegram, w, run, EXAMPLES)
        tried += await asyncio.to_thread(fuzz_mattermost, w, run, EXAMPLES, person, dm)
        tried += await asyncio.to_thread(fuzz_mattermost_actions, w, EXAMPLES, dm)
        tried += await asyncio.to_thread(fuzz_slack_buttons, w, run, EXAMPLES)
        assert tried >= 4 * EXAMPLES
        assert w.daemon.proc is not None and w.daemon.proc.returncode is None, w.daemon.log()[-4000:]
        await still_answered(w)
    log = w.daemon.log()
    assert "Traceback" not in log, log[-8000:]


async def test_known_malformed_items_are_each_logged_once_and_dropped(tmp_path: Path) -> None:
    """What the fuzz found, kept: each item one warning line, no traceback, no 500, the daemon answering."""
    async with world(tmp_path / "config") as w:
        # Bolt reads the user id out of a payload before any listener: `user: true` failed there.
        event = {"type": "message", "channel": CHANNEL, "user": True, "text": "hi", "ts": "1.0"}
        await w.slack.send_event(event)
        await w.slack.send_interactive({"type": "block_actions", "user": True, "actions": []})
        # Bolt's matchers and its own error handler read `actions[0].action_id` as a string.
        await w.slack.send_interactive({"type": "block_actions", "user": {"id": PERSON}, "actions": {"0": {}}})
        await w.slack.send_interactive({"type": "block_actions", "user": {"id": PERSON},
                                        "actions": [{"action_id": {"gw": 1}, "value": "x"}]})
        # ... and expect it there (a KeyError and a 500 from Bolt; found on PostgreSQL's full run).
        await w.slack.send_interactive({"type": "block_actions", "user": {"id": PERSON},
                                        "actions": [{"type": "button", "value": "x"}]})
        await w.slack.send_interactive({"type": "block_actions", "user": {"id": PERSON}, "actions": []})
        # A forged click whose signature is not ASCII: hmac.compare_digest raised TypeError (a 500).
        for sig in ("é" * 64, "\ud800"):
            body = json.dumps({"user_id": "u", "channel_id": "c", "context": {"approval_id": "a", "decision": "approve",
                                                                              "sig": sig}}).encode()
            request = urllib.request.Request(f"{w.api}/mattermost/actions/{MATTERMOST_BINDING}", data=body, method="POST")
            try:
                urllib.request.urlopen(request, timeout=10)
                status = 200
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == 401
        w.telegram.push_raw({"message": {"message_id": 1, "chat": "not a chat"}})
        await w.mattermost.push_raw(w.mm_bot["id"], "not json {")
        await w.mattermost.push_event(w.mm_bot["id"], "posted", {"channel_type": "D", "post": "{broken"})
        await still_answered(w)
        log = w.daemon.log()
    assert "Traceback" not in log, log[-8000:]
    expected = {"dropped a malformed Socket Mode events_api payload": 1,
                "dropped a malformed Socket Mode interactive payload": 5,
                "action callback with a bad signature refused": 2,
                "dropping malformed update": 1,
                "websocket: undecodable frame dropped": 1,
                "dropped a malformed posted event": 1}
    assert {line: log.count(line) for line in expected} == expected
