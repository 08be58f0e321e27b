"""Every door asks the same question: an HTTP API decision on a Telegram card is made as the web's local
person, through their own linked Telegram account, and the Telegram binding's deciders apply to it as to
a button (docs/security.md, "Approval cards and decisions")."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.store.people import AccountRef, PeopleStore
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import FakeTelegram
from tests.support.gated_git import CAPABILITY, RAN

from .test_e2e import ADA, GATED_MODEL, Scripted, connected, fake, scripted  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")


async def test_an_api_decision_on_a_telegram_card_follows_the_telegram_binding_deciders(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:  # noqa: F811
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    config = write_config(tmp_path / "config", agents={"assistant": {
        "name": "Gated", "model": GATED_MODEL, "capabilities": [{"id": CAPABILITY}]}}, bindings={
        "tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram, "admission": {"dm": "open"}},
        "web": {"platform": "web", "agent": "assistant"}})
    async with running_gateway(config, clock=scripted.clock) as gw, aiohttp.ClientSession(gw.url) as s:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "delete old-feature")
        card = await fake.wait_for(lambda: next((m for m in fake.sent(ADA["id"]) if m.buttons), None), what="a card")
        approval_id = next(b["callback_data"] for b in card.buttons if b["callback_data"].startswith("a:"))[2:]

        # The local person is not Ada (deciders: requester): refused, nothing runs.
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 403 and "Only Ada can decide this" in (await r.json())["message"]
        assert card.buttons and RAN == []

        # Once Ada's Telegram account is linked to the local person, the API decides as that account.
        local = await gw.store.identify("web", "local", "local", "local")
        await PeopleStore(gw.store).link(AccountRef("telegram", str(fake.bot_id), str(ADA["id"])), local.person_id,
                                         actor="test")
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 200 and (await r.json())["accepted"]
        await wait_for(lambda: RAN == ["old-feature"] or None, what="the tool to run")
        await fake.wait_for(lambda: not card.buttons, what="the card's buttons to go")
        assert "Approved by local" in card.text
