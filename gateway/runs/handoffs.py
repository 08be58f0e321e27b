"""The core's half of a handoff: a new conversation on another agent, in the same thread or DM.

A handoff (`send_to_agent` with `wait: false`, capabilities/handoffs.py) is not a message somebody
sent in the thread, so it does not join the thread's conversation: it starts a conversation of its
own under a key beside the thread's (marked `#handoff:`), with one queued run that belongs to the
agent it was handed to (`runs.agent_id`). Its replies go where the thread's go; the runner sees the
mark and answers with that agent, under that agent's name. The queue, the lease and the delivery
are the ones every run has, so a handoff survives a restart and runs on any replica.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sqlalchemy import select

from gateway.clock import new_id
from gateway.store.models import Conversation, Message, Run
from gateway.store.repo import ConversationRef, Identity, Store
from gateway.runs.turn import Turn

if TYPE_CHECKING:
    from gateway.daemon import Gateway

MARK = "#handoff:"


def is_handoff(key: str) -> bool:
    """Whether a conversation key is a handoff's (answered by the run's agent, not the binding's)."""
    return MARK in key


class HandoffStarter:
    """Starts handoff conversations for the handoffs capability (wired in gateway/extensions.py)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def start(self, parent: Turn, agent_id: str, text: str,
                    before_run: Callable[[str], Awaitable[None]]) -> str:
        """Queue `text` as the first message of a new conversation on `agent_id`; its id.

        `before_run` is awaited with the new conversation's id before its run exists, so what the
        capability records about the conversation (its depth in a chain) is there when it runs.
        The message is the requester's (their person, their name): the handoff acts for them.
        """
        gw = self.gateway
        person = parent.requester.person_id
        if person is None:
            raise ValueError("a handoff acts for a person; this run has none")
        here = parent.conversation
        base = here.key.split(MARK, 1)[0]  # a chain's conversations all sit beside the thread's own
        conversation = await gw.store.create_conversation(ConversationRef(
            new_id(), f"{base}{MARK}{agent_id}:{new_id()}", here.platform, here.binding_id, here.workspace,
            here.channel, here.thread, here.chat_kind,
        ))
        await before_run(conversation.id)
        await gw.store.ingest(
            binding_id=here.binding_id, event_ids=[f"handoff:{conversation.id}"], conversation=conversation,
            identity=Identity(person, parent.requester.name), account_id=parent.requester.account_id or "",
            text=text, agent_id=agent_id, platform_message_id=None,
            queue_limit=gw.config.gateway.limits.queued_messages_per_conversation,
        )
        gw.scheduler.wake(conversation.id)
        return conversation.id


async def answers_beside(store: Store, key: str) -> list[tuple[Message, str]]:
    """The answers handoffs posted beside the conversation with `key` (a chain's included), with the id
    of the agent that gave each, oldest first: what a page re-reading its conversation shows among its own."""
    prefix = f"{key.split(MARK, 1)[0]}{MARK}"
    async with store.sessions() as s:
        rows = await s.execute(
            select(Message, Run.agent_id)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .join(Run, Run.id == Message.run_id)
            .where(Conversation.key.startswith(prefix, autoescape=True), Message.role == "assistant")
            .order_by(Message.created_at, Message.id)
        )
        return [(message, agent_id) for message, agent_id in rows]
