"""Approval cards as a Telegram message with an inline keyboard, and the buttons' data.

A button's `callback_data` is `a:<approval_id>`, `d:<approval_id>` or `all:<card_id>`: the
decision and the unguessable id the core issued, nothing else (Telegram caps it at 64 bytes,
and a click carries it back verbatim, so it must not need a lookup table of our own). Everyone in
the chat can read it; that is harmless, since the core asks the card's deciders about whoever
presents it, on every surface. A call whose arguments do not fit the message shows their head,
says how much more there is, and gets a "Show all" button (`s:<approval_id>`) answered with the
whole text in as many messages as it takes (`arguments_messages`).
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from gateway.inbound.memory_card import MemoryCard
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState

from .render import escape

MAX_CALLBACK_BYTES = 64
MAX_TEXT = 4096
_PREFIX = {Decision.APPROVE: "a", Decision.DENY: "d", Decision.APPROVE_ALL: "all"}
_DECISION = {prefix: decision for decision, prefix in _PREFIX.items()}
_STATE_LINE = {
    ItemState.PENDING: "⏳ waiting for a decision",
    ItemState.APPROVED: "✅ Approved",
    ItemState.DENIED: "❌ Denied",
    ItemState.EXPIRED: "⌛ Expired",
}
_TRUNCATED = "\n… (truncated)"
SHOW_PREFIX = "s:"
_PRE = len("<pre></pre>")


def callback_data(decision: Decision, target_id: str) -> str:
    data = f"{_PREFIX[decision]}:{target_id}"
    if len(data.encode()) > MAX_CALLBACK_BYTES:
        raise ValueError(f"callback data for {decision} is {len(data.encode())} bytes; Telegram allows 64")
    return data


def parse_callback_data(data: str | None) -> tuple[Decision, str] | None:
    """The decision and id a button carries, or None for data that is not one of ours."""
    prefix, sep, target_id = (data or "").partition(":")
    decision = _DECISION.get(prefix)
    if not sep or decision is None or not target_id:
        return None
    return decision, target_id


def parse_show_data(data: str | None) -> str | None:
    """The approval id a "Show all" button carries, or None."""
    return data[len(SHOW_PREFIX):] or None if data and data.startswith(SHOW_PREFIX) else None


def _per_item(card: ApprovalCard) -> int:
    """The characters of escaped arguments each call's <pre> may take, so the card stays under 4,096."""
    budget = MAX_TEXT - 200 - sum(len(i.headline) + len(i.capability) + 140 for i in card.items)
    budget -= len(card.deciders) + len(card.note)
    return max(40, budget // max(1, len(card.items)))


def _head(text: str, limit: int) -> str:
    """The longest head of `text` whose escaped form fits `limit`."""
    head = text[:limit]
    while len(escape(head)) > limit:  # shrink in proportion to how much escaping grew it
        head = head[: min(len(head) - 1, len(head) * limit // len(escape(head)))]
    return head


def _hidden(item: ApprovalItem, card: ApprovalCard) -> int:
    """How many characters of the call's arguments the card cannot show (0: all of them fit)."""
    return len(item.arguments) - len(_head(item.arguments, _per_item(card)))


def card_html(card: ApprovalCard) -> str:
    """The card's text: each call with its arguments, its state, and who may decide.

    Arguments come whole from the core; a call whose arguments would take the card past
    Telegram's 4,096 characters shows their head and says how much more "Show all" sends.
    """
    title = "🔐 <b>Approval needed</b>" if card.pending else "🔐 <b>Approval</b>"
    fixed = [title]
    per_item = _per_item(card)
    for n, item in enumerate(card.items, 1):
        number = f"{n}. " if len(card.items) > 1 else ""
        fixed.append(f"\n{number}<b>{escape(item.headline)}</b> <i>({escape(item.capability)})</i>")
        if item.arguments.strip():
            head = _head(item.arguments, per_item)
            fixed.append(f"<pre>{escape(head)}</pre>")
            if len(head) < len(item.arguments):
                fixed.append(f"<i>…and {len(item.arguments) - len(head):,} more characters: press “Show all” "
                             "to read every argument.</i>")
        fixed.append(_state(item))
    if card.pending and card.deciders:
        fixed.append(f"\n<i>{escape(_sentence(card.deciders))}</i>")
    if card.note:
        fixed.append(f"\n{escape(card.note)}")
    return "\n".join(fixed)


def card_keyboard(card: ApprovalCard) -> InlineKeyboardMarkup:
    """Approve / Deny per pending call, and "approve all" when anything is pending.

    An empty keyboard once nothing is pending: the edit then removes the buttons.
    """
    pending = [i for i in card.items if i.state is ItemState.PENDING]
    rows: list[list[InlineKeyboardButton]] = []
    for item in pending:
        label = _short(item.tool_name) if len(card.items) > 1 else ""
        rows.append([
            InlineKeyboardButton(f"✅ Approve {label}".rstrip(), callback_data=callback_data(Decision.APPROVE, item.approval_id)),
            InlineKeyboardButton(f"❌ Deny {label}".rstrip(), callback_data=callback_data(Decision.DENY, item.approval_id)),
        ])
    if pending:
        rows.append([InlineKeyboardButton("✅ Approve all in this conversation",
                                          callback_data=callback_data(Decision.APPROVE_ALL, card.card_id))])
    for item in card.items:
        if _hidden(item, card):
            label = f" {_short(item.tool_name)}" if len(card.items) > 1 else " arguments"
            rows.append([InlineKeyboardButton(f"📄 Show all{label}", callback_data=_show_data(item.approval_id))])
    return InlineKeyboardMarkup(rows)


def _show_data(approval_id: str) -> str:
    data = SHOW_PREFIX + approval_id
    if len(data.encode()) > MAX_CALLBACK_BYTES:
        raise ValueError(f"callback data for show is {len(data.encode())} bytes; Telegram allows 64")
    return data


def arguments_messages(item: ApprovalItem) -> list[str]:
    """Every argument of one call, as HTML messages each under 4,096 characters. Each opens with a line
    saying which part it is (Telegram refuses a message that is only whitespace, and a long value can be)."""
    name = escape(_short(item.headline, 200))
    room = MAX_TEXT - _PRE - len(name) - 60  # the header line: "📄 All arguments of <name> (part n of m)"
    heads, rest = [], item.arguments or "{}"
    while rest:
        heads.append(_head(rest, room))
        rest = rest[len(heads[-1]):]
    return [f"📄 <b>All arguments of {name}</b> (part {n} of {len(heads)})\n<pre>{escape(head)}</pre>"
            for n, head in enumerate(heads, 1)]


def _state(item: ApprovalItem) -> str:
    line = _STATE_LINE[item.state]
    if item.decided_by and item.state in (ItemState.APPROVED, ItemState.DENIED):
        line += f" by {item.decided_by}"
    return escape(line)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(_TRUNCATED))] + _TRUNCATED


def _short(name: str, limit: int = 24) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


# --- /memory cards ------------------------------------------------------------------------

MEMORY_PREFIX = "m."  # `m.s:1f.a3b4c5`: the core's data behind a prefix no approval button has


def memory_callback(data: str) -> str:
    out = MEMORY_PREFIX + data
    if len(out.encode()) > MAX_CALLBACK_BYTES:
        raise ValueError(f"memory callback data is {len(out.encode())} bytes; Telegram allows 64")
    return out


def parse_memory_data(data: str | None) -> str | None:
    """The core's data when this is a memory button's callback, else None."""
    return data[len(MEMORY_PREFIX):] if data and data.startswith(MEMORY_PREFIX) else None


def memory_html(card: MemoryCard) -> str:
    out = [f"🗒 <b>{escape(card.title)}</b>"]
    for n, line in enumerate(card.lines, 1):
        state = "" if line.in_use else " ⛔"
        out.append(f"{n}. <code>{escape(line.label)}</code>{state}\n    <i>{escape(line.detail)}</i>")
    if card.status:
        out.append(f"\n{escape(card.status)}")
    if card.footer:
        out.append(f"\n<i>{escape(card.footer)}</i>")
    return _cut("\n".join(out), MAX_TEXT)


def memory_keyboard(card: MemoryCard) -> InlineKeyboardMarkup:
    """One row a note (numbered as in the text), then "erase all" or its confirmation."""
    rows = [[InlineKeyboardButton(f"{n}. {b.label}", callback_data=memory_callback(b.data)) for b in line.buttons]
            for n, line in enumerate(card.lines, 1) if line.buttons]
    if card.actions:
        rows.append([InlineKeyboardButton(b.label, callback_data=memory_callback(b.data)) for b in card.actions])
    return InlineKeyboardMarkup(rows)
