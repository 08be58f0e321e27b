"""Admin schedules in a binding file: refused at load with file:line when they cannot run, posted to their
channel when due, and changed by a reload."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bindings.loader import ConfigError, load_config
from gateway.clock import ManualClock
from gateway.runs.scheduled import Schedules
from gateway.store import repo
from gateway.store.models import Run
from gateway.store.schedules import ADMIN, SCHEDULED

from .conftest import running_gateway, wait_for, write_config
from .fakes.chat import FakeChatAdapter, fake_platforms

SLACK = {"bot_token": "env:SLACK_BOT", "app_token": "env:SLACK_APP"}
INCIDENTS = {"name": "incidents", "cron": "0 9 * * MON", "timezone": "Europe/Warsaw",
             "task": "Post the open incidents", "channel": "C9"}


def _config(directory: Path, schedules: list[dict[str, Any]]) -> Path:
    return write_config(directory, bindings={"slack": {"platform": "slack", "agent": "assistant", "slack": SLACK,
                                                       "schedules": schedules}})


def test_a_bad_cron_an_unknown_zone_and_no_target_are_refused_with_file_and_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, [])
    (cfg / "bindings" / "slack.yaml").write_text(
        "platform: slack\nagent: assistant\nslack:\n  bot_token: env:SLACK_BOT\n  app_token: env:SLACK_APP\n"
        "schedules:\n"
        "  - cron: '0 9 * *'\n    task: Post the open incidents\n    channel: C9\n"  # lines 7-9
        "  - cron: '0 9 * * MON'\n    timezone: Europe/Warsw\n    task: Post them\n    channel: C9\n"  # 10-13
        "  - cron: '0 9 * * MON'\n    task: Post them nowhere\n")  # 14-15
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = [str(p) for p in e.value.problems if not p.warning]
    path = f"{cfg}/bindings/slack.yaml"
    assert any(p.startswith(f"{path}:7:") and "schedules.0.cron" in p and "needs five fields" in p
               for p in problems), problems
    assert any(p.startswith(f"{path}:11:") and "schedules.1.timezone" in p and "not an IANA time zone name" in p
               for p in problems), problems
    assert any(p.startswith(f"{path}:14:") and "schedules.2" in p and "needs a target" in p for p in problems), problems


def test_two_schedules_of_one_name_are_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, [INCIDENTS, {**INCIDENTS, "cron": "0 10 * * MON"}])
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem.startswith(f"{cfg}/bindings/slack.yaml:") and "two schedules are named 'incidents'" in problem


async def test_an_admin_schedule_posts_to_its_channel_when_due_and_a_reload_removes_it(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 3, 29, 12, tzinfo=timezone.utc))  # a Sunday, summer time since 01:00 UTC
    cfg = _config(tmp_path, [INCIDENTS])
    with fake_platforms("slack"):
        async with running_gateway(cfg, clock=clock) as gw:
            [schedules] = [e for e in gw.extensions if isinstance(e, Schedules)]
            [task] = await schedules.db.listed()
            assert task.origin == ADMIN and task.next_at == datetime(2026, 3, 30, 7, tzinfo=timezone.utc)
            clock.advance(19 * 3600 + 30)  # Monday 09:00:30 in Warsaw
            assert await schedules.sweep() == 1

            async def ran() -> list[Run]:
                async with gw.store.sessions() as s:
                    runs = list(await s.scalars(select(Run).where(Run.kind == SCHEDULED)))
                return runs if runs and runs[0].status in repo.ENDED else []

            [run] = await wait_for(ran, what="the admin schedule's run")
            assert run.status == repo.FINISHED
            adapter = gw.adapters["slack"]
            assert isinstance(adapter, FakeChatAdapter)
            posted = [(t.channel, t.thread, text) for t, text in adapter.posts.values()]
            assert posted and all(channel == "C9" and thread is None for channel, thread, _ in posted)
            assert any("Post the open incidents" in text and "⏰ Scheduled task" in text for _, _, text in posted)

            _config(tmp_path, [])
            ok, problems = await gw.reload_from_disk()
            assert ok, problems
            await schedules.sweep()
            assert await schedules.db.listed() == []
            [gone] = await schedules.db.listed(statuses=["cancelled"])
            assert gone.reason == "removed from its binding file"
