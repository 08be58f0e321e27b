"""What was said in one conversation, read-only, for the tools of a run in it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from .models import Message


class ConversationLog:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], conversation_id: str) -> None:
        self._sessions, self.conversation_id = sessions, conversation_id

    async def has_platform_message(self, platform_message_id: str) -> bool:
        """Whether a message with this platform id was received in this conversation."""
        async with self._sessions() as s:
            found = await s.scalar(select(Message.id).where(
                Message.conversation_id == self.conversation_id,
                Message.platform_message_id == platform_message_id).limit(1))
        return found is not None
