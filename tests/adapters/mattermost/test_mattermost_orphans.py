"""Which of the bot's own posts a restarted run may continue: plain replies, never approval cards."""

from __future__ import annotations

from typing import Any

from adapters.mattermost import cards, stop
from gateway.outbound.adapter import ApprovalCard, ApprovalItem


def _as_read_back(props: dict[str, Any]) -> dict[str, Any]:
    """A post as a client reads it: the server strips `integration` from every action."""
    for attachment in props.get("attachments", []):
        for action in attachment.get("actions", []):
            action.pop("integration", None)
    return {"id": "p1", "message": "text", "props": props}


def test_a_card_is_told_from_a_streaming_reply_with_its_stop_button() -> None:
    card = ApprovalCard("card-1", "run-1", (ApprovalItem("appr-1", "send_mail", "mail", "{}"),), "")
    card_post = _as_read_back(cards.card_props(card, url="http://gw/a", key=b"k", binding_id="mm", channel_id="c"))
    reply_post = _as_read_back(stop.stop_props(url="http://gw/a", key=b"k", binding_id="mm", channel_id="c", run_id="r"))
    assert cards.is_card(card_post)
    assert not cards.is_card(reply_post)
    assert not cards.is_card({"id": "p2", "message": "plain", "props": {}})
    assert not cards.is_card({"id": "p3", "props": {"attachments": "junk"}})
    assert not cards.is_card({"id": "p4"})
