"""The narrow, typed run context every tool receives as `ctx.deps`: what one run is granted.

Everything here was decided server-side when the run was built (by the binding that admitted
the message and by who will hear the answer); nothing is chosen by the model. It carries only
what tools may use: the clock, the conversation and who hears the answer, the note store for
the resolved memory scope, the channel directory, the approval modes, and a handle for
capability state, and what was said in the conversation. Never the daemon, the adapter, the whole store or the config: a capability
that needs more gets it passed in explicitly when it is registered.

Capabilities import this module (and `gateway.store`), never `gateway.runs.runner` or `gateway.daemon`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bindings.models import AgentSpec, BindingSpec
from bindings.skills import SkillBundle

from gateway.clock import Clock
from gateway.runs.memory import NoStore
from gateway.messages import ChatKind
from gateway.approvals.policy import Modes, ToolInfo
from gateway.store.capability_state import CapabilityState
from gateway.store.conversation_log import ConversationLog
from gateway.store.notes import NoteStore, Scope
from gateway.store.repo import ConversationRef
from gateway.store.run_costs import MediaSpend
from gateway.messages import Attachment
from gateway.outbound.adapter import ChannelDirectory, OutboundFile, ReplyTarget
from gateway.outbound.files import FileRefused, Shared


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent the message(s) this run answers."""

    person_id: str | None
    account_id: str | None
    name: str


@dataclass(frozen=True, slots=True)
class Memory:
    """The note store and the one scope this run may touch (or why it may touch none)."""

    notes: NoteStore
    scope: Scope | NoStore


async def _nothing() -> None:
    return None


async def _not_counted(spend: MediaSpend) -> None:
    return None


async def _no_files(files: Sequence[OutboundFile], caption: str, what: str = "") -> Shared:
    raise FileRefused("files cannot be shown in this conversation")


@dataclass
class Turn:
    """One run's grant. Tools receive it as `ctx.deps`."""

    run_id: str  # a delegate's is its own: "<parent run id>/<n>" inside a turn, its background run's id beside one
    conversation: ConversationRef
    binding: BindingSpec
    agent: AgentSpec
    target: ReplyTarget
    requester: Requester
    clock: Clock
    memory: Memory
    directory: ChannelDirectory | None
    state: CapabilityState
    history: ConversationLog
    read_modes: Callable[[], Awaitable[Modes]]
    # The config's skill bundles (skills/<name>/SKILL.md) as loaded; an agent entry names which it may use.
    skills: Mapping[str, SkillBundle] = field(default_factory=dict)
    # Every tool offered in this run by the name the model sees, with its stable id: the gate's map.
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)  # one-line notes for the person (e.g. an MCP server down)
    # A one-line note for the person while the run streams (e.g. "summarising the earlier conversation…").
    tell: Callable[[str], Awaitable[None]] = field(default=lambda line: _nothing())
    # The thread's status line while the run works ("tracker: 40 %"), where the platform has one; a nicety.
    status: Callable[[str], Awaitable[None]] = field(default=lambda line: _nothing())
    # Files into this conversation (a chart, a workspace file) beside the reply, once across restarts
    # (`gateway.outbound.files.share_files`); FileRefused says why not, in words for the model.
    # `what`: what the files are, when their bytes differ each time they are made (a generated image).
    share_files: Callable[[Sequence[OutboundFile], str, str], Awaitable[Shared]] = field(default=_no_files)
    # Media a tool had another model make for this run (an image drawn, a clip transcribed, speech spoken;
    # its price where known): counted on the run a person started (a delegate's spend is its parent's), in
    # the metrics and `runs list`. The one way any media spend is recorded (gateway/store/run_costs.py).
    record_media: Callable[[MediaSpend], Awaitable[None]] = field(default=_not_counted)
    # A file shared earlier in this conversation, fetched again from the platform with the bot's own
    # credentials and the gateway's attachment cap (None where this platform cannot fetch files).
    fetch_attachment: Callable[[Attachment], Awaitable[bytes | None]] | None = None
    # Levels of delegation this run may still start; None for a run a person started (its agent's own
    # subagents max_depth applies). A delegate's run carries what its parent left it.
    levels_left: int | None = None
    # Handoffs made inside this run's own conversation that led to it (send_to_agent with wait: true);
    # a conversation a handoff started keeps its own depth in the store (capabilities/handoffs.py).
    handoff_depth: int = 0
    # A delegate's run: the turn that delegated it, and the capability ids that turn lent it whose state
    # is shared with it (share_with_delegates). Everything else a delegate keeps is its own (`scope`).
    parent: Turn | None = None
    borrowed: frozenset[str] = frozenset()
    # Put a question to the person in the thread and wait for the answer (`gateway.approvals.questions`:
    # an `Ask` in, an `Answer` out); None where the platform cannot show one. A delegate asks through its parent's.
    ask: Callable[[Any], Awaitable[Any]] | None = None
    _modes: Modes | None = None

    async def modes(self) -> Modes:
        """The conversation's approval modes, read once, when the first tool is called (most runs call none)."""
        if self._modes is None:
            self._modes = await self.read_modes()
        return self._modes

    def owner(self, capability: str) -> Turn:
        """The run whose state (and files) `capability` uses here: this one, or, where a parent lent it on
        purpose (share_with_delegates), the lender's — up the chain while each level lent it on."""
        turn = self
        while turn.parent is not None and capability in turn.borrowed:
            turn = turn.parent
        return turn

    def scope(self, capability: str, lasting: Literal["run", "conversation"]) -> str:
        """The one rule for where a capability keeps this run's state (its `CapabilityState` scope).

        "run": state that lives as long as one run (spills): the owner's run id. "conversation": state that
        carries over to the next turn (a compaction snapshot, a reminder cadence, a plan): the conversation's
        id for a run a person started; a delegate's own run id for a delegate, whose work is one task and
        never the conversation's. A delegate's run id is its own (`capabilities/subagents.py`), so nothing
        it keeps, reads or deletes is its parent's unless the parent lent that capability.
        """
        owner = self.owner(capability)
        if lasting == "conversation" and owner.parent is None:
            return owner.conversation.id
        return owner.run_id

    @property
    def chat_kind(self) -> ChatKind:
        return ChatKind(self.conversation.chat_kind)

    @property
    def one_to_one(self) -> bool:
        return self.chat_kind is ChatKind.DM

    @property
    def log_fields(self) -> dict[str, str]:
        return {"binding": self.binding.id, "conversation": self.conversation.id, "run": self.run_id}
