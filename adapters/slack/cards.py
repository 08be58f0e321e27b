"""Approval cards as Block Kit, and the button values that come back. Pure.

A button carries only `decision:id`, the id being the core's unguessable approval id (or the
card id for "approve all"): everyone in the channel can read it, and nothing in a click can name a
different call or forge a decision the core would not check anyway (the card's deciders apply to
whoever clicks, on every surface). Arguments too long for a section show their head, say how much
more there is, and get a "Show all arguments" button (`show:<id>`) that opens a modal with all of
them (`arguments_view`).
"""

from __future__ import annotations

from typing import Any

from gateway.inbound.memory_card import MemoryButton, MemoryCard
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState

from .render import escape

ACTION_PREFIX = "gw_"  # action ids of our buttons; any other block action is acked and ignored
MAX_ITEMS = 22  # Slack allows 50 blocks: 2 per call, plus the header, "approve all" and context
MAX_ARGS_CHARS = 2_500  # a section's text is capped at 3,000 characters
SHOW_ACTION_PREFIX = "gw_show_"  # "Show all arguments": opens a modal, decides nothing
SHOW_PREFIX = "show:"
MODAL_BLOCKS = 100  # Slack's limit on a modal's blocks
SECTION_CHARS = 3_000

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
        elements = []
        if item.state is ItemState.PENDING:
            elements += [_button(f"gw_approve_{n}", "Approve", f"{Decision.APPROVE}:{item.approval_id}", "primary"),
                         _button(f"gw_deny_{n}", "Deny", f"{Decision.DENY}:{item.approval_id}", "danger")]
        if _cut(item) is not None:
            elements.append(_button(f"{SHOW_ACTION_PREFIX}{n}", "Show all arguments", f"{SHOW_PREFIX}{item.approval_id}"))
        if elements:
            blocks.append({"type": "actions", "block_id": f"gw_buttons_{n}", "elements": elements})
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


def parse_show_value(value: str) -> str | None:
    """`show:<id>` → id; None for any other value."""
    return value[len(SHOW_PREFIX):] or None if value.startswith(SHOW_PREFIX) else None


def _cut(item: ApprovalItem) -> tuple[str, int] | None:
    """(the head shown, how many characters are not) when the arguments do not fit a section; else None."""
    head = _fitting(item.arguments, MAX_ARGS_CHARS)
    return None if len(head) == len(item.arguments) else (head, len(item.arguments) - len(head))


def _fitting(text: str, limit: int) -> str:
    """The longest head of `text` whose escaped form fits `limit` (escaping makes `&<>` longer)."""
    head = text[:limit]
    while len(escape(head)) > limit:  # shrink in proportion to how much escaping grew it
        head = head[: min(len(head) - 1, len(head) * limit // len(escape(head)))]
    return head


def _item_text(item: ApprovalItem) -> str:
    cut = _cut(item)
    args = cut[0] if cut else item.arguments
    text = f"*{escape(item.headline)}*  _{escape(item.capability)}_"
    if args.strip():
        text += f"\n```{escape(args)}```"
    if cut:
        text += f"\n_…and {cut[1]:,} more characters not shown here: press “Show all arguments” to read them all._"
    if item.state in _STATE_LINE:
        by = f" by {escape(item.decided_by)}" if item.decided_by else ""
        text += f"\n{_STATE_LINE[item.state]}{by}"
    return text


def arguments_view(item: ApprovalItem) -> dict[str, Any]:
    """A modal (views.open) with every argument of one call, in as many sections as it takes; past a
    modal's 100 blocks it says how much is left and where to read it."""
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{escape(item.headline)}*"}}]
    rest = item.arguments
    while rest and len(blocks) < MODAL_BLOCKS - 1:
        piece = _fitting(rest, SECTION_CHARS - 6)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{escape(piece)}```"}})
        rest = rest[len(piece):]
    if rest:
        blocks.append(_context(f"…and {len(rest):,} more characters: too many for Slack to show. A decider can read "
                               f"them all at GET /api/v1/approvals/{item.approval_id} on the gateway."))
    return {"type": "modal", "title": {"type": "plain_text", "text": "All arguments"},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": blocks}


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
