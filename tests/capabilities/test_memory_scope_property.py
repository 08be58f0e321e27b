"""The memory and conversation boundary as a property: nothing of one person's reaches another's run.

Random sequences of DMs and group messages from three people (one with a Slack and a Telegram
account linked to one person) write, read and list notes, chat, search their conversations and
stop notes from the self-service side. Every run is built by the runner from a recorded message
and driven by pydantic-ai; what the model was shown (instructions and every tool result) is
checked against a model of the stores: each note content is a unique token, so a token from
another store showing up anywhere is a leak. A conversation search may show only tokens said
(by anyone, the agent included) in conversations the searching person took part in, and only
one to one: in a group it refuses.
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
from gateway.store.models import MemoryNote, Message
from gateway.store.notes import INDEX, NoteStore
from gateway.store.people import AccountRef, PeopleStore

from capabilities.conversation_search import GROUP_REFUSAL
from gateway.runs.turn import Turn

from .support import Account, Place, World, agent, world

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
    action: str  # write | read | list | chat | stop | search
    name: str
    target: int = 1  # search: which token to look for


steps = st.lists(
    st.builds(
        Step,
        person=st.sampled_from(sorted(PEOPLE)),
        account=st.integers(0, 1),
        place=st.integers(-1, len(GROUPS) - 1),
        action=st.sampled_from(["write", "write", "read", "list", "chat", "stop", "search", "search"]),
        name=st.sampled_from(NAMES),
        target=st.integers(1, 8),
    ),
    min_size=1,
    max_size=12,
)


async def play(w: World, person_ids: dict[str, str], sequence: list[Step]) -> None:
    async with w.gw.store.sessions() as s, s.begin():
        await s.execute(delete(MemoryNote))
        await s.execute(delete(Message))  # what was said in an earlier example is not in this one's model
    visible: dict[tuple[str, str], dict[str, str]] = {}  # store -> name -> token, as the agent sees it
    stopped: dict[tuple[str, str], dict[str, str]] = {}  # the person's stopped notes
    owner_of: dict[str, tuple[str, str]] = {}  # token -> the store it was written to
    said_in: dict[str, set[str]] = {}  # conversation id -> every token said in it (either side)
    took_part: dict[str, set[str]] = {}  # conversation id -> the people who said something in it
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

        conversation: list[str] = []

        def note(turn: Turn) -> Turn:
            conversation.append(turn.conversation.id)
            return turn

        if step.action == "write":
            counter += 1
            token = f"tok{counter}x"
            owner_of[token] = store
            prompt = f"write_memory name={step.name} content={token}"
            seen = await w.run(account, place, prompt, adjust=note)
            notes[step.name] = token
            stopped.get(store, {}).pop(step.name, None)  # writing a stopped name revives it
        elif step.action == "read":
            prompt = f"read_memory name={step.name}"
            seen = await w.run(account, place, prompt, adjust=note)
            if step.name in notes:
                assert notes[step.name] in seen.tool_results[0]
            else:
                assert seen.retries and not seen.tool_results, "a missing note is the model's mistake: a retry prompt"
        elif step.action == "list":
            prompt = "list_memory"
            seen = await w.run(account, place, prompt, adjust=note)
            [listing] = seen.tool_results
            listed = {line.split(" — ")[0] for line in listing.splitlines()} if notes else set()
            assert listed == set(notes) or (not notes and listing == "No notes saved yet.")
        elif step.action == "search":
            wanted = f"tok{1 + step.target % max(counter, 1)}x"  # a token written so far
            prompt = f"search_conversations query={wanted}"
            seen = await w.run(account, place, prompt, adjust=note)
            took_part.setdefault(conversation[0], set()).add(step.person)  # this message makes it theirs
            if place.kind is not ChatKind.DM:
                assert seen.tool_results == [GROUP_REFUSAL], "in a group, conversation search refuses"
            reachable = set().union(*(said_in.get(c, set()) for c, people in took_part.items()
                                      if step.person in people), {wanted})  # the answer echoes the query
            for found in re.findall(r"id (\S+) —", "\n".join(seen.tool_results)):
                assert step.person in took_part.get(found, set()), f"{step.person} found a conversation not theirs"
            for token in TOKEN.findall("\n".join(seen.tool_results)):
                assert token in reachable, f"{token} reached {step.person}'s search from a conversation not theirs"
        else:
            prompt = "hello"
            seen = await w.run(account, place, prompt, adjust=note)

        [conversation_id] = conversation
        took_part.setdefault(conversation_id, set()).add(step.person)
        said_in.setdefault(conversation_id, set()).update(TOKEN.findall(prompt + "\n" + seen.output))

        current = set(before.values()) | set(notes.values())
        shown = seen.instructions if step.action == "search" else [seen.text]  # search results are checked above
        for token in TOKEN.findall("\n".join(shown)):
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
    opened = world(tmp_path / "config", agents={"assistant": agent({"id": "memory_files"},
                                                                    {"id": "conversation_search"})})
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
