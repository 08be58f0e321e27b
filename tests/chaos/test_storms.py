"""Redelivery and 429 storms against the real daemon in its own process.

Redelivery: every Slack event delivered three times (`retry_attempt` 0, 1, 2, the same event id),
the last try of some after a SIGKILL and restart: one run and one answer per message.
429s: a share of the bot's posts and edits answered 429 with Retry-After: every answer arrives,
with its final text right.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from tests.support.settled import settled

from .harness import ANSWER, CHANNEL, PERSON, Tally, kill_and_restart, slack_conversation, thread_answers, world


@pytest.mark.chaos_smoke
async def test_every_event_three_times_some_across_a_restart_one_run_one_answer_each(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite") as w:
        threads: list[str] = []
        later: list[dict[str, object]] = []
        for i in range(8):
            msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> storm {i}")
            threads.append(msg.ts)
            for event in events:
                body = w.slack.event_callback(event)
                for attempt in (0, 1):
                    await w.slack.send_event(event, body=body, retry_attempt=attempt)
                if i % 2:
                    later.append(body)
                else:
                    await w.slack.send_event(event, body=body, retry_attempt=2)
        await kill_and_restart(w)
        for body in later:
            await w.slack.send_event(body["event"], body=body, retry_attempt=2)  # type: ignore[arg-type]
        for thread in threads:
            await w.slack.wait_for(lambda t=thread: ANSWER in [x.strip() for x in thread_answers(w.slack, t)], timeout=40)
        await settled(*w.parts())  # nothing left that could post a duplicate
        assert {t: [x.strip() for x in thread_answers(w.slack, t)] for t in threads} == {t: [ANSWER] for t in threads}
        with sqlite3.connect(tmp_path / "config" / "gateway.db") as db:
            runs, users = db.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM messages"
                                     " WHERE role = 'user')").fetchone()
        assert (runs, users) == (8, 8)
    assert "Traceback" not in w.daemon.log()


async def test_a_429_storm_delays_answers_and_loses_none(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite") as w:
        w.slack.storm_share, w.slack.storm_retry_after = 0.3, 1.0
        tally = Tally("sqlite")
        until = time.monotonic() + 8
        await asyncio.gather(*(slack_conversation(w, tally, until, wait=60, tag=f"r{i}") for i in range(5)))
        await settled(*w.parts())
        answers = {t: [x.strip() for x in thread_answers(w.slack, t)] for t, _ in tally.threads}
    assert w.slack.storm_429s >= 5, "the storm did not happen"
    assert (tally.lost, tally.answered) == (0, tally.sent), tally
    assert answers == {t: [ANSWER] * n for t, n in tally.threads}
    assert "Traceback" not in w.daemon.log()
