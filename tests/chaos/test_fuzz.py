"""Fuzzed input against the real daemon in its own process: nothing takes it down, nothing answers 500.

Hypothesis generates web API requests (JSON of any shape, text with NULs and lone surrogates,
odd ids, bodies that are not JSON) and Slack Socket Mode frames (envelopes of every type with
events of any shape, frames that are not JSON). Examples are few here, so CI stays quick;
bench/chaos.py runs more. Afterwards the next good message on each surface is still answered.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import ANSWER, CHANNEL, PERSON, World, thread_answers, world

EXAMPLES = 40
TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\x00", "\ud800", "a\x00b", "x\udfffy", "", " ", "<@U0BOT>", "/new", "/approvals", "🙂" * 10])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=10)


def _http(w: World, method: str, path: str, body: bytes, content_type: str) -> int:
    request = urllib.request.Request(f"{w.api}{path}", data=body if method == "POST" else None, method=method,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def fuzz_web(w: World, conv: str, examples: int) -> int:
    tried = 0

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        route=st.sampled_from(["/api/v1/conversations/{}/messages", "/api/v1/conversations/{}/modes",
                               "/api/v1/approvals/{}", "/api/v1/me/memory", "/api/v1/conversations"]),
        ident=st.sampled_from([conv, "nope"]) | TEXT,
        method=st.sampled_from(["POST", "GET"]),
        body=JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=60)
        | st.builds(lambda t: json.dumps({"text": t}).encode(), TEXT)
        | st.builds(lambda d: json.dumps({"decision": d}).encode(), TEXT),
        content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]),
    )
    def one(route: str, ident: str, method: str, body: bytes, content_type: str) -> None:
        nonlocal tried
        tried += 1
        quoted = urllib.request.quote(ident.encode("utf-8", "surrogatepass"), safe="") or "x"
        status = _http(w, method, route.format(quoted), body, content_type)
        assert status < 500, (method, route, ident, body, status)

    one()
    return tried


def fuzz_slack(w: World, loop: asyncio.AbstractEventLoop, examples: int) -> int:
    tried = 0
    event = st.fixed_dictionaries(
        {"type": st.sampled_from(["message", "app_mention", "reaction_added"]) | TEXT},
        optional={"text": TEXT | JSON, "user": st.sampled_from([PERSON, "U0NOBODY", ""]) | JSON,
                  "channel": st.sampled_from([CHANNEL, "C0NONE"]) | JSON, "ts": st.sampled_from(["1.0", "x"]) | JSON,
                  "thread_ts": JSON, "subtype": TEXT, "files": JSON, "blocks": JSON, "bot_id": JSON},
    )
    frame = (
        st.builds(lambda e: {"type": "events_api", "envelope_id": str(uuid.uuid4()),
                             "payload": w.slack.event_callback(e)}, event)
        | st.builds(lambda p: {"type": "interactive", "envelope_id": str(uuid.uuid4()), "payload": p}, JSON)
        | st.builds(lambda t, p: {"type": t, "envelope_id": str(uuid.uuid4()), "payload": p}, TEXT, JSON)
    ).map(json.dumps) | TEXT | JSON.map(json.dumps)

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frame)
    def one(raw: str) -> None:
        nonlocal tried
        tried += 1
        asyncio.run_coroutine_threadsafe(w.slack.send_raw(raw.encode("utf-8", "surrogatepass").decode("utf-8", "replace")),
                                         loop).result(10)

    one()
    return tried


async def test_fuzzed_web_requests_and_slack_frames_never_take_the_daemon_down(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite") as w:
        http_conv = json.loads(await asyncio.to_thread(_post_json, w, "/api/v1/conversations", {}))["id"]
        loop = asyncio.get_running_loop()
        tried = await asyncio.to_thread(fuzz_web, w, http_conv, EXAMPLES)
        tried += await asyncio.to_thread(fuzz_slack, w, loop, EXAMPLES)
        assert tried >= EXAMPLES
        assert w.daemon.proc is not None and w.daemon.proc.returncode is None, w.daemon.log()[-4000:]

        msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> still there?")
        for e in events:
            await w.slack.send_event(e)
        await w.slack.wait_for(lambda: ANSWER in [t.strip() for t in thread_answers(w.slack, msg.ts)], timeout=30)
        accepted = json.loads(await asyncio.to_thread(_post_json, w, f"/api/v1/conversations/{http_conv}/messages",
                                                       {"text": "still there?"}))
        assert accepted["run_id"]
    log = w.daemon.log()
    assert "Traceback" not in log, log[-6000:]


def _post_json(w: World, path: str, body: dict[str, Any]) -> str:
    request = urllib.request.Request(f"{w.api}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read().decode()
