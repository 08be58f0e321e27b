"""ApprovalCard -> a Mattermost post: Markdown text plus interactive buttons. Pure.

Buttons are interactive actions whose context is signed (`adapters/mattermost/actions.py`: the one
signature and check every button of ours shares, and why a click is also vouched for by the server).

Without a public URL the server cannot reach us, so the card asks for a reaction instead
(👍 approves, 👎 denies every pending call on the card).

A post's message is at most 16,383 characters, its props far more: a call whose arguments do not fit
the message shows their head, says how much more there is, and the whole text is in an attachment of
the post ("All arguments of …"), buttons or not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.inbound.memory_card import MemoryButton, MemoryCard
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState

from . import actions

APPROVE_EMOJI = frozenset({"+1", "thumbsup"})
DENY_EMOJI = frozenset({"-1", "thumbsdown"})

MAX_MESSAGE = 16_383  # a post's message, in characters
MAX_ARGUMENTS_ATTACHMENT = 700_000  # of the 800,000 a post's props may hold, what one call's full text may take

_STATE_LINE = {
    ItemState.PENDING: "⏳ waiting for a decision",
    ItemState.APPROVED: "✅ Approved",
    ItemState.DENIED: "❌ Denied",
    ItemState.EXPIRED: "⌛ Expired",
}


def _who(item: ApprovalItem) -> str:
    """A delegate's call says who asked (its headline, with the tool name kept as code)."""
    return f"{item.delegate} wants to run " if item.delegate else ""


def _per_item(card: ApprovalCard) -> int:
    """The characters of arguments each call may show in the message, so the post stays under the limit."""
    fixed = 600 + len(card.deciders) + len(card.note) + sum(len(i.tool_name) + len(i.capability) + 200 for i in card.items)
    return max(200, (MAX_MESSAGE - fixed) // max(1, len(card.items)))


def _cut(item: ApprovalItem, card: ApprovalCard) -> int:
    """How many characters of the call's arguments the message cannot show (0: all of them fit)."""
    return max(0, len(item.arguments) - _per_item(card))


def _fenced(text: str) -> str:
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}json\n{text}\n{fence}"


def card_message(card: ApprovalCard, *, by_reaction: bool) -> str:
    """The card's text, Markdown as Mattermost renders it. The whole state lives here, so the
    post still says what happened once the buttons are gone."""
    lines = ["#### Approval needed" if card.pending else "#### Approval"]
    for item in card.items:
        lines.append("")
        lines.append(f"**{_who(item)}`{item.tool_name}`** ({item.capability}) · {_state(item)}")
        if item.arguments:
            hidden = _cut(item, card)
            lines.append(_fenced(item.arguments[: len(item.arguments) - hidden]))
            if hidden:
                lines.append(f"_…and {hidden:,} more characters: every argument is in the attachment "
                             f"“All arguments of {item.tool_name}” below._")
    lines.append("")
    if card.pending:
        lines.append(f"_{card.deciders}_")
        if by_reaction:
            lines.append("React with :+1: to approve or :-1: to deny every call on this card.")
    if card.note:
        lines.append(card.note)
    return "\n".join(lines).rstrip()


def arguments_attachments(card: ApprovalCard) -> list[dict[str, Any]]:
    """One attachment with the whole text of each call the message shows only the head of."""
    out = []
    for item in card.items:
        if not _cut(item, card):
            continue
        text = item.arguments[:MAX_ARGUMENTS_ATTACHMENT]
        more = len(item.arguments) - len(text)
        out.append({"fallback": f"All arguments of {item.tool_name}", "title": f"All arguments of {item.tool_name}",
                    "text": _fenced(text) + (f"\n_…and {more:,} more characters: too many for a Mattermost post. A "
                                             f"decider can read them all at GET /api/v1/approvals/{item.approval_id} "
                                             "on the gateway._" if more else "")})
    return out


def card_props(card: ApprovalCard, *, url: str | None, key: bytes | None, binding_id: str,
               channel_id: str) -> dict[str, Any]:
    """`props`: the full text of arguments the message cuts, then (with an action URL) one attachment of
    Approve / Deny per pending call and an "approve all"; `{}` when there is neither, which removes the
    buttons from the post."""
    attachments = arguments_attachments(card)
    pending = [(i, item) for i, item in enumerate(card.items, start=1) if item.state is ItemState.PENDING]
    if not pending or url is None or key is None:
        return {"attachments": attachments} if attachments else {}

    def button(action_id: str, name: str, style: str, approval_id: str, decision: Decision) -> dict[str, Any]:
        # Action ids are letters and digits only: anything else is refused before we are called.
        signed = actions.context(key, "approval", binding_id=binding_id, channel_id=channel_id,
                                 approval_id=approval_id, decision=decision.value)
        return {"id": action_id, "type": "button", "name": name, "style": style,
                "integration": {"url": url, "context": signed}}

    for i, item in pending:
        attachments.append({
            "fallback": f"Approve {item.tool_name}?",
            "color": "#f0ad4e",
            "text": f"`{item.tool_name}`" if len(pending) > 1 else "",
            "actions": [
                button(f"approve{i}", "Approve", "primary", item.approval_id, Decision.APPROVE),
                button(f"deny{i}", "Deny", "danger", item.approval_id, Decision.DENY),
            ],
        })
    attachments.append({
        "fallback": "Approve all in this conversation",
        "actions": [button("approveall", "Approve all in this conversation", "default", card.card_id, Decision.APPROVE_ALL)],
    })
    return {"attachments": attachments}


def reaction_decision(emoji_name: str) -> Decision | None:
    if emoji_name in APPROVE_EMOJI:
        return Decision.APPROVE
    if emoji_name in DENY_EMOJI:
        return Decision.DENY
    return None


def _state(item: ApprovalItem) -> str:
    text = _STATE_LINE[item.state]
    if item.decided_by and item.state in (ItemState.APPROVED, ItemState.DENIED):
        text += f" by {item.decided_by}"
    return text


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


# --- /memory cards ------------------------------------------------------------------------


def memory_message(card: MemoryCard) -> str:
    """The card's text; the buttons are in `memory_props`, one attachment a note, in the same order."""
    lines = [f"#### {card.title}"]
    lines += [f"{n}. `{line.label}`{'' if line.in_use else ' ⛔'}: {line.detail}" for n, line in enumerate(card.lines, 1)]
    lines += [f"\n{p}" for p in (card.status, f"_{card.footer}_" if card.footer else "") if p]
    return "\n".join(lines)


def memory_props(card: MemoryCard, *, url: str, key: bytes, binding_id: str, channel_id: str) -> dict[str, Any]:
    def button(action_id: str, b: MemoryButton) -> dict[str, Any]:
        context = actions.context(key, "memory", binding_id=binding_id, channel_id=channel_id, memory=b.data)
        return {"id": action_id, "type": "button", "name": b.label, "style": _STYLES.get(b.style, "default"),
                "integration": {"url": url, "context": context}}

    attachments = [{"fallback": line.label, "text": f"{n}. `{line.label}`",
                    "actions": [button(f"mem{n}x{k}", b) for k, b in enumerate(line.buttons)]}
                   for n, line in enumerate(card.lines, 1) if line.buttons]
    if card.actions:
        attachments.append({"fallback": "Erase all", "actions": [button(f"memall{k}", b) for k, b in enumerate(card.actions)]})
    return {"attachments": attachments}


_STYLES = {"primary": "primary", "danger": "danger"}


def is_card(post: Mapping[str, Any]) -> bool:
    """Whether a post carries approval buttons: any action but a streaming reply's Stop
    (`integration` is stripped from posts read back, so the action ids tell them apart)."""
    props = post.get("props")
    attachments = props.get("attachments") if isinstance(props, Mapping) else None
    if not isinstance(attachments, list):
        return False
    return any(isinstance(a, Mapping) and isinstance(action, Mapping) and action.get("id") != "stop"
               for a in attachments for action in (a.get("actions") or [] if isinstance(a, Mapping) else []))
