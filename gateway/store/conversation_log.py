"""What was said in one conversation, read-only, for the tools of a run in it."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.store.models import Message


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

    async def last_id_of_run(self, run_id: str) -> int | None:
        """The newest stored message of one run (its user messages; its reply once the run ended)."""
        async with self._sessions() as s:
            return await s.scalar(select(func.max(Message.id)).where(
                Message.conversation_id == self.conversation_id, Message.run_id == run_id))

    async def lines_after(self, message_id: int, *, exclude_runs: Collection[str] = ()) -> list[tuple[str, str, str]]:
        """(role, text, sender name) of the user and assistant messages stored after `message_id`, in order,
        as a run's history takes them (processed or final), leaving out the runs named."""
        query = (select(Message.role, Message.text, Message.sender_name)
                 .where(Message.conversation_id == self.conversation_id, Message.id > message_id,
                        Message.role.in_(("user", "assistant")), Message.status.in_(("processed", "final")))
                 .order_by(Message.created_at, Message.id))
        if exclude_runs:
            query = query.where((Message.run_id.is_(None)) | (Message.run_id.not_in(list(exclude_runs))))
        async with self._sessions() as s:
            return [(r[0], r[1], r[2]) for r in await s.execute(query)]

    async def run_ids(self, limit: int = 200) -> list[str]:
        """The runs that answered this conversation's messages, newest first (at most `limit`)."""
        query = (select(Message.run_id, func.max(Message.id).label("last"))
                 .where(Message.conversation_id == self.conversation_id, Message.role == "user",
                        Message.run_id.is_not(None))
                 .group_by(Message.run_id).order_by(func.max(Message.id).desc()).limit(limit))
        async with self._sessions() as s:
            return [str(r[0]) for r in await s.execute(query)]
