"""What a card in the chat says and how it reaches the chat, apart from what its answers do.

The service (`gateway.approvals.service`) parks a run, takes decisions and resumes it; this module
holds the presentation: the card built from its stored rows (each gated call with the arguments a
decider reads, `arguments.shown`), the footer naming who may answer, the note a closed card carries,
what a person reads when their click is refused or comes too late, and posting and refreshing a card
through the adapter (each adapter's `cards.py` draws the buttons). Only `approval_card` is about
approvals: the sentences and `post`/`refresh` take no approval type beyond the contract's card, so a
second kind of card asked under the same deciders rule (a question with a reply, accept or decline)
says who may answer and what became of it in the same words.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gateway.outbound.adapter import Adapter, ApprovalCard, ApprovalItem, ItemState, ReplyTarget
from gateway.outbound.orphans import unrecorded_card
from gateway.store.models import ApprovalCardRow, ApprovalRow, Run

log = logging.getLogger("gateway.approvals.cards")

ANYONE = "Anyone in this chat"

# The note of a card closed without a decision on every item, by the card's stored state.
CLOSED_NOTES = {
    "expired": "Expired: nobody decided in time.",
    "stopped": "Closed: the run was stopped.",
    "replaced": "Replaced: the run was interrupted and asked again.",
}


def who_decides(deciders: Any, requester_name: str) -> str:
    """The subject of every "… can decide" sentence: a binding's `deciders` ("channel", "requester" or
    a list of names) said as people read it."""
    if deciders == "channel":
        return ANYONE
    if deciders == "requester":
        return f"Only {requester_name or 'the person who asked'}"
    return f"Only {', '.join(deciders)}"


def deciders_text(deciders: Any, requester_name: str) -> str:
    """A card's footer: who may answer it."""
    return f"{who_decides(deciders, requester_name)} can decide."


def refusal(deciders: Any, requester_name: str) -> str:
    """What someone who may not answer a card reads (the clicker alone, or the API client)."""
    if deciders == "channel":  # anyone in the chat may: the platform does not say this person is
        return not_in_chat("decide this")
    return f"{who_decides(deciders, requester_name)} can decide this."


def not_in_chat(what: str) -> str:
    """Why someone `deciders: channel` would let act may not: the platform does not confirm they are in
    the chat now (they left, or it could not be asked)."""
    return (f"Only someone in this chat can {what}, and the chat platform does not confirm you are in it now "
            "(or could not be asked; try again in a minute).")


def too_late(state: str | None, decided_by: str | None) -> str:
    """What a click on something already decided reads: `state` is the item's (None: nothing found)."""
    if state is None or state == ItemState.PENDING.value:
        return "Nothing left to decide here."
    if state == ItemState.EXPIRED.value:
        return "This request expired before anyone decided."
    return f"Already {state} by {decided_by}."


def approval_card(row: ApprovalCardRow, items: list[ApprovalRow], run: Run | None) -> ApprovalCard:
    """The card as every adapter draws it, from its stored rows: each call whole (arguments as the
    decider reads them), who decided what, who may decide, and why it closed."""
    return ApprovalCard(
        card_id=row.id,
        run_id=row.run_id,
        items=tuple(
            ApprovalItem(approval_id=i.id, tool_name=i.tool_name, capability=i.capability, arguments=i.arguments,
                         state=ItemState(i.state), decided_by=i.decided_by, delegate=i.delegate)
            for i in items
        ),
        deciders=deciders_text(json.loads(row.deciders), run.requester_name if run else ""),
        note=CLOSED_NOTES.get(row.state, ""),
    )


async def post(adapter: Adapter, target: ReplyTarget, card: ApprovalCard, *, recovering: bool = False) -> str | None:
    """Post `card` and return where it is; None when the post failed (the caller's sweep tries again).

    `recovering`: a dead process may have posted it and died before recording where, so look first.
    """
    try:
        ref = await unrecorded_card(adapter, target, card) if recovering else None
        return ref if ref is not None else await adapter.post_card(target, card)
    except Exception as e:
        log.warning("could not post approval card %s: %s", card.card_id, e)
        return None


async def refresh(adapter: Adapter, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
    """Redraw a posted card after a decision; a failure is logged, the decision stands regardless."""
    try:
        await adapter.update_card(target, card_ref, card)
    except Exception as e:
        log.warning("could not update approval card %s: %s", card.card_id, e)
