"""The one path every inbound message takes, in this order and nowhere else.

1. Admission and pairing: the binding decides; an unknown DM sender under `pairing` gets a code.
2. Identity: the platform account resolves to a person.
3. A chat command (answered by the gateway), a reply that answers a question waiting in the
   conversation (`gateway/approvals/questions.py`: taken there, never a turn), or ingest (message,
   queued run), the first sign of work (`gateway/outbound/typing_indicator.py`: the typing
   indicator) and wake the queue. In an idle conversation with a slot free (`Scheduler.reserve`)
   the ingest claims the run in its own transaction, and it starts here (`Scheduler.start`): no
   wake, no claim of its own.

Every path's first write is the ledger, under every id the message has (the platform's event
id and, where a platform delivers one message as two events, its dedupe key): a redelivery, or
the second event of such a pair, is dropped there before anything happens, whatever it turned
out to be. The ids are written atomically with the message's effect: in the same transaction
as the stored message (so a process that dies in between loses nothing: the platform
redelivers and the message is stored then), or just before a refusal, a pairing code or a
command runs (so those happen at most once on any replica). Writing the ledger in a
transaction of its own before admission would lose a message whose process died between that
and the ingest; reading it first would cost every message a statement and change nothing,
since admission and identity have no effect a redelivery could repeat.

Messages of one conversation pass one at a time (a thread reply that arrives while its root
mention is being recorded must see the conversation the mention creates).

The ids this process stored a message under are also kept in memory for a while (`_Stored`):
the second event of a pair (Slack's `message` and `app_mention` of one mention) comes moments
later, and is dropped there without a store round trip; the ledger stays the authority (a
redelivery to another replica, or after a restart, is dropped by it as before). An adapter may
ask first (`stored_lately`, from the event's raw body) and drop such an event before its SDK
parses it; one that arrives while its first is still being stored is not known yet and comes
through `submit`, where the conversation's lock and the ledger drop it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from bindings.loader import LoadedConfig
from bindings.models import BindingSpec

from gateway.inbound import attachments
from gateway.inbound.admission import admit
from gateway.inbound.commands import Asked, Commands, parse_command
from gateway.outbound.delivery import Outbound
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.ops.metrics import Metrics
from gateway.inbound.pairing import Pairing
from gateway.runs.queue import Scheduler
from gateway.store import repo
from gateway.outbound.adapter import SubmitResult, target_for

log = logging.getLogger("gateway.inbound.pipeline")

# A question's reply handler: (conversation key, sender, text, record the ledger) -> what to tell the sender,
# or None when the message answers nothing (`gateway.approvals.questions.Questions.reply`).
AnswerReply = Callable[[str, Sender, str, Callable[[], Awaitable[bool]]], Awaitable[str | None]]

BUSY = "I'm still working on earlier messages in this conversation; please send that again in a moment."


def ledger_ids(message: InboundMessage) -> list[str]:
    """Every id under which the platform may deliver this message again."""
    ids = [f"{message.platform}:{message.event_id}"]
    if message.dedupe_key:
        ids.append(same_message_id(message.platform, message.dedupe_key))
    return ids


def same_message_id(platform: str, dedupe_key: str) -> str:
    """The ledger id both events of a pair share (`InboundMessage.dedupe_key`)."""
    return f"{platform}:same:{dedupe_key}"


class _Stored:
    """The ledger ids of messages this process stored lately (a bounded memory, newest kept)."""

    def __init__(self, size: int = 10_000) -> None:
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._size = size

    def any_of(self, binding_id: str, ids: Sequence[str]) -> bool:
        return any((binding_id, i) in self._ids for i in ids)

    def add(self, binding_id: str, ids: Sequence[str]) -> None:
        for i in ids:
            self._ids[(binding_id, i)] = None
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)


class Inbound:
    def __init__(self, *, config: Callable[[], LoadedConfig], store: repo.Store, pairing: Pairing,
                 commands: Commands, outbound: Outbound, scheduler: Scheduler, metrics: Metrics,
                 show_typing: Callable[[repo.ConversationRef], Awaitable[None]],
                 answer_reply: AnswerReply | None = None) -> None:
        self._config, self._store, self._pairing = config, store, pairing
        self._commands, self._outbound, self._scheduler, self._metrics = commands, outbound, scheduler, metrics
        self._show_typing = show_typing  # the typing indicator, out before the run is even woken
        self._answer_reply = answer_reply  # a question waiting for a typed answer takes the message
        self._locks = KeyedLocks()
        self._stored = _Stored()

    def stored_lately(self, binding_id: str, platform: str, dedupe_key: str) -> bool:
        """Whether this process stored the message of `dedupe_key` lately: then an event carrying it
        again (the other of a pair, a redelivery) is a duplicate, counted as one here, and the adapter
        drops it before parsing it. False says nothing: the event goes to `submit`, whose ledger decides."""
        if not self._stored.any_of(binding_id, (same_message_id(platform, dedupe_key),)):
            return False
        self._duplicate(platform)
        return True

    async def submit(self, message: InboundMessage) -> SubmitResult:
        binding = self._config().bindings.get(message.binding_id)
        if binding is None:
            return SubmitResult(False, reason="not accepting messages")
        ref = repo.ConversationRef.of(message)
        async with self._locks.hold(ref.key):
            return await self._submit(binding, message, ref)

    async def _submit(self, binding: BindingSpec, message: InboundMessage, ref: repo.ConversationRef) -> SubmitResult:
        platform, ids, store = message.platform, ledger_ids(message), self._store
        command = parse_command(message.text)
        # 1. Admission and pairing. Outside a thread the conversation decides nothing here: the
        # message is stored in it, and `ingest` finds or creates it in its own transaction, so
        # only what is at hand is used (a message starting a conversation: one round trip fewer).
        if message.thread is not None or command is not None:
            existing = await store.conversation_by_key(ref.key)
        else:
            existing = store.known_conversation(ref.key)
        # Only a thread counts as "the bot is part of it"; a whole group chat does not.
        in_conversation = existing is not None and message.thread is not None
        decision = admit(binding, message, in_conversation=in_conversation)
        if not decision.admitted and message.chat_kind is ChatKind.DM and binding.dm_policy in ("pairing", "allowlist"):
            # Only a DM turned away for who sent it needs the pairing table.
            decision = admit(binding, message, in_conversation=in_conversation,
                             sender_allowed=await self._pairing.is_paired(message))
        if not decision.admitted:
            # Under its own event id only: its twin (the other event of a pair) may yet be admitted.
            if not await store.record(binding.id, ids[:1]):
                return self._duplicate(platform)
            self._metrics.messages_in.labels(platform, "ignored").inc()
            if decision.needs_pairing:
                await self._pairing.challenge(message)
            return SubmitResult(False, reason=decision.reason)
        # 2. Identity.
        identity = await store.identify(platform, message.workspace, message.sender.account_id,
                                        message.sender.display_name)
        # 3. A command, or the message into its conversation's queue (the ledger is written with it).
        if command is not None:
            if not await store.record(binding.id, ids):
                return self._duplicate(platform)
            self._metrics.messages_in.labels(platform, "command").inc()

            async def conversation() -> repo.ConversationRef:
                return existing or await store.create_conversation(ref)

            asked = Asked(command, message, identity.person_id, binding.agent, conversation, existing,
                          self_linking=binding.self_linking)
            touched = await self._commands.run(asked)
            return SubmitResult(False, reason="command", conversation_id=touched, answers=tuple(asked.answers))
        if self._stored.any_of(binding.id, ids):  # what ingest would say, without asking the store
            return self._duplicate(platform)
        if self._answer_reply is not None and not message.attachments:
            said = await self._answer_reply(ref.key, message.sender, message.text, lambda: store.record(binding.id, ids))
            if said is not None:
                self._metrics.messages_in.labels(platform, "answer").inc()
                if said:
                    self._outbound.send(target_for(message), said, private_to=message.sender.account_id)
                return SubmitResult(False, reason="answer")
        # A slot for the run now, if there is one: in an idle conversation the ingest then claims the
        # run in its own transaction and it starts here, without the queue's wake and claim.
        conversation = existing or ref
        reserved = await self._scheduler.reserve(conversation.id)
        try:
            ingested = await store.ingest(
                binding_id=binding.id,
                event_ids=ids,
                conversation=conversation,
                identity=identity,
                account_id=message.sender.account_id,
                text=_with_attachments(message),
                agent_id=binding.agent,
                platform_message_id=message.message_id,
                queue_limit=self._config().gateway.limits.queued_messages_per_conversation,
                files=attachments.recorded(message),
                start=reserved,
            )
        except BaseException as e:
            if reserved:
                self._scheduler.unreserve()
            if isinstance(e, repo.Duplicate):
                return self._duplicate(platform)
            if isinstance(e, repo.QueueFull):
                self._metrics.messages_in.labels(platform, "busy").inc()
                self._outbound.send(target_for(message), BUSY, private_to=message.sender.account_id)
                return SubmitResult(False, reason="busy")
            raise
        if reserved and ingested.claimed is None:
            self._scheduler.unreserve()
        self._stored.add(binding.id, ids)
        self._metrics.messages_in.labels(platform, "accepted").inc()
        try:
            await self._show_typing(ingested.conversation)
        finally:  # the run goes on whatever became of its sign
            if ingested.claimed is not None:
                self._scheduler.start(ingested.claimed)
            else:
                self._scheduler.wake(ingested.conversation.id)
        return SubmitResult(True, conversation_id=ingested.conversation.id, message_id=str(ingested.message_id),
                            run_id=ingested.run_id)

    def _duplicate(self, platform: str) -> SubmitResult:
        self._metrics.duplicates.labels(platform).inc()
        self._metrics.messages_in.labels(platform, "duplicate").inc()
        return SubmitResult(False, duplicate=True, reason="duplicate")


class KeyedLocks:
    """An asyncio lock per key, kept only while someone holds or waits for it.

    `hold` is a plain async context manager, not an `asynccontextmanager` generator: it is taken
    for every event, and the generator's frames, hooks and context manager around a lock cost more
    calls than the lock itself."""

    def __init__(self) -> None:
        self._locks: dict[str, _Entry] = {}

    def hold(self, key: str) -> _Hold:
        return _Hold(self._locks, key)


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holding or waiting: the entry goes with the last


class _Hold:
    __slots__ = ("_locks", "_key", "_entry")

    def __init__(self, locks: dict[str, _Entry], key: str) -> None:
        self._locks, self._key = locks, key

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._key)
        if entry is None:
            entry = self._locks[self._key] = _Entry()
        entry.users += 1
        self._entry = entry
        try:
            await entry.lock.acquire()
        except BaseException:  # cancelled while waiting: never held
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._entry.lock.release()
        self._leave()

    def _leave(self) -> None:
        self._entry.users -= 1
        if not self._entry.users:
            del self._locks[self._key]


def _with_attachments(message: InboundMessage) -> str:
    if not message.attachments:
        return message.text
    files = "; ".join(
        f"{a.name} ({a.mime_type}{f', {a.size} bytes' if a.size is not None else ''})" for a in message.attachments
    )
    return f"{message.text}\n\n[Files shared with this message: {files}]".strip()
