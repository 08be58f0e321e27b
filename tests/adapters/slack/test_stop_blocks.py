"""The Slack Stop control's blocks: the reply's text stays whole within Slack's section cap, a press is read
back only from our Stop button, and a reply carrying the button is still found as a reply after a crash
(an approval card and the control message beside a native stream are not)."""

from __future__ import annotations

from adapters.slack.cards import card_message
from adapters.slack.stop import SECTION_CHARS, control_blocks, is_reply, parse_stop, reply_blocks
from gateway.outbound.adapter import ApprovalCard, ApprovalItem


def test_a_long_reply_is_split_into_sections_within_the_cap_and_ends_with_the_button() -> None:
    text = "".join(f"{i:05d} " for i in range(1200))  # 7,200 characters
    blocks = reply_blocks(text, "run1")
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert "".join(sections) == text and all(len(s) <= SECTION_CHARS for s in sections)
    assert blocks[-1]["type"] == "actions" and blocks[-1]["elements"][0]["value"] == "stop:run1"


def test_only_our_stop_button_names_a_run() -> None:
    assert parse_stop("gw_stop", "stop:run1") == "run1"
    assert parse_stop("gw_stop", "stop:") is None
    assert parse_stop("gw_approve_0", "stop:run1") is None
    assert parse_stop("gw_stop", "approve:abc") is None


def test_a_reply_with_its_stop_button_is_a_reply_a_card_and_the_stream_control_are_not() -> None:
    card = ApprovalCard("card1", "run1", (ApprovalItem("a1", "deploy", "ops", "{}"),), "Only Ada can decide.")
    assert is_reply(None) and is_reply([{"type": "rich_text", "block_id": "x1", "elements": []}])
    assert is_reply(reply_blocks("hello", "run1"))
    assert not is_reply(card_message(card)[1])
    assert not is_reply(control_blocks("run1"))
