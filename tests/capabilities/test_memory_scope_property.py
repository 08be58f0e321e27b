"""The memory boundary as a property: no note reaches a run that answers someone else or a group.

Random sequences of DMs and group messages from three people (one with a Slack and a Telegram
account linked to one person) write, read and list notes, chat, and stop notes from the
self-service side. Every run is built by the runner from a recorded message and driven by
pydantic-ai; what the model was shown (instructions and every tool result) is checked against
a model of the stores: each note content is a unique token, so a token from another store
showing up anywhere is a leak.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from gateway.messages import ChatKind
from gateway.store.models import MemoryNote
from gateway.store.notes import INDEX, NoteStore
from gateway.store.people import AccountRef, PeopleStore

from .support import Account, Place, World, world

ALICE_SLACK = Account("slack", "T1", "U1", "alice")
ALICE_TG = Account("telegram", "tg", "101", "alice")
BOB = Account("slack", "T1", "U2", "bob")
CAROL = Account("slack", "T1", "U3", "carol")
PEOPLE = {"alice": (ALICE_SLACK, ALICE_TG), "bob": (BOB,), "carol": (CAROL,)}

GROUPS = (
    Place("slack", "slack", "T1", "G1", ChatKind.GROUP),
    Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL),
    Place("telegram", "telegram", "tg", "-200", ChatKind.GROUP),
)
NAMES = (INDEX, "a.md", "b.md")
TOKEN = re.compile(r"tok\d+x")


def dm(account: Account) -> Place:
    return Place(account.platform, account.platform, account.workspace, f"dm-{account.account_id}", ChatKind.DM)


@dataclass(frozen=True)
class Step:
    person: str
    account: int  # which of the person's accounts
    place: int  # -1: a DM; else an index into GROUPS
    action: str  # write | read | list | chat | stop
    name: str


steps = st.lists(
    st.builds(
        Step,
        person=st.sampled_from(sorted(PEOPLE)),
        account=st.integers(0, 1),
        place=st.integers(-1, len(GROUPS) - 1),
        action=st.sampled_from(["write", "write", "read", "list", "chat", "stop"]),
        name=st.sampled_from(NAMES),
    ),
    min_size=1,
    max_size=12,
)


async def play(w: World, person_ids: dict[str, str], sequence: list[Step]) -> None:
    async with w.gw.store.sessions() as s, s.begin():
        await s.execute(delete(MemoryNote))
    visible: dict[tuple[str, str], dict[str, str]] = {}  # store -> name -> token, as the agent sees it
    stopped: dict[tuple[str, str], dict[str, str]] = {}  # the person's stopped notes
    owner_of: dict[str, tuple[str, str]] = {}  # token -> the store it was written to
    counter = 0
    for step in sequence:
        accounts = PEOPLE[step.person]
        account = accounts[step.account % len(accounts)]
        place = dm(account) if step.place < 0 else GROUPS[step.place]
        store = ("person", step.person) if place.kind is ChatKind.DM else ("chat", place.channel)
        notes = visible.setdefault(store, {})
        before = dict(notes)  # what the run's first model request sees; later requests see `notes`

        if step.action == "stop":  # the speaker, from /memory, stops one of their own notes
            own = ("person", step.person)
            await NoteStore(w.gw.store).set_suppressed(person_ids[step.person], "assistant", step.name, True)
            if step.name in visible.get(own, {}):
                stopped.setdefault(own, {})[step.name] = visible[own].pop(step.name)
            continue

        if step.action == "write":
            counter += 1
            token = f"tok{counter}x"
            owner_of[token] = store
            seen = await w.run(account, place, f"write_memory name={step.name} content={token}")
            notes[step.name] = token
            stopped.get(store, {}).pop(step.name, None)  # writing a stopped name revives it
        elif step.action == "read":
            seen = await w.run(account, place, f"read_memory name={step.name}")
            if step.name in notes:
                assert notes[step.name] in seen.tool_results[0]
            else:
                assert seen.retries and not seen.tool_results, "a missing note is the model's mistake: a retry prompt"
        elif step.action == "list":
            seen = await w.run(account, place, "list_memory")
            [listing] = seen.tool_results
            listed = {line.split(" — ")[0] for line in listing.splitlines()} if notes else set()
            assert listed == set(notes) or (not notes and listing == "No notes saved yet.")
        else:
            seen = await w.run(account, place, "hello")

        current = set(before.values()) | set(notes.values())
        for token in TOKEN.findall(seen.text):
            assert owner_of[token] == store, f"{token} from {owner_of[token]} reached a run answering {store}"
            assert token in current, f"{token} is stopped or replaced but reached the model"
        for i, instructions in enumerate(seen.instructions):
            state = before if i == 0 else notes
            if place.kind is ChatKind.DM and INDEX in state:
                assert state[INDEX] in instructions, "one to one, the index is injected"
            if place.kind is not ChatKind.DM:
                assert not TOKEN.search(instructions), "in a group the index is never injected"


def test_no_note_reaches_another_audience(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    opened = world(tmp_path / "config")
    w = loop.run_until_complete(opened.__aenter__())
    try:
        person_ids = {}
        for name, accounts in PEOPLE.items():
            person_ids[name] = loop.run_until_complete(w.person(accounts[0]))
            for linked in accounts[1:]:
                loop.run_until_complete(w.person(linked))
                loop.run_until_complete(PeopleStore(w.gw.store).link(
                    AccountRef(linked.platform, linked.workspace, linked.account_id), person_ids[name], actor="test"))

        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(sequence=steps)
        def check(sequence: list[Step]) -> None:
            loop.run_until_complete(play(w, person_ids, sequence))

        check()
    finally:
        loop.run_until_complete(opened.__aexit__(None, None, None))
        loop.close()
