"""A delegate's gated call says who asked on every platform's card ("ops wants to run deploy"); the
agent's own call still shows just the tool."""

from __future__ import annotations

import json

from adapters.mattermost.cards import card_message as mattermost_card
from adapters.slack.cards import card_message as slack_card
from adapters.telegram.cards import card_html as telegram_card
from gateway.http.api import card_json
from gateway.outbound.adapter import ApprovalCard, ApprovalItem

CARD = ApprovalCard("card1", "run1", (ApprovalItem("a1", "deploy", "test_ops", '{"service": "api"}', delegate="ops"),
                                      ApprovalItem("a2", "status", "test_ops", "{}")), "Only Ada can decide.")


def test_every_card_names_the_delegate_that_asked() -> None:
    text, blocks = slack_card(CARD)
    assert "ops wants to run deploy" in text and "ops wants to run deploy" in json.dumps(blocks)
    assert "ops wants to run deploy" in telegram_card(CARD)
    assert "ops wants to run `deploy`" in mattermost_card(CARD, by_reaction=False)
    assert [i["headline"] for i in card_json(CARD)["items"]] == ["ops wants to run deploy", "status"]
    for shown in (json.dumps(blocks), telegram_card(CARD), mattermost_card(CARD, by_reaction=False)):
        assert "wants to run status" not in shown, "the agent's own call names no delegate"
