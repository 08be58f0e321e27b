"""Issue 19's linking, through both platforms' fakes and the real daemon in one process: a code
given in Ada's Slack DM links her Telegram account; a note written in her Telegram DM then reaches
her Slack DM run. A reused code and an expired one link nothing."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.store.people import LINK_TTL
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.support import memory_cards
from tests.support.memory_cards import GIVEN, note_names

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

ADA_TG = FakeTelegram.user(42, "Ada", "ada")
MALLORY_TG = FakeTelegram.user(66, "Mallory", "mallory")
CODE = re.compile(r"`/link ([A-Z0-9]{4}-[A-Z0-9]{4})`")


@pytest.fixture
async def telegram(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.private_chat(ADA_TG)
        server.private_chat(MALLORY_TG)
        yield server


async def _slack_code(fake: FakeSlack) -> str:
    before = len(fake.ephemerals)
    await fake.say("D0ADA", "U0ADA", "!link")
    said = await fake.wait_for(lambda: fake.ephemerals[before:] or None)
    match = CODE.search(said[0].text)
    assert match, said[0].text
    return match[1]


async def _tg_answer(fake: FakeTelegram, user: dict[str, object], text: str) -> str:
    before = len(fake.sent(int(str(user["id"]))))
    fake.push_message(int(str(user["id"])), user, text)
    sent = await fake.wait_for(lambda: fake.sent(int(str(user["id"])))[before:] or None, what="an answer")
    return sent[0].text


async def test_a_code_from_slack_links_telegram_and_the_note_follows_the_person(
        tmp_path: Path, fake_slack: FakeSlack, telegram: FakeTelegram) -> None:
    memory_cards.register()
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    tg = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": telegram.api_url, "mode": "polling"}
    config = write_config(tmp_path / "config", agents={"assistant": memory_cards.AGENT}, bindings={
        "acme": {"platform": "slack", "agent": "assistant", "slack": slack},
        "tg": {"platform": "telegram", "agent": "assistant", "telegram": tg, "admission": {"dm": "open"}}})
    clock = fake_slack.clock = telegram.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fakes'
    async with running_gateway(config, clock=clock) as gw:
        await wait_for(lambda: all(a.health().connected for a in gw.adapters.values()), what="both bindings")

        code = await _slack_code(fake_slack)
        answer = await _tg_answer(telegram, ADA_TG, f"/link {code.lower()}")
        assert answer.startswith("Linked: this account is now the same person as your account on Slack.")

        before = len(GIVEN)
        telegram.push_message(ADA_TG["id"], ADA_TG, "remember tea.md: green tea, no sugar")
        await wait_for(lambda: len(GIVEN) > before and not gw.scheduler.active, what="the note written")
        await fake_slack.say("D0ADA", "U0ADA", "what do I drink?")
        await wait_for(lambda: len(GIVEN) > before + 1 and not gw.scheduler.active, what="the Slack run")
        assert "tea.md" in note_names(GIVEN[-1].listed), "the note written on Telegram reached the Slack DM run"

        # The code worked once: Mallory sending it again links nothing and learns nothing.
        answer = await _tg_answer(telegram, MALLORY_TG, f"/link {code}")
        assert answer.startswith("That code doesn't work") and "ada" not in answer.lower()

        # A fresh code, sent after 10 minutes, links nothing either.
        late = await _slack_code(fake_slack)
        clock.advance(LINK_TTL.total_seconds() + 1)
        answer = await _tg_answer(telegram, MALLORY_TG, f"/link {late}")
        assert answer.startswith("That code doesn't work")
        mallory = await gw.store.identify("telegram", str(telegram.bot_id), "66", "Mallory")
        ada = await gw.store.identify("slack", "T0TEAM", "U0ADA", "Ada")
        assert mallory.person_id != ada.person_id
