"""Approval cards as Block Kit: what the card shows, what the buttons carry, Slack's limits."""

from __future__ import annotations

import json

import pytest

from adapters.slack.cards import MAX_ITEMS, card_message, parse_action_value
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState


def card(*items: ApprovalItem, deciders: str = "only Ada can decide", note: str = "") -> ApprovalCard:
    return ApprovalCard(card_id="card-Zx9", run_id="run-1", items=items, deciders=deciders, note=note)


def item(n: int = 1, **kw: object) -> ApprovalItem:
    fields: dict[str, object] = {"approval_id": f"appr-{n}", "tool_name": f"send_mail_{n}", "capability": "mail", "arguments": '{\n  "to": "bob@x.test"\n}'}
    fields.update(kw)
    return ApprovalItem(**fields)  # type: ignore[arg-type]


def buttons(blocks: list[dict]) -> list[dict]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_pending_card_shows_tool_args_deciders_and_buttons() -> None:
    text, blocks = card_message(card(item(1), item(2)))
    assert text == "Approval needed: send_mail_1, send_mail_2"
    rendered = json.dumps(blocks)
    assert "*send_mail_1*" in rendered and "bob@x.test" in rendered and "only Ada can decide" in rendered
    values = [b["value"] for b in buttons(blocks)]
    assert values == ["approve:appr-1", "deny:appr-1", "approve:appr-2", "deny:appr-2", "approve_all:card-Zx9"]
    action_ids = [b["action_id"] for b in buttons(blocks)]
    assert len(set(action_ids)) == len(action_ids)  # Slack requires unique action ids in a message
    assert all(a.startswith("gw_") for a in action_ids)


def test_decided_card_has_no_buttons_and_says_who() -> None:
    decided = card(item(1, state=ItemState.APPROVED, decided_by="Ada"), item(2, state=ItemState.DENIED, decided_by="Ada"))
    text, blocks = card_message(decided)
    assert buttons(blocks) == []
    rendered = json.dumps(blocks)
    assert "Approved by Ada" in rendered and "Denied by Ada" in rendered
    assert text.startswith("Approval decided")


def test_partly_decided_card_keeps_the_pending_buttons_only() -> None:
    _, blocks = card_message(card(item(1, state=ItemState.APPROVED, decided_by="Ada"), item(2)))
    assert [b["value"] for b in buttons(blocks)] == ["approve:appr-2", "deny:appr-2", "approve_all:card-Zx9"]


def test_expired_card_with_note() -> None:
    _, blocks = card_message(card(item(1, state=ItemState.EXPIRED), note="Expired after 24 h"))
    rendered = json.dumps(blocks)
    assert "Expired" in rendered and "Expired after 24 h" in rendered and buttons(blocks) == []


def test_limits_long_arguments_and_many_items() -> None:
    long_args = "x" * 10_000
    _, blocks = card_message(card(*(item(n, arguments=long_args) for n in range(40))))
    assert len(blocks) <= 50
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section")
    assert "more characters not shown here" in json.dumps(blocks)
    assert len([b for b in buttons(blocks) if b["value"].startswith("approve:")]) == MAX_ITEMS
    assert "18 more" in json.dumps(blocks)


def test_markup_in_tool_text_is_escaped() -> None:
    _, blocks = card_message(card(item(1, arguments='{"q": "<!channel> & <@U1>"}')))
    rendered = json.dumps(blocks)
    assert "<!channel>" not in rendered and "&lt;!channel&gt; &amp; &lt;@U1&gt;" in rendered


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("approve:abc", (Decision.APPROVE, "abc")),
        ("deny:abc", (Decision.DENY, "abc")),
        ("approve_all:card-1", (Decision.APPROVE_ALL, "card-1")),
        ("approve:", None),
        ("maybe:abc", None),
        ("click_me_123", None),
        ("", None),
    ],
)
def test_parse_action_value(value: str, parsed: tuple[Decision, str] | None) -> None:
    assert parse_action_value(value) == parsed
