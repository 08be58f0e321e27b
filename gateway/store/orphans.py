"""What a restarted run needs to find a post its killed process made but never recorded.

A reply's first post is recorded right after the platform answers; a process killed between
the two leaves a post no delivery row names. The run, queued again, looks on the platform for
the bot's own posts after its person's message that no reply of the conversation recorded.
A run resumed after an approval card answers below the card: what it posted there before a kill
(recorded or not) is continued the same way, and only the posts above the card are left alone.
"""

from __future__ import annotations

from sqlalchemy import func, select

from gateway.store.models import ApprovalCardRow, Delivery, Message, Run
from gateway.store.repo import Store


async def recovery_marks(store: Store, run_id: str) -> tuple[str | None, set[str]]:
    """The platform id of the run's newest user message, and every platform message id the
    conversation's replies and approval cards recorded."""
    async with store.sessions() as s:
        after = await s.scalar(
            select(Message.platform_message_id)
            .where(Message.run_id == run_id, Message.role == "user")
            .order_by(Message.id.desc()).limit(1)
        )
        conversation = select(Run.conversation_id).where(Run.id == run_id).scalar_subquery()
        known = await s.scalars(
            select(Delivery.platform_message_id)
            .join(Run, Run.id == Delivery.run_id)
            .where(Run.conversation_id == conversation, Delivery.platform_message_id.is_not(None))
        )
        # An approval card once decided shows no buttons, and looks like any other post of ours.
        cards = await s.scalars(select(ApprovalCardRow.card_ref).where(
            ApprovalCardRow.conversation_id == conversation, ApprovalCardRow.card_ref.is_not(None)))
        return after, {k for k in [*known, *cards] if k}


async def rows_above_card(store: Store, run_id: str) -> int | None:
    """How many of a resumed run's delivery rows are above its latest approval card (written before
    the card, which the run creates once what it said so far is final); None without a card. The
    rows after them are the answer below the card that an interrupted try of the resume posted."""
    async with store.sessions() as s:
        card_at = await s.scalar(select(func.max(ApprovalCardRow.created_at)).where(ApprovalCardRow.run_id == run_id))
        if card_at is None:
            return None
        return int(await s.scalar(select(func.count()).select_from(Delivery).where(
            Delivery.run_id == run_id, Delivery.updated_at <= card_at)) or 0)
