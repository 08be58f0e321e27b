"""Approval cards as Block Kit, and the button values that come back. Pure.

A button carries only `decision:id`, the id being the core's unguessable approval id (or the
card id for "approve all"): nothing in a click can name a different call or forge a decision
the core would not check anyway.
"""

from __future__ import annotations

from typing import Any

from gateway.inbound.memory_card import MemoryButton, MemoryCard
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState

from .render import escape

ACTION_PREFIX = "gw_"  # action ids of our buttons; any other block action is acked and ignored
MAX_ITEMS = 22  # Slack allows 50 blocks: 2 per call, plus the header, "approve all" and context
MAX_ARGS_CHARS = 2_500  # a section's text is capped at 3,000 characters
_TRUNCATED = "\n… (truncated)"

_STATE_LINE = {
    ItemState.APPROVED: ":white_check_mark: Approved",
    ItemState.DENIED: ":no_entry: Denied",
    ItemState.EXPIRED: ":hourglass: Expired",
}


def card_message(card: ApprovalCard) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks). Decided items show who decided; their buttons are gone."""
    items = card.items[:MAX_ITEMS]
    names = ", ".join(dict.fromkeys(i.headline for i in card.items))
    pending = card.pending
    title = f"Approval needed: {names}" if pending else f"Approval decided: {names}"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "block_id": "gw_head", "text": {"type": "mrkdwn", "text": f":raised_hand: *{escape(title)}*"}}
    ]
    for n, item in enumerate(items):
        blocks.append({"type": "section", "block_id": f"gw_call_{n}", "text": {"type": "mrkdwn", "text": _item_text(item)}})
        if item.state is ItemState.PENDING:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"gw_buttons_{n}",
                    "elements": [
                        _button(f"gw_approve_{n}", "Approve", f"{Decision.APPROVE}:{item.approval_id}", "primary"),
                        _button(f"gw_deny_{n}", "Deny", f"{Decision.DENY}:{item.approval_id}", "danger"),
                    ],
                }
            )
    if len(card.items) > MAX_ITEMS:
        more = len(card.items) - MAX_ITEMS
        blocks.append(_context(f"…and {more} more call(s) not shown: use “Approve all” or the web chat to decide them."))
    if pending:
        approve_all = _button("gw_approve_all", "Approve all in this conversation", f"{Decision.APPROVE_ALL}:{card.card_id}")
        approve_all["confirm"] = {
            "title": {"type": "plain_text", "text": "Approve all?"},
            "text": {"type": "mrkdwn", "text": "Every tool call in this conversation will run without asking, until switched off."},
            "confirm": {"type": "plain_text", "text": "Approve all"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        }
        blocks.append({"type": "actions", "block_id": "gw_all", "elements": [approve_all]})
    footer = " · ".join(p for p in (card.deciders, card.note) if p)
    if footer:
        blocks.append(_context(footer))
    return title, blocks


def parse_action_value(value: str) -> tuple[Decision, str] | None:
    """`approve:<id>` → (APPROVE, id); None for anything that is not one of our values."""
    head, sep, ident = value.partition(":")
    if not sep or not ident:
        return None
    try:
        return Decision(head), ident
    except ValueError:
        return None


def _item_text(item: ApprovalItem) -> str:
    args = item.arguments
    if len(args) > MAX_ARGS_CHARS:
        args = args[: MAX_ARGS_CHARS - len(_TRUNCATED)] + _TRUNCATED
    text = f"*{escape(item.headline)}*  _{escape(item.capability)}_"
    if args.strip():
        text += f"\n```{escape(args)}```"
    if item.state in _STATE_LINE:
        by = f" by {escape(item.decided_by)}" if item.decided_by else ""
        text += f"\n{_STATE_LINE[item.state]}{by}"
    return text


def _button(action_id: str, label: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {"type": "button", "action_id": action_id, "text": {"type": "plain_text", "text": label}, "value": value}
    if style:
        button["style"] = style
    return button


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": escape(text)}]}


# --- /memory cards ------------------------------------------------------------------------

MEMORY_ACTION_PREFIX = "gw_mem_"  # before ACTION_PREFIX's approval parsing: a memory button's value is the core's data


def memory_message(card: MemoryCard) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks): a section and a row of buttons per note, then "erase all" (or its question)."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "block_id": "gw_mem_head", "text": {"type": "mrkdwn", "text": f":memo: *{escape(card.title)}*"}}
    ]
    for n, line in enumerate(card.lines):
        state = "" if line.in_use else "  :no_entry_sign:"
        blocks.append({"type": "section", "block_id": f"gw_mem_note_{n}",
                       "text": {"type": "mrkdwn", "text": f"`{escape(line.label)}`{state}\n{escape(line.detail)}"}})
        if line.buttons:
            blocks.append({"type": "actions", "block_id": f"gw_mem_buttons_{n}", "elements": [
                _memory_button(f"{n}_{k}", b) for k, b in enumerate(line.buttons)]})
    if card.status:
        blocks.append({"type": "section", "block_id": "gw_mem_status", "text": {"type": "mrkdwn", "text": escape(card.status)}})
    if card.actions:
        blocks.append({"type": "actions", "block_id": "gw_mem_all", "elements": [
            _memory_button(f"all_{k}", b) for k, b in enumerate(card.actions)]})
    if card.footer:
        blocks.append(_context(card.footer))
    return card.title, blocks


def _memory_button(suffix: str, button: MemoryButton) -> dict[str, Any]:
    return _button(f"{MEMORY_ACTION_PREFIX}{suffix}", button.label, button.data, button.style or None)
