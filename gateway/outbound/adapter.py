"""What the core needs from a chat platform, and the neutral shapes it hands across.

The core owns this interface; `adapters/` implement it, one package per platform. Nothing
here knows a platform: a card is a list of calls with decisions, a reply target is a
channel and a thread, a directory answers four questions about one channel.

The contract, in one place:

- `Adapter`: what every adapter must do (connect, post and edit, cards, private notes, typing).
- The features an adapter *may* offer, each a protocol below `Adapter` (`StreamsNatively`,
  `ShowsStopControl`, `FindsOwnPosts`, ...). An adapter opts in by naming the protocol among its
  bases; the core asks `offered(adapter, Feature)` and never probes for a method or an attribute,
  so a feature exists exactly where an adapter declared it, and `features_of` lists them.
  `tests/adapters/test_contract.py` holds every adapter to it: what it declares it implements,
  and what it does not declare it does not half-offer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from gateway.inbound.memory_card import MemoryCard, MemoryClick, MemoryClickOutcome
from gateway.messages import Attachment, ChatKind, CommandAnswer, InboundMessage, Sender, reply_thread

if TYPE_CHECKING:
    from aiohttp import web


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Where a conversation's replies, cards and notices go."""

    platform: str
    binding_id: str
    workspace: str
    channel: str
    thread: str | None
    chat_kind: ChatKind
    conversation_id: str = ""
    # Another agent answering here (a handoff): its name. An adapter whose platform can post under
    # another name declares `SpeaksAs` (Slack's username); elsewhere the core puts a "**<name>:**"
    # header on the reply so nobody mistakes it for the bound agent.
    speaker: str = ""


def target_for(message: InboundMessage) -> ReplyTarget:
    """Where the answer to `message` goes (its conversation's thread)."""
    return ReplyTarget(message.platform, message.binding_id, message.workspace, message.channel,
                       reply_thread(message), message.chat_kind)


# A chat platform's hold before a reply's first draft. An answer ready within a second (a short
# one from a fast model) lands as one message: a person sees it once, with no "edited" mark
# (Mattermost) and no Stop control flickering on and off, and it costs one call of the platform's
# budget instead of three or four (a Telegram group allows 20 a minute). The typing indicator is
# out meanwhile, and a slow model's first token usually comes later than this anyway.
CHAT_FIRST_DRAFT_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class PlatformLimits:
    """How the core paces and splits replies for one platform."""

    max_message_chars: int = 4000
    min_edit_interval: float = 1.0  # seconds between edits of one message
    supports_edit: bool = True
    typing_lasts: float = 5.0  # seconds the platform shows a typing indicator unless it is sent again
    # Seconds from a run's start before its first draft is shown (the typing indicator shows meanwhile):
    # an answer complete by then is posted once, as final; no draft, no edit, no Stop control on and off.
    first_draft_after: float = 0.0


class Decision(StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    APPROVE_ALL = "approve_all"  # approve this card's calls and waive gating in the conversation


class ItemState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class ApprovalItem:
    """One gated tool call on a card. `approval_id` is unguessable; buttons carry only it."""

    approval_id: str
    tool_name: str  # the name the model sees
    capability: str
    arguments: str  # pretty-printed, secrets masked, whole: each platform shows what fits and says where the rest is
    state: ItemState = ItemState.PENDING
    decided_by: str | None = None
    delegate: str | None = None  # the delegate that made the call; None when the agent made it itself

    @property
    def headline(self) -> str:
        """What a card says the call is: the tool, or "<delegate> wants to run <tool>" for a delegate's call,
        so whoever decides knows it was not the agent they talk to that asked."""
        return f"{self.delegate} wants to run {self.tool_name}" if self.delegate else self.tool_name


@dataclass(frozen=True, slots=True)
class ApprovalCard:
    """All gated calls of one model response. `card_id` is unguessable too."""

    card_id: str
    run_id: str
    items: tuple[ApprovalItem, ...]
    deciders: str  # "only Ada can decide", "anyone in this chat can decide"
    note: str = ""  # e.g. "Expired after 24 h", or how to decide without buttons

    @property
    def pending(self) -> bool:
        return any(i.state is ItemState.PENDING for i in self.items)


@dataclass(frozen=True, slots=True)
class QuestionCard:
    """A question put to a person in the thread (`gateway/approvals/questions.py`), one field at a time.

    Every string here came from outside (an MCP server, a delegate's model): an adapter draws it inert,
    as it draws a card's arguments. `choices` are the buttons (a click carries its `choice_ids` entry);
    `replies` says a reply in the thread answers the field asked now. `question_id` is unguessable.
    """

    question_id: str
    asker: str  # who asks: "mcp:tracker", "the delegate researcher"
    text: str
    answered: tuple[tuple[str, str], ...] = ()  # (field, value) given so far
    prompt: str = ""  # the field asked now ("Environment"), "" when nothing is asked now
    choices: tuple[str, ...] = ()  # button labels
    choice_ids: tuple[int, ...] = ()  # what each button's click carries back (`Dispatcher.answer`'s choice)
    replies: bool = False
    deciders: str = ""
    note: str = ""  # "Answered by Ada.", "Declined by Ada.", "Expired: nobody answered in time."

    @property
    def open(self) -> bool:
        return not self.note


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    """What a click did; `message` is for the clicker alone when `private` is true."""

    accepted: bool
    message: str
    private: bool = True


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    id: str
    name: str
    purpose: str = ""
    topic: str = ""
    member_count: int | None = None
    is_private: bool | None = None


@dataclass(frozen=True, slots=True)
class ChannelMember:
    account_id: str
    name: str
    display_name: str = ""
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    author: str
    text: str
    ts: datetime | None = None


CHANNEL_TOOL_IDS = ("get_channel_info", "list_channel_members", "search_channels", "read_channel_history")


@runtime_checkable
class ChannelDirectory(Protocol):
    """Directory questions answered with the bot's own credentials about one platform.

    `supported` names which of `CHANNEL_TOOL_IDS` this platform can answer; the core never
    offers the model the others. `notes` maps a tool id to what the model must know about this
    platform's answer to it (Telegram lists only administrators as members); the core adds the
    note to that tool's description.
    """

    supported: frozenset[str]
    notes: Mapping[str, str]

    async def channel_info(self, target: ReplyTarget) -> ChannelInfo:
        """Raises NotVisible when the bot cannot see the channel (so do the other three)."""
        ...

    async def channel_members(self, target: ReplyTarget, limit: int) -> tuple[list[ChannelMember], bool]:
        """Members, and whether the list was cut at `limit`."""
        ...

    async def search_channels(self, target: ReplyTarget, query: str, limit: int) -> tuple[list[ChannelInfo], bool]: ...

    async def channel_history(self, target: ReplyTarget, limit: int) -> tuple[list[HistoryMessage], bool]:
        """The newest `limit` messages of the channel, or of the thread when the target has one; newest last."""
        ...


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """The core's answer to a Stop: whether the run is stopping, and a line for the person who asked, alone."""

    stopped: bool
    message: str
    status: int = 200  # for the API: 403 not theirs, 404 unknown, 409 nothing to stop


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """The core's answer to an adapter handing it a message: ack the platform either way."""

    accepted: bool  # recorded and queued for a run
    duplicate: bool = False  # already in the ledger: a redelivery
    reason: str = ""  # why not accepted ("not admitted: mention required", "busy", ...)
    conversation_id: str | None = None
    message_id: str | None = None
    run_id: str | None = None
    answers: tuple[CommandAnswer, ...] = ()  # a command's answers (an API client gets them in its response)


class Dispatcher(Protocol):
    """The core as an adapter sees it: hand it messages and clicks, ask it for durable state."""

    async def submit(self, message: InboundMessage) -> SubmitResult:
        """Dedupe, admit, record and queue. Returns once durable: ack the platform after."""
        ...

    def stored_lately(self, binding_id: str, platform: str, dedupe_key: str) -> bool:
        """True when this process stored the message of `dedupe_key` lately (an `InboundMessage`'s):
        an event carrying it again is a duplicate (counted as one) to ack and drop unread. False
        decides nothing: hand the event to `submit`."""
        ...

    async def decide(
        self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str, surface: str
    ) -> DecisionOutcome:
        """A button click. Checks who may decide; the first decision wins."""
        ...

    async def answer(self, question_id: str, choice: int, who: Sender, *, binding_id: str) -> DecisionOutcome:
        """A question card's button (`choice`: its position). Only the question's deciders answer it."""
        ...

    async def stop_run(self, run_id: str, who: Sender, *, binding_id: str) -> StopOutcome:
        """A Stop control pressed: only the run's requester or a decider stops it."""
        ...

    async def approval_item(self, approval_id: str, *, binding_id: str) -> ApprovalItem | None:
        """One call of a card this binding shows, its arguments whole (a "Show all" button in the chat
        where the card is); None when no card of this binding has it."""
        ...

    async def memory_click(self, click: MemoryClick) -> MemoryClickOutcome:
        """A `/memory` card's button: the store is decided from where the click came, never from its data."""
        ...

    async def get_state(self, binding_id: str, key: str) -> str | None:
        """Adapter state kept in the store (a Telegram update offset, a websocket seq)."""
        ...

    async def set_state(self, binding_id: str, key: str, value: str) -> None: ...

    def publish(self, conversation_id: str, event: dict[str, Any]) -> None:
        """Put an event on a conversation's event stream (what the web page and API clients read)."""
        ...


@dataclass(slots=True)
class AdapterHealth:
    connected: bool
    detail: str = ""
    since: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class NativeStream(Protocol):
    """One reply streamed natively (Slack's chat.startStream / appendStream / stopStream, Telegram's
    sendMessageDraft): the platform shows the text as it is appended. Any method may raise
    `NativeUnavailable`."""

    async def start(self, markdown: str) -> str | None:
        """Begin with `markdown`; the message id, or None while only a draft exists."""
        ...

    async def append(self, markdown: str) -> None: ...

    async def stop(self, markdown: str = "") -> str | None:
        """Append the last `markdown` (if any) and end the stream; the message id, if a message now exists."""
        ...


@dataclass(frozen=True)
class Trouble:
    """Something `doctor` found wrong, in words an operator acts on: what, and what to change."""

    problem: str
    fix: str


@runtime_checkable
class Adapter(Protocol):
    """One binding's connection to one platform, constructed from the binding's config: what every
    adapter must do. What only some platforms can do is a feature below, declared where offered."""

    platform: str
    binding_id: str
    limits: PlatformLimits

    async def start(self, dispatcher: Dispatcher) -> None:
        """Connect and begin delivering messages to `dispatcher.submit`. Must return promptly
        (connect in a background task it owns); failures show in `health()`."""
        ...

    async def stop(self) -> None: ...

    def health(self) -> AdapterHealth: ...

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        """Routes this adapter serves on the daemon's HTTP server (webhooks, callbacks); may be none."""
        ...

    def render(self, markdown: str) -> str:
        """The model's Markdown in the platform's own formatting."""
        ...

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        """Post `text` (already rendered) and return the platform's message id."""
        ...

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None: ...

    async def show_typing(self, target: ReplyTarget) -> None: ...

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str: ...

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None: ...

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        """Something only one person should see (an ephemeral message, an alert, a DM)."""
        ...

    def forget(self, message_ids: Sequence[str]) -> None:
        """The core is done with these messages (a reply that is final): let go of anything kept
        about them. Most platforms keep nothing and do nothing here; the web chat keeps the text it
        showed, to send only what was added, and would otherwise keep every reply for the life of
        the process."""
        ...

    async def doctor(self, online: bool) -> list[Trouble]:
        """`agent-gateway doctor`: what stops this binding from working, each with what to change
        (empty: nothing found). Its secrets resolve; with `online`, the platform also takes its
        credentials and, where the platform says, they carry the permissions this adapter needs.
        Never starts the binding; called on an adapter that was not started."""
        ...


# --- what an adapter may do: each feature declared by naming it among the adapter's bases ----------


class StreamsNatively(Protocol):
    """The platform shows a reply as it is appended (Slack's chat.startStream, Telegram's
    sendMessageDraft): fewer calls and bytes than post + edit, and the platform's own streaming look.
    Without it every reply is posted and edited in place (`gateway.outbound.delivery`)."""

    def native_stream(self, target: ReplyTarget) -> NativeStream | None:
        """A native stream for one reply in `target`; None where this workspace or chat has none."""
        ...


class ShowsStatus(Protocol):
    """A status line saying what the run does now ("using web_fetch…", an MCP tool's progress; Slack's
    assistant threads, the web page's line under the conversation).
    Elsewhere the typing indicator says enough. Cosmetic: never waits for a budget."""

    async def show_status(self, target: ReplyTarget, text: str) -> None: ...


class ShowsStopControl(Protocol):
    """A Stop control on a streaming reply (a button, an action): the runner shows it when the reply
    is first posted and takes it away when the reply is final. Without it `/stop` still works."""

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        """Show (`present`) or remove the Stop control on the reply message `message_id` of run `run_id`."""
        ...


class FinalEditTakesStop(Protocol):
    """A Stop control that rides on the reply message itself and so can go with its final edit
    (one call instead of two: Slack's blocks, Telegram's inline keyboard, Mattermost's props)."""

    def stop_control_ends_with_edit(self, target: ReplyTarget, message_id: str) -> None:
        """The next edit of `message_id` is its final: show it without the control, which is then
        gone (`stop_control(..., False)` after it finds nothing left to remove)."""
        ...


class PostsMemoryCards(Protocol):
    """`/memory` as a card with buttons; without it the core answers `/memory` in text."""

    async def post_memory_card(self, target: ReplyTarget, card: MemoryCard) -> str | None:
        """Each click goes to `Dispatcher.memory_click`, and the adapter shows the card it answers
        with in place of the clicked one. None where this binding has no buttons (text then)."""
        ...


class PostsReportCards(Protocol):
    """A native card for a background run's report (the web chat); elsewhere the report is posted as
    quoted Markdown (`gateway.runs.background.report_markdown`), never as a message someone sent."""

    async def post_report(self, target: ReplyTarget, text: str) -> str:
        """Show the report `text` as a card; returns its message id."""
        ...


class AnswersDirectory(Protocol):
    """Channel questions answered with the bot's own token: the channel tools are offered only here."""

    def directory(self) -> ChannelDirectory | None:
        """The channel directory; None when this binding cannot answer (no token scope, say)."""
        ...


class FetchesAttachments(Protocol):
    """Files people share are fetched with the platform's own auth (Slack's bot token, Telegram's
    getFile, Mattermost's `/files/{id}`); without it a shared file is named to the model, not read."""

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes | None:
        """The file's bytes; None when this one cannot be fetched.

        Raises `AttachmentTooLarge` as soon as the file is known to be over `max_bytes` (never
        reads more than that), `PlatformError` when the platform refuses. Called when a run is
        prepared, never on the inbound path."""
        ...


class FindsOwnPosts(Protocol):
    """The platform's API can list a conversation's messages (Slack, Mattermost): a reply a killed
    process posted and never recorded is found and continued, not posted a second time
    (`gateway.outbound.orphans`). Telegram's Bot API cannot read a chat's history."""

    async def own_posts_after(self, target: ReplyTarget, message_id: str) -> list[tuple[str, str]]:
        """The bot's own plain-text posts (not cards) in `target` after the message `message_id`,
        oldest first, as (message id, text)."""
        ...


class FindsOwnCards(Protocol):
    """The same for an approval card posted just before a kill: found again, not posted twice."""

    async def own_card(self, target: ReplyTarget, card: ApprovalCard) -> str | None:
        """The message id of the bot's post in `target` showing `card` (its buttons name the
        card's items), if there is one."""
        ...


class SpeaksAs(Protocol):
    """The platform can post under another name (Slack's `username`): a handoff's answer shows under
    the agent who gives it. Elsewhere the core heads the reply with "**<name>:**"."""


class FileKind(StrEnum):
    IMAGE = "image"  # shown inline where the platform can (Telegram's sendPhoto, the web page's <img>)
    AUDIO = "audio"
    DOCUMENT = "document"  # anything else: a download


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file a reply or a tool puts into the conversation: its name, its bytes, its media type."""

    name: str
    data: bytes
    media_type: str

    @property
    def kind(self) -> FileKind:
        if self.media_type in ("image/png", "image/jpeg", "image/gif", "image/webp"):
            return FileKind.IMAGE
        return FileKind.AUDIO if self.media_type.startswith("audio/") else FileKind.DOCUMENT


@dataclass(frozen=True, slots=True)
class FileLimits:
    """What one platform takes in one share: bytes per file (by kind), files per share, a caption's length."""

    max_bytes: Mapping[FileKind, int]
    max_files: int = 10
    max_caption_chars: int = 4000


class SendsFiles(Protocol):
    """Files (images, documents, audio) posted into a conversation, the platform's own way, in two
    steps so that a kill between them never shares twice: `upload` puts the bytes on the platform
    (Slack's upload URL, Mattermost's /files) and returns a reference to them, `share` makes the
    uploaded files a message in the target. A platform whose one call does both (Telegram's
    sendPhoto) uploads nothing and shares the bytes. The core keeps a delivery row across both
    (`gateway.outbound.files`); an adapter never retries a share on its own."""

    file_limits: FileLimits

    async def upload(self, target: ReplyTarget, file: OutboundFile) -> str:
        """The bytes on the platform, not yet shown to anyone: a reference `share` takes ("" for none)."""
        ...

    async def share(self, target: ReplyTarget, files: Sequence[tuple[OutboundFile, str]], caption: str) -> str:
        """One message in `target` showing `files` (each with its `upload` reference) under `caption`
        (already rendered); the platform's message id."""
        ...


class ConfirmsMembership(Protocol):
    """The platform says whether one person is in a channel now (Slack's conversations.members,
    Telegram's getChatMember, Mattermost's channel member): conversation search counts a channel or
    group thread only while the person who spoke in it still is (`gateway.membership`). Without it
    those threads are left out of a search, and the result says some were."""

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        """Whether `account_id` is in `target`'s channel now. Raises `PlatformError` when the
        platform cannot say (the bot is no longer in the channel, the call failed)."""
        ...


class AsksQuestions(Protocol):
    """A question put to a person in the thread, as a card with buttons (`QuestionCard`); each click goes to
    `Dispatcher.answer`. Without it nothing is asked there: an MCP server's elicitation is cancelled and a
    delegate is not given ask_parent."""

    async def post_question(self, target: ReplyTarget, card: QuestionCard) -> str:
        """Post the card; returns its message id."""
        ...

    async def update_question(self, target: ReplyTarget, ref: str, card: QuestionCard) -> None:
        """Show `card` in place of the one posted as `ref` (buttons gone once it is closed)."""
        ...


FEATURES: tuple[type, ...] = (StreamsNatively, ShowsStatus, ShowsStopControl, FinalEditTakesStop, PostsMemoryCards,
                              PostsReportCards, AnswersDirectory, FetchesAttachments, FindsOwnPosts, FindsOwnCards,
                              SpeaksAs, SendsFiles, ConfirmsMembership, AsksQuestions)

F = TypeVar("F")


def offered(adapter: object, feature: type[F]) -> F | None:
    """`adapter` as `feature` when its class declared it (named it among its bases), else None.

    Declared, not probed: an adapter that happens to have a method of the same name offers
    nothing by it, so what a platform offers is read off its class line."""
    if feature not in FEATURES:
        raise TypeError(f"{feature.__name__} is not an adapter feature")
    return cast(F, adapter) if feature in type(adapter).__mro__ else None


def features_of(adapter: object) -> frozenset[str]:
    """The names of the features `adapter` (an instance or a class) declares."""
    cls = adapter if isinstance(adapter, type) else type(adapter)
    return frozenset(f.__name__ for f in FEATURES if f in cls.__mro__)


class PlatformError(Exception):
    """A platform API refused a call; adapters translate their SDK's errors into these."""


class NotVisible(PlatformError):
    """The bot cannot see this channel (not a member, archived, private): bad news, not a fault."""


class NativeUnavailable(PlatformError):
    """The platform has no native streaming here (a workspace, an older token): post and edit instead."""


class AttachmentTooLarge(PlatformError):
    """A shared file is over the configured size cap: it is not read, and the run goes on."""


class FileTooLarge(PlatformError):
    """The platform refused a file for its size (a server's own cap below the published one): told to
    the model in words, never tried again."""


class RateLimited(PlatformError):
    """The platform said to slow down. The core waits `retry_after` seconds, never busy-loops."""

    def __init__(self, retry_after: float, method: str = "") -> None:
        super().__init__(f"rate limited on {method or 'call'}: retry after {retry_after:.1f}s")
        self.retry_after = retry_after
        self.method = method
