"""A Mattermost post made just before SIGKILL and never recorded is continued, not posted again.

As for Slack (test_kill9.py): the server creates the reply's first post, the process dies
before it hears so (and before it records the post); the run, queued again after the restart,
finds the bot's own unrecorded post in the conversation and finishes it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakes.mattermost import wait_until

from tests.support.settled import settled

from .harness import ANSWER, kill_and_restart
from .platforms import mattermost_answers, world


async def test_a_mattermost_post_made_just_before_sigkill_is_continued_not_posted_again(tmp_path: Path) -> None:
    async with world(tmp_path / "config", model_delay=0.2) as w:
        person = w.mattermost.add_user("kim")
        dm = w.mattermost.direct_channel(person["id"], w.mm_bot["id"])["id"]
        w.mattermost.post_answer_delay = 30.0  # the post lands; its answer never reaches the process
        await w.mattermost.user_post(person["id"], dm, "hello")
        await wait_until(lambda: mattermost_answers(w, dm), timeout=30)
        w.mattermost.post_answer_delay = 0.0
        await kill_and_restart(w)  # type: ignore[arg-type]
        await wait_until(lambda: ANSWER in [t.strip() for t in mattermost_answers(w, dm)], timeout=60)
        await settled(*w.parts())  # nothing left that could post more
        assert [t.strip() for t in mattermost_answers(w, dm)] == [ANSWER]
        log = w.daemon.log()
    assert "continues in 1 post(s) an interrupted process made" in log
    assert "Traceback" not in log, log[-6000:]
