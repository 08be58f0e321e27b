"""Dropped connections under a steady stream, against the real daemon in its own process.

Slack's Socket Mode socket closed mid-stream (or a `disconnect` frame asking for a new one),
Slack redelivering the envelopes the app had not acked; Mattermost's websocket closed, the
adapter resuming from its sequence number and the server replaying what it missed (or, when the
server lost its queue, catching up over REST); Telegram's
long polls cut (502 or closed unanswered). Every message gets exactly one answer.
"""

from __future__ import annotations

from pathlib import Path

from .harness import Tally
from .platforms import stream_under_drops, world


async def test_connections_dropped_at_random_lose_and_double_nothing(tmp_path: Path) -> None:
    async with world(tmp_path / "config") as w:
        tally = Tally("sqlite")
        drops = await stream_under_drops(w, tally, conversations=3, duration=14, every=(0.8, 2.0),
                                         poll_cut_share=0.3, wait=60)
        resumes = w.mattermost.websocket_resumes
        telegram_connects = len(w.telegram.calls_to("deleteWebhook"))
        log = w.daemon.log()
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 0), (tally.problems, drops)
    assert drops.slack >= 2 and drops.mattermost >= 2 and drops.telegram_polls >= 2, drops
    assert resumes >= 1, "Mattermost never resumed a dropped stream"
    assert drops.mattermost_fresh >= 1, "the Mattermost server never lost its resume queue"
    # A cut poll is polled again, not a reconnect (getMe, the command menu, deleteWebhook).
    assert telegram_connects == 1, telegram_connects
    assert tally.sent >= 9, tally
    assert tally.answered == tally.sent, tally
    assert "Traceback" not in log, log[-6000:]
