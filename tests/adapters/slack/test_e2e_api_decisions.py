"""Every door asks the same question: a decision on a Slack card through the HTTP API is made as the
token's person, and the Slack binding's deciders apply to it as to a click (docs/security.md,
"Approval cards and decisions")."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support.gated_git import CAPABILITY, RAN

from .conftest import eventually
from .test_e2e_approvals import MODEL, _model, buttons, card_of
from gateway.runs.llm import register_model


@pytest.fixture
def config(tmp_path: Path, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> Path:
    RAN.clear()
    register_model(MODEL, _model)
    monkeypatch.setenv("TOKEN_ADA", "ada-token-" + "a" * 20)
    monkeypatch.setenv("TOKEN_BOB", "bob-token-" + "b" * 20)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack},
                  "web": {"platform": "web", "agent": "assistant"}},
        gateway={"http": {"api_tokens": [{"token": "env:TOKEN_ADA", "person": "slack:U0ADA", "name": "Ada (API)"},
                                         {"token": "env:TOKEN_BOB", "person": "slack:T0TEAM:U0BOB"}]}})


async def test_an_api_decision_on_a_slack_card_follows_the_slack_binding_deciders(
        config: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(config) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        approval_id = next(v for v in buttons(card) if v.startswith("approve:")).partition(":")[2]

        async def decide(token: str) -> tuple[int, dict[str, object]]:
            async with aiohttp.ClientSession(gw.url, headers={"Authorization": f"Bearer {token}"}) as s:
                r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
                return r.status, await r.json()

        async def read(token: str) -> tuple[int, dict[str, object]]:
            async with aiohttp.ClientSession(gw.url, headers={"Authorization": f"Bearer {token}"}) as s:
                r = await s.get(f"/api/v1/approvals/{approval_id}")
                return r.status, await r.json()

        # The full arguments are there for whoever may decide the card, and for nobody else.
        status, body = await read("ada-token-" + "a" * 20)
        assert status == 200 and json.loads(str(body["arguments"])) == {"branch": "old-feature"}
        assert body["tool"] == "delete_branch" and body["state"] == "pending"
        assert (await read("bob-token-" + "b" * 20))[0] == 404

        # Bob is in the channel but did not ask (deciders: requester): his token decides nothing.
        status, body = await decide("bob-token-" + "b" * 20)
        assert status == 403 and not body["accepted"] and "Only Ada can decide this" in str(body["message"])
        assert card.edits == [] and RAN == []
        # Ada's token acts as her Slack account: accepted, and the card names the token's principal.
        status, body = await decide("ada-token-" + "a" * 20)
        assert status == 200 and body["accepted"]
        await fake_slack.wait_for(lambda: RAN == ["old-feature"] or None)
        await fake_slack.wait_for(lambda: buttons(card) == [] or None)
        assert "Approved by Ada (API)" in json.dumps(card.blocks)
        [decision] = await gw.approvals.decisions()
        assert decision["surface"] == "api" and decision["decided_by"] == "Ada (API)"


async def test_the_tokenless_local_person_decides_no_slack_card_it_is_not_linked_to(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    register_model(MODEL, _model)
    RAN.clear()
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    config = write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack, "approvals": {"deciders": "channel"}},
                  "web": {"platform": "web", "agent": "assistant"}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        approval_id = next(v for v in buttons(card) if v.startswith("approve:")).partition(":")[2]
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 403 and "none is linked to you: link it" in (await r.json())["message"]
        assert card.edits == [] and RAN == []
