"""A scheduled task on Slack end to end (the real adapter against the fake Slack): Ada asks in a thread for a
reminder; when its time comes, with nobody saying anything, the task's card and the agent's answer land in that
same thread — once."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.runs.scheduled import Schedules
from gateway.store import repo
from tests.capabilities.knowledge_script import SCRIPT
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack

from .conftest import eventually


async def test_a_task_made_in_a_thread_posts_in_that_thread_at_its_time(tmp_path: Path, fake_slack: FakeSlack) -> None:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    assistant = {"name": "Assistant", "model": "knowledge-scripted",
                 "capabilities": [{"id": "schedules", "tool_approval": {"schedule_task": "never"}}]}
    cfg = write_config(tmp_path / "config", agents={"assistant": assistant},
                       bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    clock = fake_slack.clock = ManualClock(datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc), autojump=AUTOJUMP)
    async with running_gateway(cfg, clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        [schedules] = [e for e in gw.extensions if isinstance(e, Schedules)]
        SCRIPT.results.clear()
        args = json.dumps({"task": "Remind Ada to send the invoice", "at": "2026-03-02T09:00Z"})
        root, _ = await fake_slack.say("C0GEN", "U0ADA", f"<@U0BOT> call schedule_task {args}")

        def in_thread() -> list[str]:
            return [m.text for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts]

        await fake_slack.wait_for(lambda: [t for t in in_thread() if t == "answered."])
        assert SCRIPT.results[-1].startswith("Scheduled task ID: ")
        before = len(in_thread())

        clock.advance(3600)
        assert await schedules.sweep() == 1
        await fake_slack.wait_for(lambda: len(in_thread()) >= before + 2, timeout=15)

        async def all_ended() -> bool:
            return not await gw.store.runs_in([repo.QUEUED, repo.RUNNING, repo.PARKED])

        await wait_for(all_ended, what="the scheduled run to end")
        card, answer = in_thread()[before:]
        assert card.startswith("*⏰ Scheduled task ") and "set by Ada" in card and "Remind Ada to send the invoice" in card
        assert answer == "ok", "the agent's own answer to the task, below its card"
        assert all(m.thread_ts == root.ts for m in fake_slack.bot_messages("C0GEN")), "nothing outside the thread"
        assert await schedules.sweep() == 0 and len(in_thread()) == before + 2
