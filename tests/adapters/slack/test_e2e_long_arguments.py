"""A decider on Slack sees every argument before deciding: a section shows what fits, says how much more
there is, and "Show all arguments" opens a modal (views.open with the click's trigger id) with all of
it (docs/security.md, "Slack")."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.runs.llm import register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support.gated_git import CAPABILITY, LONG_BRANCH, RAN, asking_to_delete

from .conftest import eventually
from .test_e2e_approvals import buttons, card_of

MODEL = "slack-e2e-long-arguments"


LONGER = "staging" + " " * 9000 + "AND-ALSO-PROD"  # past a section's 3,000 characters


def _config(tmp_path: Path, fake_slack: FakeSlack, branch: str) -> Path:
    RAN.clear()
    register_model(MODEL, lambda: asking_to_delete(branch))
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    return write_config(tmp_path / "config", agents={"assistant": {
        "name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


def _shown_on_card(card: object) -> str:
    text = card.blocks[1]["text"]["text"]  # type: ignore[attr-defined]
    return text.split("```")[1]


def _modal_text(view: dict[str, object]) -> str:
    return "".join(b["text"]["text"].strip("`") for b in view["blocks"][1:] if b["type"] == "section")  # type: ignore[index,union-attr]


async def test_a_1700_character_argument_is_whole_on_the_slack_card(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack, LONG_BRANCH)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete it")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        assert json.loads(_shown_on_card(card)) == {"branch": LONG_BRANCH}
        assert not [v for v in buttons(card) if v.startswith("show:")], "nothing more to show"


async def test_arguments_past_a_section_are_readable_in_a_modal_before_approval(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack, LONGER)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete it")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        # The card shows what fits, and says plainly that there is more and where to read it.
        assert "AND-ALSO-PROD" not in _shown_on_card(card)
        assert "more characters not shown here: press “Show all arguments”" in json.dumps(card.blocks, ensure_ascii=False)
        show = next(v for v in buttons(card) if v.startswith("show:"))

        envelope = await fake_slack.click("U0ADA", card, show)
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        [view] = await fake_slack.wait_for(lambda: fake_slack.views or None)
        assert view["user"] == "U0ADA" and view["type"] == "modal"
        assert json.loads(_modal_text(view)) == {"branch": LONGER}, "the modal did not show every argument"
        assert RAN == [], "showing the arguments decided something"

        approve = next(v for v in buttons(card) if v.startswith("approve:"))
        envelope = await fake_slack.click("U0ADA", card, approve)
        await fake_slack.wait_for(lambda: RAN == [LONGER] or None)
