"""`/memory` as a card with buttons: one model, built here, rendered by each adapter's cards code.

The core decides, adapters render. A card lists the notes of the conversation's own store (the
person's in a DM, the chat's in a group: `memory.holder_of`, the rule a run uses) with "stop
using" / "use again" / "delete" per note, and "erase all", which asks again before it erases.

A button carries a short opaque action, `s:1f.a3b4c5` (stop the note with row id 0x1f whose
fingerprint is a3b4c5), never a note's text and never whose notes they are. Which store a click
acts on is decided here from where the click came from: the clicker's own store in a DM, the
chat's in a group (and there only for someone who may change the chat's notes). The note must be
in that store and match its fingerprint, so a forged id, another person's note or a button left
on a stale card (the row gone, its id reused) answers "gone or not yours" and changes nothing.

"Yes, erase" carries a random nonce (`y:<nonce>`) issued when "Erase all…" was pressed, bound to
that conversation, that store and the account that pressed it, good once and for CONFIRM_MINUTES.
A forged, replayed or borrowed confirmation (another account, another chat) erases nothing. The
questions live in this process: a confirmation reaching another replica, or a restarted one,
is told to ask again.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from gateway.runs.memory import NoStore, holder_of
from gateway.messages import ChatKind, Sender
from gateway.store.notes import CHAT, Holder, Note, NoteStore

if TYPE_CHECKING:
    from bindings.models import BindingSpec

    from gateway.approvals.service import Approvals
    from gateway.store.repo import Store
    from gateway.outbound.adapter import Adapter, ReplyTarget

log = logging.getLogger("gateway.inbound.memory_card")

MAX_SHOWN = 20  # notes with buttons on one card (Slack takes 50 blocks: two a note); the rest by text
CONFIRM_MINUTES = 10  # an "erase all" question older than this is asked again
MAX_OPEN_QUESTIONS = 10_000  # "erase all" questions waiting for their answer, across every chat
NOT_ASKED = ("That confirmation is not one I asked you for (or it was answered already); nothing was erased. "
             "Press “Erase all…” to be asked again.")
GONE = "That note is gone or isn't yours; nothing changed. `/memory` shows the notes as they are now."
STALE = "This button is no longer valid; nothing changed. `/memory` shows the notes as they are now."


class MemoryAction(StrEnum):
    STOP = "s"
    USE = "u"
    DELETE = "d"
    ERASE = "e"  # asks; nothing is erased yet
    CONFIRM = "y"  # the second click: erase
    CANCEL = "n"


@dataclass(frozen=True, slots=True)
class MemoryButton:
    label: str
    data: str  # at most 24 ASCII bytes: fits Telegram's 64-byte callback_data with any prefix
    style: Literal["primary", "danger", ""] = ""


@dataclass(frozen=True, slots=True)
class MemoryLine:
    """One note: `label` is `agent/name`, `detail` its size, age and state."""

    label: str
    detail: str
    in_use: bool
    buttons: tuple[MemoryButton, ...]


@dataclass(frozen=True, slots=True)
class MemoryCard:
    title: str
    lines: tuple[MemoryLine, ...]
    actions: tuple[MemoryButton, ...]  # "erase all", or the confirmation and "cancel"
    status: str = ""  # what the last click did
    footer: str = ""  # whose notes these are, who may change them, what is not shown

    def text(self) -> str:
        """The card as Markdown: the fallback text, and the whole state once buttons are gone."""
        out = [f"**{self.title}**"]
        out += [f"- `{line.label}`: {line.detail}" for line in self.lines]
        out += [p for p in (self.status, self.footer) if p]
        return "\n".join(out)


@dataclass(frozen=True, slots=True)
class MemoryClick:
    """A press on one of a memory card's buttons, as an adapter hands it over: where, who, what."""

    binding_id: str
    workspace: str
    channel: str
    chat_kind: ChatKind
    clicker: Sender
    data: str


@dataclass(frozen=True, slots=True)
class MemoryClickOutcome:
    """`card`: show it in place of the clicked one (None: leave that as it is); `message`: for the clicker alone."""

    card: MemoryCard | None
    message: str = ""


def note_ref(note: Note) -> str:
    """The note's id and a fingerprint of what makes it this note (agent, name, when it was made)."""
    made = note.created_at.replace(tzinfo=None).isoformat()
    check = hashlib.blake2s(f"{note.agent_id}|{note.name}|{made}".encode(), digest_size=3).hexdigest()
    return f"{note.note_id:x}.{check}"


def parse_data(data: str) -> tuple[MemoryAction, str] | None:
    head, sep, rest = data.partition(":")
    try:
        return (MemoryAction(head), rest) if sep else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Question:
    """An "erase all" asked of one account about one store in one conversation."""

    where: tuple[str, str, str]  # binding, workspace, channel
    account_id: str
    holder: Holder
    expires: datetime


def build_card(notes: list[Note], holder: Holder, *, confirm: str = "", status: str = "",
               footer: str = "") -> MemoryCard:
    """The card for these notes; with `confirm` (a question's nonce), asking whether to erase them all.
    Pure: the same notes give the same card on any replica."""
    mine = holder.kind != CHAT
    title = "What agents wrote about you" if mine else "What agents keep for this chat"
    lines = []
    for note in notes[:MAX_SHOWN]:
        ref = note_ref(note)
        toggle = (MemoryButton("Stop using", f"{MemoryAction.STOP}:{ref}") if not note.suppressed
                  else MemoryButton("Use again", f"{MemoryAction.USE}:{ref}", "primary"))
        state = "in use" if not note.suppressed else "stopped: no agent reads it"
        lines.append(MemoryLine(
            f"{note.agent_id}/{note.name}",
            f"{note.chars} characters, last written {note.updated_at:%Y-%m-%d %H:%M} UTC, {state}",
            not note.suppressed,
            (toggle, MemoryButton("Delete", f"{MemoryAction.DELETE}:{ref}", "danger")),
        ))
    if not notes:
        status = status or ("No agent has written anything about you." if mine else "No agent keeps notes for this chat.")
    if len(notes) > MAX_SHOWN:
        more = len(notes) - MAX_SHOWN
        footer = f"{more} more not shown: `/memory` in text lists them all. {footer}".strip()
    actions: tuple[MemoryButton, ...] = ()
    if confirm and notes:
        what = f"all {len(notes)} note{'s' if len(notes) != 1 else ''}"
        status = f"Erase {what}{' about you' if mine else ' of this chat'}? This cannot be undone."
        actions = (MemoryButton(f"Yes, erase {what}", f"{MemoryAction.CONFIRM}:{confirm}", "danger"),
                   MemoryButton("Cancel", f"{MemoryAction.CANCEL}:"))
    elif notes:
        actions = (MemoryButton("Erase all…", f"{MemoryAction.ERASE}:", "danger"),)
    return MemoryCard(title, tuple(lines), actions, status, footer)


class MemoryCards:
    """Posts `/memory` cards and answers their clicks. Who may change a chat's notes is asked of
    `Approvals` (`may_manage_chat_memory`: the binding's deciders, by the rule a mode switch uses),
    on every door."""

    def __init__(self, store: Store, approvals: Approvals, bindings: Callable[[], Mapping[str, BindingSpec]],
                 adapter_for: Callable[[str], Adapter | None]) -> None:
        self._store, self._notes, self._approvals = store, NoteStore(store), approvals
        self._bindings, self._adapter_for = bindings, adapter_for
        self._questions: dict[str, _Question] = {}  # nonce -> the "erase all" it confirms

    async def card(self, holder: Holder, *, status: str = "", confirm: str = "") -> MemoryCard:
        footer = ("Only you see this conversation's card; the notes are yours." if holder.kind != CHAT else
                  "The agent uses these notes for everyone in this chat, never anyone's own notes. "
                  "Changing them is for whoever decides approvals for everyone here.")
        return build_card(await self._notes.held(holder), holder, confirm=confirm, status=status, footer=footer)

    def _ask(self, click: MemoryClick, holder: Holder) -> str:
        """A fresh nonce for "Yes, erase", bound to where, whom and which store."""
        now = self._store.clock.now()
        for nonce in [n for n, q in self._questions.items() if q.expires <= now]:
            del self._questions[nonce]
        while len(self._questions) >= MAX_OPEN_QUESTIONS:
            del self._questions[next(iter(self._questions))]  # the oldest
        nonce = secrets.token_urlsafe(12)  # 16 characters: `y:` + it fits every platform's button data
        self._questions[nonce] = _Question((click.binding_id, click.workspace, click.channel),
                                           click.clicker.account_id, holder, now + timedelta(minutes=CONFIRM_MINUTES))
        return nonce

    def _answer(self, click: MemoryClick, holder: Holder, nonce: str) -> str | None:
        """None when `nonce` is the open question of this clicker about this store here (then spent);
        else why nothing is erased. A question is left open for its asker when someone else answers."""
        question = self._questions.get(nonce)
        if (question is None or question.where != (click.binding_id, click.workspace, click.channel)
                or question.account_id != click.clicker.account_id or question.holder != holder):
            return NOT_ASKED
        del self._questions[nonce]
        if question.expires <= self._store.clock.now():
            return "That question is too old; nothing was erased. Press “Erase all…” again to be asked again."
        return None

    async def post(self, target: ReplyTarget, holder: Holder) -> bool:
        """Post the card where the platform shows buttons; False where it does not (answer in text then)."""
        from gateway.outbound.adapter import PostsMemoryCards, offered  # that module imports this one's card

        cards = offered(self._adapter_for(target.binding_id), PostsMemoryCards)
        if cards is None:
            return False
        try:
            return await cards.post_memory_card(target, await self.card(holder)) is not None
        except Exception as e:  # the text answer still works
            log.warning("could not post a memory card on %s: %s", target.platform, e)
            return False

    async def may_change(self, holder: Holder, where: ReplyTarget, who: Sender) -> str | None:
        """None when `who` may change these notes, typed or clicked `where`; else why not, for them
        alone. A person's store is only ever reached from their own account, so it stays theirs;
        a chat's asks the binding's deciders, by the rule approvals use."""
        if holder.kind != CHAT:
            return None
        return await self._approvals.may_manage_chat_memory(where, who)

    async def click(self, click: MemoryClick) -> MemoryClickOutcome:
        binding = self._bindings().get(click.binding_id)
        parsed = parse_data(click.data)
        if binding is None or parsed is None:
            return MemoryClickOutcome(None, STALE)
        person = await self._approvals.db.person_of(binding.platform, click.workspace, click.clicker.account_id)
        # The same rule as `/memory` (a person may always see and change their own notes): the
        # store is the conversation's, never something the button says.
        holder = holder_of(chat_kind=click.chat_kind, platform=binding.platform, workspace=click.workspace,
                           channel=click.channel, person_id=person, allow_personal=True)
        if isinstance(holder, NoStore):
            return MemoryClickOutcome(None, GONE)
        from gateway.outbound.adapter import ReplyTarget  # that module imports this one's card

        where = ReplyTarget(binding.platform, binding.id, click.workspace, click.channel, None, click.chat_kind)
        refusal = await self.may_change(holder, where, click.clicker)
        if refusal is not None:  # logged where it is decided
            return MemoryClickOutcome(None, refusal)
        action, arg = parsed
        by = f" ({click.clicker.display_name or click.clicker.account_id})" if holder.kind == CHAT else ""
        if action is MemoryAction.ERASE:
            return MemoryClickOutcome(await self.card(holder, confirm=self._ask(click, holder)))
        if action is MemoryAction.CANCEL:
            return MemoryClickOutcome(await self.card(holder, status="Nothing was erased."))
        if action is MemoryAction.CONFIRM:
            refusal = self._answer(click, holder, arg)
            if refusal is not None:
                return MemoryClickOutcome(await self.card(holder), refusal)
            count = await self._notes.erase_held(holder)
            return MemoryClickOutcome(await self.card(holder, status=f"Erased {count} note{'s' if count != 1 else ''}{by}."))
        note = await self._note(holder, arg)
        if note is None:
            return MemoryClickOutcome(None, GONE)
        scope, label = holder.scope(note.agent_id), f"`{note.agent_id}/{note.name}`"
        if action is MemoryAction.DELETE:
            await self._notes.remove(scope, note.name)
            status = f"Deleted {label}{by}."
        else:
            await self._notes.suppress(scope, note.name, action is MemoryAction.STOP)
            status = (f"Stopped using {label}{by}: no agent reads it now." if action is MemoryAction.STOP
                      else f"{label} is in use again{by}.")
        return MemoryClickOutcome(await self.card(holder, status=status))

    async def _note(self, holder: Holder, ref: str) -> Note | None:
        """The note a button names, only if it is in `holder`'s store and still the same note."""
        ident, _, _check = ref.partition(".")
        try:
            note_id = int(ident, 16)
        except ValueError:
            return None
        note = await self._notes.by_id(holder, note_id)
        return note if note is not None and note_ref(note) == ref else None

