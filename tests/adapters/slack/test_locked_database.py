"""A Slack event that arrives while another process holds the SQLite write lock is answered
exactly once: acknowledged after the lock (waited for), or not acknowledged and redelivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for, write_config
from tests.conftest import running_gateway
from tests.fakes.slack import FakeSlack
from tests.support.settled import settled
from tests.support.locking import LOCK_SECONDS, STALL_BOUND, StallMeter, another_process_holds_the_lock


def _slack_config(tmp_path: Path, api_url: str, **database: Any) -> Path:
    slack = {
        "bot_token": "env:TEST_SLACK_BOT_TOKEN",
        "app_token": "env:TEST_SLACK_APP_TOKEN",
        "signing_secret": "env:TEST_SLACK_SIGNING_SECRET",
        "mode": "socket",
        "api_url": api_url,
    }
    return write_config(
        tmp_path / "config",
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
        gateway={"database": database} if database else None,
    )


@pytest.mark.parametrize("bound", [5.0, 0.5], ids=["waited-for", "refused-then-redelivered"])
async def test_slack_event_during_a_lock_is_answered_exactly_once(tmp_path: Path, fake_slack: FakeSlack, bound: float) -> None:
    """Slack redelivers an event whose envelope was not acknowledged (after 3 s, then later):
    played here by sending it again during the lock and once more after it, unless acked."""
    config_dir = _slack_config(tmp_path, fake_slack.api_url, busy_timeout_seconds=bound)
    async with running_gateway(config_dir) as gw:
        await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack connected")
        # A first turn before the lock, as in tests/test_locked_database.py: a process's first run
        # imports and builds what every later run reuses, and that stall is not the lock's.
        _, warm = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> warm up")
        for e in warm:
            await fake_slack.send_event(e, body=fake_slack.event_callback(e))
        await fake_slack.wait_for(lambda: any(m.text.endswith("warm up") for m in fake_slack.bot_messages("C0GEN")))
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello during the lock")
        bodies = [fake_slack.event_callback(e) for e in events]
        envelopes: list[str] = []
        with StallMeter() as meter:
            async with another_process_holds_the_lock(config_dir / "gateway.db") as released:
                for e, body in zip(events, bodies):
                    envelopes.append(await fake_slack.send_event(e, body=body))
                await asyncio.sleep(1.0)  # pacing only: a redelivery while the first still waits
                for e, body in zip(events, bodies):
                    envelopes.append(await fake_slack.send_event(e, body=body, retry_attempt=1))
                await released.wait()
            # Slack keeps redelivering what was never acknowledged.
            await asyncio.sleep(0.5)  # pacing only
            for e, body in zip(events, bodies):
                if not all(fake_slack.acked(env) for env in envelopes):
                    envelopes.append(await fake_slack.send_event(e, body=body, retry_attempt=2))
            await fake_slack.wait_for(lambda: any(fake_slack.acked(env) for env in envelopes[-len(events):]))
            replies = await fake_slack.wait_for(
                lambda: (r := fake_slack.bot_messages("C0GEN")) and r[-1].text.endswith("hello during the lock") and r
            )
        assert meter.longest < STALL_BOUND, f"the event loop stalled for {meter.longest * 1000:.0f} ms"
        await settled(gw, fake_slack)  # nothing left that could post a second answer
        replies = [m for m in fake_slack.bot_messages("C0GEN") if not m.text.endswith("warm up")]
        assert len(replies) == 1 and replies[0].thread_ts == root.ts, "answered exactly once"
        if bound < LOCK_SECONDS:
            assert not any(fake_slack.acked(env) for env in envelopes[: 2 * len(events)]), \
                "an event that could not be recorded must not be acknowledged"


