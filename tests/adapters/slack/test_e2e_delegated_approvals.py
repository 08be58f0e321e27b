"""A delegate's gated call on Slack: the card in the thread names the delegate, Ada's click resumes the
delegate where it stopped, and the parent's answer lands once; Bob's click changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.store import repo
from tests.conftest import run_finished, running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack
from tests.support.plugin_delegation import LEAD_REQUESTS
from tests.support.plugin_ops import RAN

from .conftest import eventually
from .test_e2e_approvals import buttons, card_of


def _config(tmp_path: Path, fake: FakeSlack) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    agents = {
        "lead": {"name": "Lead", "model": "test:lead", "subagents": ["ops"], "capabilities": [{"id": "subagents"}]},
        "ops": {"name": "Ops", "description": "Deploys things", "model": "test:ops", "capabilities": [{"id": "test_ops"}]},
    }
    return write_config(tmp_path / "config", agents=agents,
                        bindings={"acme": {"platform": "slack", "agent": "lead", "slack": slack}},
                        gateway={"plugins": ["tests.support.plugin_delegation"]})


async def test_the_card_names_the_delegate_and_approval_resumes_it_once(tmp_path: Path, fake_slack: FakeSlack) -> None:
    RAN.clear()
    LEAD_REQUESTS.clear()
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delegate ops deploy api")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        [run] = await gw.store.runs_in([repo.PARKED])
        shown = json.dumps(card.blocks)
        assert "ops wants to run deploy" in shown and '"service": "api"' in shown.replace('\\"', '"')
        assert card.thread_ts == root.ts and RAN == []
        approve = next(v for v in buttons(card) if v.startswith("approve:"))

        await fake_slack.click("U0BOB", card, approve)
        await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.user == "U0BOB"])
        assert RAN == [] and (await gw.store.run(run.id)).status == repo.PARKED  # type: ignore[union-attr]

        await fake_slack.click("U0ADA", card, approve)
        await wait_for(lambda: run_finished(gw, run.id))
        assert RAN == [("deploy", "api")]
        answers = await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN")
                                                    if "task said" in m.text and m.blocks is None])
        assert [m.text for m in answers] == ["task said: [deploy: deployed api]"]
        assert LEAD_REQUESTS == ["delegate", "answer"]
