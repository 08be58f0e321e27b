"""An admin schedule on Telegram end to end: the binding file's task fires on its cron and its card and the
agent's answer arrive in the group it names, with nobody writing there."""

from __future__ import annotations

from pathlib import Path

from gateway.runs.scheduled import Schedules
from gateway.store import repo
from tests.conftest import running_gateway, wait_for
from tests.fakes.telegram import FakeTelegram

from .test_e2e import GROUP_ID, Scripted, config, connected, fake, final, scripted  # noqa: F401 - fixtures


async def test_an_admin_schedule_posts_in_its_group_on_its_cron(tmp_path: Path, fake: FakeTelegram,  # noqa: F811
                                                                 scripted: Scripted) -> None:  # noqa: F811
    schedule = {"name": "standup", "cron": "* * * * *", "task": "Ask the team for their standup notes",
                "channel": str(GROUP_ID)}
    async with running_gateway(config(tmp_path, fake, schedules=[schedule]), clock=scripted.clock) as gw:
        await connected(gw)
        [schedules] = [e for e in gw.extensions if isinstance(e, Schedules)]
        [task] = await schedules.db.listed()
        assert task.next_at is not None
        scripted.clock.advance((task.next_at - scripted.clock.now()).total_seconds() + 1)
        assert await schedules.sweep() == 1
        messages = await fake.wait_for(lambda: len(m := fake.sent(GROUP_ID)) == 2 and m[-1].text == final(1) and m,
                                       what="the card and the answer in the group")
        assert "Scheduled task" in messages[0].text and "Ask the team for their standup notes" in messages[0].text
        assert "[Not a message from a person: a task scheduled" in scripted.prompts[-1]

        async def all_ended() -> bool:
            return not await gw.store.runs_in([repo.QUEUED, repo.RUNNING, repo.PARKED])

        await wait_for(all_ended, what="the scheduled run to end")
        assert await schedules.sweep() == 0
