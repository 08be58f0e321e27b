"""What a restarted run needs to find a post its killed process made but never recorded.

A reply's first post is recorded right after the platform answers; a process killed between
the two leaves a post no delivery row names. The run, queued again, looks on the platform for
the bot's own posts after its person's message that no reply of the conversation recorded.
"""

from __future__ import annotations

from sqlalchemy import select

from .models import Delivery, Message, Run
from .repo import Store


async def recovery_marks(store: Store, run_id: str) -> tuple[str | None, set[str]]:
    """The platform id of the run's newest user message, and every platform message id the
    conversation's replies recorded."""
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
        return after, {k for k in known if k}
