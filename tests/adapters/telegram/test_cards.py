"""Approval cards: callback data fits Telegram's 64 bytes, text stays inside 4,096 characters."""

from __future__ import annotations

import secrets

import pytest

from adapters.telegram.cards import callback_data, card_html, card_keyboard, parse_callback_data
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState
from tests.fakes.telegram import parse_html


def _card(*states: ItemState, args: str = '{\n  "path": "/tmp/x"\n}') -> ApprovalCard:
    items = tuple(
        ApprovalItem(approval_id=secrets.token_urlsafe(16), tool_name=f"write_file_{n}", capability="files",
                     arguments=args, state=state, decided_by="Ada" if state is not ItemState.PENDING else None)
        for n, state in enumerate(states)
    )
    return ApprovalCard(card_id=secrets.token_urlsafe(16), run_id="r1", items=items, deciders="only Ada can decide")


def test_buttons_carry_the_decision_and_the_id_within_64_bytes() -> None:
    card = _card(ItemState.PENDING, ItemState.APPROVED)
    rows = card_keyboard(card).inline_keyboard
    data = [b.callback_data for row in rows for b in row]
    assert data == [f"a:{card.items[0].approval_id}", f"d:{card.items[0].approval_id}", f"all:{card.card_id}"]
    assert all(len(str(d).encode()) <= 64 for d in data)
    assert [parse_callback_data(str(d)) for d in data] == [
        (Decision.APPROVE, card.items[0].approval_id), (Decision.DENY, card.items[0].approval_id),
        (Decision.APPROVE_ALL, card.card_id)]


def test_an_id_too_long_for_telegram_is_refused_not_truncated() -> None:
    with pytest.raises(ValueError, match="64"):
        callback_data(Decision.APPROVE_ALL, "x" * 61)


def test_decided_card_has_no_buttons_and_says_who() -> None:
    card = _card(ItemState.APPROVED, ItemState.DENIED)
    assert card_keyboard(card).inline_keyboard == ()
    text = parse_html(card_html(card))
    assert "✅ Approved by Ada" in text and "❌ Denied by Ada" in text
    assert "only Ada can decide" not in text.lower()


def test_pending_card_text_is_valid_html_within_the_limit() -> None:
    card = _card(ItemState.PENDING, ItemState.PENDING, args="<script>&" * 2000)
    visible = parse_html(card_html(card))
    assert len(visible) <= 4096
    assert "more characters: press “Show all”" in visible and "Only Ada can decide." in visible
    assert "<script>&" in visible  # escaped on the way out, intact for the reader
