"""`/stop` on Slack end to end: in Ada's thread, Bob's `!stop` changes nothing (he alone is told why);
Ada's ends the run within a second, leaving a stopped line, never the finished reply; a stop while
the run waits on an approval card closes the card, and nothing on it runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gateway.runs.llm import register_model
from gateway.store import repo
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack
from tests.support.gated_git import RAN
from tests.test_stop import SLOW, slow_model

from .conftest import eventually
from .test_e2e_approvals import buttons, card_of, gated  # noqa: F401 - `gated` is a fixture used here


def _config(tmp_path: Path, fake: FakeSlack) -> Path:
    register_model(SLOW, slow_model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    return write_config(tmp_path / "config", agents={"assistant": {"name": "Slow", "model": SLOW}},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


async def test_only_the_requester_stops_a_run_in_a_thread(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> write a long essay")
        reply = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.text.startswith("word0")), None))
        [run] = await gw.store.runs_in([repo.RUNNING])

        _, envelopes = await fake_slack.say("C0GEN", "U0BOB", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        refusal = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.user == "U0BOB"])
        assert refusal[0].text == "Only Ada or someone who may decide approvals here can stop this."
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]

        pressed = time.monotonic()
        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: reply.text.endswith("_"), timeout=5)
        assert time.monotonic() - pressed < 5.0  # the reply runs 10 s: cut well short (a generous bound on a busy machine)

        async def ended() -> bool:
            row = await gw.store.run(run.id)
            return row is not None and row.status == repo.STOPPED and row.reason == "stopped by Ada"

        await wait_for(ended, what="the run to end stopped")
        assert reply.text.startswith("word0 ") and "Stopped by Ada; before that I wrote what is above." in reply.text
        assert not [e for e in fake_slack.ephemerals if e.user == "U0ADA"]  # a stop that worked needs no answer


async def test_stop_while_waiting_for_approval_closes_the_card(gated: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(gated) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        [run] = await gw.store.runs_in([repo.PARKED])

        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: buttons(card) == [])
        shown = json.dumps(card.blocks)
        assert "Closed: the run was stopped." in shown and "Denied by Ada" in shown
        notice = await fake_slack.wait_for(
            lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts and "Stopped by" in m.text])
        assert notice[0].text == "_⏹ Stopped by Ada while waiting for approval; nothing on the card ran._"
        ended = await gw.store.run(run.id)
        assert ended is not None and ended.status == repo.STOPPED and ended.reason == "stopped by Ada"
        assert RAN == []  # nothing the card asked for ran
