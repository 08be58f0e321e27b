"""A decider on Telegram sees every argument before deciding: the card shows what fits in 4,096
characters and says how much more there is; "Show all" answers with the rest in messages under the
limit (docs/security.md, "Telegram")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.runs.llm import register_model
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import FakeTelegram
from tests.support.gated_git import CAPABILITY, LONG_BRANCH, RAN, asking_to_delete

from .test_e2e import ADA, Scripted, connected, fake, scripted  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")
MODEL = "telegram-e2e-long-arguments"
LONGER = "staging" + " " * 9000 + "AND-ALSO-PROD"  # more than one message holds


def _config(tmp_path: Path, fake: FakeTelegram, branch: str) -> Path:  # noqa: F811
    RAN.clear()
    register_model(MODEL, lambda: asking_to_delete(branch))
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    return write_config(tmp_path / "config", agents={"assistant": {
        "name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}}, bindings={
        "tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram, "admission": {"dm": "open"}}})


async def test_a_1700_character_argument_is_whole_on_the_telegram_card(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:  # noqa: F811
    async with running_gateway(_config(tmp_path, fake, LONG_BRANCH), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "delete it")
        card = await fake.wait_for(lambda: next((m for m in fake.sent(ADA["id"]) if m.buttons), None), what="a card")
        assert LONG_BRANCH in card.text and "more characters" not in card.text
        assert not [b for b in card.buttons if b["callback_data"].startswith("s:")]


async def test_show_all_answers_with_every_argument_before_approval(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:  # noqa: F811
    async with running_gateway(_config(tmp_path, fake, LONGER), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "delete it")
        card = await fake.wait_for(lambda: next((m for m in fake.sent(ADA["id"]) if m.buttons), None), what="a card")
        assert "AND-ALSO-PROD" not in card.text and "more characters: press “Show all”" in card.text
        show = next(b["callback_data"] for b in card.buttons if b["callback_data"].startswith("s:"))
        before = len(fake.sent(ADA["id"]))
        click = fake.push_callback(ADA, card, show)
        await fake.wait_for(lambda: click in fake.answers, what="the click answered")
        assert fake.answers[click].get("show_alert") is False
        parts = fake.sent(ADA["id"])[before:]
        assert len(parts) >= 3 and all(len(p.text) <= 4096 for p in parts)
        assert [p.text.partition("\n")[0] for p in parts] == [
            f"📄 All arguments of delete_branch (part {n} of {len(parts)})" for n in range(1, len(parts) + 1)]
        whole = "".join(p.text.partition("\n")[2] for p in parts)
        assert json.loads(whole) == {"branch": LONGER}, "Show all did not send every argument"
        assert RAN == []
        approve = next(b["callback_data"] for b in card.buttons if b["callback_data"].startswith("a:"))
        fake.push_callback(ADA, card, approve)
        await wait_for(lambda: RAN == [LONGER] or None, what="the tool to run")
