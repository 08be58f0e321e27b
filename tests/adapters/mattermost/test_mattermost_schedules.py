"""A scheduled task on Mattermost through the real daemon: made in a thread, it posts its card and the agent's
answer in that thread (root_id) when its time comes, with nobody posting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gateway.clock import ManualClock
from gateway.runs.scheduled import Schedules
from gateway.store import repo
from gateway.store.schedules import CHAT, NewTask
from tests.conftest import running_gateway, wait_for

from .conftest import World
from .test_mattermost_e2e import Script, _bot_posts, _config, _connected, script  # noqa: F401 - fixture


async def test_a_task_made_in_a_thread_posts_in_that_thread(tmp_path: Path, world: World,
                                                            script: Script) -> None:  # noqa: F811
    clock = ManualClock()
    async with running_gateway(_config(tmp_path, world), clock=clock) as gw:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot hello")
        await wait_for(lambda: _bot_posts(world, world.town, root["id"]), what="the first answer")
        [run] = await wait_for(lambda: gw.store.runs_in(list(repo.ENDED)), what="the first run to end")
        [schedules] = [e for e in gw.extensions if isinstance(e, Schedules)]
        made = await schedules.db.create(NewTask(
            conversation_id=run.conversation_id, binding_id="mm", task="Post the weekly summary", cron=None,
            at=clock.now() + timedelta(minutes=30), timezone="UTC", creator_person_id=run.requester_person_id,
            creator_account=run.requester_account, creator_name="alice", origin=CHAT), per_person=5, per_conversation=5)
        assert not isinstance(made, str)
        clock.advance(31 * 60)
        assert await schedules.sweep() == 1
        posts = await wait_for(lambda: len(p := _bot_posts(world, world.town, root["id"])) == 3
                               and p[2]["message"].startswith("Turn 2.") and p, what="the card and the answer")
        assert "Scheduled task" in posts[1]["message"] and "Post the weekly summary" in posts[1]["message"]
        assert all(p["root_id"] == root["id"] for p in posts)
        assert len(_bot_posts(world, world.town)) == 3, "nothing outside the thread"
