"""Memory scope resolution, and what a person and an admin can do with the notes.

Whose notes a run touches is decided here, server-side, from who will hear the answer; the
model never names a scope:

- one to one (a DM, the web chat, the HTTP API): the person's store. Linked accounts resolve
  to one person, so the same notes follow them across surfaces.
- a group chat or channel: that chat's store (platform, workspace, channel). The speaker's own
  notes are not reachable there: what was said alone is not read back to a room.
- nobody to attribute notes to (a public or anonymous surface), or a binding with
  `memory.allow_personal: false` in a one-to-one conversation: no store at all.

Notes belong to one agent. A person can see what agents wrote about them, stop a note being
used (suppressed: no tool lists, reads or edits it; its name stays taken), use it again, delete
it, or erase everything. Stopping or deleting drops the index lines (MEMORY.md) naming the note.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.messages import ChatKind
from gateway.store.notes import CHAT, PERSON, Holder, Note, NoteStore, Scope

if TYPE_CHECKING:
    from bindings.models import DatabaseConfig
    from gateway.ops.subcommand import Load

INDEX_INJECT_LIMIT = 6_000  # a longer index is left out whole: half an index is worse than none
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
NAME_RULE = "1-100 letters, digits, '_', '-' or '.', starting with a letter or digit (e.g. diet.md)"

NO_STORE_ANONYMOUS = (
    "Memory is not available here: this conversation has nobody to keep notes for (a public or "
    "anonymous surface), so nothing was saved or read. Answer without notes and do not promise to remember."
)
NO_STORE_PERSONAL_OFF = (
    "Memory is switched off for one-to-one conversations here (the binding sets memory.allow_personal: "
    "false), so nothing was saved or read. Answer without notes and do not promise to remember."
)


@dataclass(frozen=True, slots=True)
class NoStore:
    """Why a run has no store; the sentence the tools answer with."""

    reason: str


def resolve_scope(
    *,
    agent_id: str,
    chat_kind: ChatKind,
    platform: str,
    workspace: str,
    channel: str,
    person_id: str | None,
    allow_personal: bool,
) -> Scope | NoStore:
    """The store a run may touch, from who will hear the answer. Pure, so it can be tested alone."""
    held = holder_of(chat_kind=chat_kind, platform=platform, workspace=workspace, channel=channel,
                     person_id=person_id, allow_personal=allow_personal)
    return held if isinstance(held, NoStore) else held.scope(agent_id)


def holder_of(
    *, chat_kind: ChatKind, platform: str, workspace: str, channel: str, person_id: str | None, allow_personal: bool
) -> Holder | NoStore:
    """Whose notes a conversation reaches, across agents: the same rule as a run's, for `/memory` and its buttons."""
    if chat_kind is ChatKind.DM:
        if person_id is None:
            return NoStore(NO_STORE_ANONYMOUS)
        if not allow_personal:
            return NoStore(NO_STORE_PERSONAL_OFF)
        return Holder(PERSON, person_id)
    return Holder(CHAT, chat_owner(platform, workspace, channel))


def chat_owner(platform: str, workspace: str, channel: str) -> str:
    return f"{platform}:{workspace}:{channel}"


# --- the person's view, shared by the chat command, the HTTP API and the CLI ---------------

MEMORY_HELP = (
    "`/memory` lists what agents wrote about you. `/memory stop NAME` stops a note being used (it stays, for you "
    "to look at or restore), `/memory use NAME` restores it, `/memory delete NAME` deletes it, and `/memory erase` "
    "(in a direct message) deletes everything agents keep about you. NAME is `agent/note` or a note of this agent."
)
CHAT_MEMORY_HELP = (
    "These are this chat's notes: everyone here hears what the agent makes of them, and your own notes are never "
    "used here (see them with `/memory` in a direct message with me). `/memory stop NAME`, `/memory use NAME` and "
    "`/memory delete NAME` change one, for whoever decides approvals for everyone here (the binding's deciders)."
)


def describe(notes: Sequence[Note], *, empty: str = "No agent has written anything about you.",
             heading: str = "What agents wrote about you:") -> str:
    if not notes:
        return empty
    lines = [heading]
    for n in notes:
        state = " (stopped)" if n.suppressed else ""
        lines.append(f"- `{n.agent_id}/{n.name}`{state}: {n.chars} characters, last written {n.updated_at:%Y-%m-%d %H:%M} UTC")
    return "\n".join(lines)


def about_chat(notes: Sequence[Note]) -> str:
    return describe(notes, empty="No agent keeps notes for this chat.", heading="What agents keep for this chat:")


async def self_service(
    notes: NoteStore, holder: Holder | str, action: str, target: str | None, *, default_agent: str
) -> str:
    """One action on the conversation's own notes (a person's, or a chat's), answered in a sentence.

    Whether the sender may change a chat's notes is checked by the caller (`gateway.inbound.memory_card`)."""
    holder = Holder(PERSON, holder) if isinstance(holder, str) else holder
    mine = holder.kind == PERSON
    whose = "about you" if mine else "for this chat"
    if action in ("", "list"):
        held = await notes.held(holder)
        return f"{describe(held)}\n\n{MEMORY_HELP}" if mine else f"{about_chat(held)}\n\n{CHAT_MEMORY_HELP}"
    if action == "erase":
        if not mine:  # in a group: never the person's own (they are erased in a DM, where nobody else sees it)
            return ("Here `/memory` is about this chat's notes; they are erased with the “Erase all…” button on its "
                    "card, which asks first. Yours are erased with `/memory erase` in a direct message with me.")
        count = await notes.erase_held(holder)
        return f"Erased {count} note{'s' if count != 1 else ''} agents kept about you."
    if action not in ("stop", "use", "delete") or not target:
        return MEMORY_HELP if mine else CHAT_MEMORY_HELP
    agent_id, _, name = target.rpartition("/")
    agent_id = agent_id or default_agent
    scope = holder.scope(agent_id)
    if action == "delete":
        if await notes.remove(scope, name):
            return f"Deleted `{agent_id}/{name}`."
    else:
        note = await notes.suppress(scope, name, action == "stop")
        if note is not None:
            if action == "stop":
                return f"Stopped using `{agent_id}/{name}`: no agent reads it now. `/memory use {agent_id}/{name}` restores it."
            return f"`{agent_id}/{name}` is in use again."
    return f"No note `{agent_id}/{name}` {whose}. `/memory` lists them."


# --- an administrator, from the command line ----------------------------------------------


async def admin(database: DatabaseConfig | str, action: str, person_ref: str, *, actor: str,
                reason: str) -> tuple[int, str]:
    """`agent-gateway memory show|erase`: (exit code, text). Every access is audited before it happens."""
    from gateway.store.engine import open_store

    if action == "show" and not reason.strip():
        return 2, "memory show needs --reason: it is recorded in the audit log with your name (no content)."
    async with open_store(database) as store:
        notes = NoteStore(store)
        person_id = await notes.person(person_ref)
        if person_id is None:
            return 1, f"no person {person_ref!r}: give a person id or platform:workspace:account (e.g. slack:T01:U02)"
        await notes.audit("show" if action == "show" else "erase", actor=actor, subject=person_id, reason=reason.strip())
        if action == "erase":
            count = await notes.erase(person_id)
            return 0, f"erased {count} note{'s' if count != 1 else ''} about {person_id}"
        found = await notes.about(person_id)
        if not found:
            return 0, f"no agent keeps notes about {person_id}"
        parts = []
        for n in found:
            state = "stopped by the person" if n.suppressed else "in use"
            body = "\n".join(f"    {line}" for line in n.content.splitlines()) or "    (empty)"
            parts.append(f"{n.agent_id}/{n.name} ({state}; written {n.created_at:%Y-%m-%d %H:%M}, "
                         f"changed {n.updated_at:%Y-%m-%d %H:%M} UTC)\n{body}")
        return 0, "\n\n".join(parts)


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway memory show|erase --person P`: what agents keep about a person, read or erased (audited)."""
    import asyncio
    import os

    from gateway.ops.subcommand import answer, subcommand

    def run(args: Any, config: Any) -> int:
        return answer(*asyncio.run(admin(config.gateway.database, args.action, args.person, actor=args.actor,
                                         reason=args.reason)))

    subcommand(p, load, run, actions={"show": "", "erase": ""})
    p.add_argument("--person", required=True, help="a person id, or platform:workspace:account (e.g. slack:T01:U02)")
    p.add_argument("--reason", default="", help="why (required for show; recorded in the audit log)")
    p.add_argument("--actor", default=os.environ.get("USER") or "unknown", help="who is asking (default $USER)")
