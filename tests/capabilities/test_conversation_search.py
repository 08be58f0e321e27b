"""conversation_search: a phrase said elsewhere is found, only in a one-to-one chat, only among the person's own."""

from __future__ import annotations

import re
from pathlib import Path

from capabilities.conversation_search import GROUP_REFUSAL
from gateway.messages import ChatKind
from gateway.store.people import AccountRef, PeopleStore

from .knowledge_script import SCRIPT, call, scripted_agent, world_on
from .support import Account, Place

ALICE = Account("slack", "T1", "U1", "alice")
ALICE_TG = Account("telegram", "tg", "101", "alice")
BOB = Account("slack", "T1", "U2", "bob")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
DM_ALICE_TG = Place("telegram", "telegram", "tg", "101", ChatKind.DM)
DM_ALICE_2 = Place("slack", "slack", "T1", "D4", ChatKind.DM)
DM_ALICE_3 = Place("slack", "slack", "T1", "D3", ChatKind.DM)
DM_BOB = Place("slack", "slack", "T1", "D2", ChatKind.DM)
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
TEAM = Place("slack", "slack", "T1", "C2", ChatKind.CHANNEL)
AGENTS = {"assistant": scripted_agent({"id": "conversation_search", "config": {"window_messages": 10}})}


async def test_a_phrase_said_in_another_conversation_is_found_and_a_group_is_refused(
        tmp_path: Path, db_url: str | None) -> None:
    async with world_on(tmp_path, db_url, agents=AGENTS) as w:
        await w.run(ALICE, CHANNEL, "We settled the Q3 pricing at twelve dollars a seat.")
        await w.run(BOB, TEAM, "Bob alone decided the Q3 pricing of the secret plan.")
        await w.run(ALICE, DM_ALICE, "Something unrelated about lunch.")

        await w.run(ALICE, DM_ALICE, call("search_conversations", query='"q3 pricing"'))
        [found] = SCRIPT.results
        assert found.startswith("1 conversation matched '\"q3 pricing\"', best first:\n1. id ")
        assert "Slack channel" in found and "1 message matched" in found
        # FTS5 bolds a phrase whole, PostgreSQL each word.
        assert "> We settled the **Q3 pricing** at twelve dollars a seat." in found.replace("** **", " ")
        assert "secret plan" not in found, "a channel Alice never spoke in is not hers"
        conversation_id = re.search(r"id (\S+) —", found).group(1)

        await w.run(ALICE, DM_ALICE, call("read_conversation", conversation_id=conversation_id))
        assert SCRIPT.results[-1].startswith(f"Conversation {conversation_id} (Slack channel), messages 1–2 of 2:")
        assert "USER (alice): We settled the Q3 pricing at twelve dollars a seat." in SCRIPT.results[-1]
        assert "\nAI: ok" in SCRIPT.results[-1]

        SCRIPT.results.clear()
        await w.run(ALICE, CHANNEL, call("search_conversations", query="pricing"))
        await w.run(ALICE, CHANNEL, call("read_conversation", conversation_id=conversation_id))
        assert SCRIPT.results == [GROUP_REFUSAL, GROUP_REFUSAL] and not SCRIPT.retries, "a refusal is text"


async def test_another_persons_conversations_are_never_reached(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        await w.run(ALICE, DM_ALICE, "my salary is confidential-zebra")
        await w.run(BOB, DM_BOB, call("search_conversations", query="zebra or confidential-zebra"))
        assert SCRIPT.results[-1].startswith("Nothing in this person's conversations matched")
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="confidential-zebra"))
        alice_dm = re.search(r"id (\S+) —", SCRIPT.results[-1]).group(1)
        before = len(SCRIPT.results)
        await w.run(BOB, DM_BOB, call("read_conversation", conversation_id=alice_dm))
        assert SCRIPT.retries == [f"There is no conversation '{alice_dm}' among this person's. "
                                  "Use an id from search_conversations."]
        assert len(SCRIPT.results) == before, "nothing of Alice's conversation reached Bob's run"


async def test_linked_accounts_search_as_one_person(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        await w.run(ALICE, DM_ALICE, "the launch date is the ninth")
        await w.run(ALICE_TG, DM_ALICE_TG, "said on telegram before the link: the budget is frozen")
        await PeopleStore(w.gw.store).link(AccountRef("telegram", "tg", "101"), await w.person(ALICE), actor="test")
        await w.run(ALICE_TG, DM_ALICE_TG, call("search_conversations", query="launch"))
        assert "Slack direct message" in SCRIPT.results[-1] and "**launch**" in SCRIPT.results[-1]
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="budget"))
        assert "Telegram direct message" in SCRIPT.results[-1], "a linked account brings its earlier conversations"

        await PeopleStore(w.gw.store).unlink(AccountRef("telegram", "tg", "101"), actor="test")
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="frozen"))
        assert "Telegram" not in SCRIPT.results[-1] and "budget is" not in SCRIPT.results[-1], \
            "an unlinked account's conversations are no longer this person's"


async def test_words_are_whole_and_unstemmed_and_the_tool_says_so(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        await w.run(ALICE, CHANNEL, "The meetings ran long; draft notes follow.")
        await w.run(ALICE, TEAM, "One meeting, final notes.")
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="meeting"))
        assert SCRIPT.results[-1].startswith("1 conversation matched") and "One **meeting**" in SCRIPT.results[-1]
        await w.run(ALICE, DM_ALICE_2, call("search_conversations", query="meetings or meeting"))
        found = SCRIPT.results[-1]
        assert "The **meetings** ran long" in found and "One **meeting**" in found
        await w.run(ALICE, DM_ALICE_3, call("search_conversations", query="notes -draft"))
        assert "final **notes**" in SCRIPT.results[-1] and "ran long" not in SCRIPT.results[-1]
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="-draft"))
        assert SCRIPT.retries[-1].startswith("a leading - only excludes a word")
        description = SCRIPT.requests[-1].descriptions["search_conversations"]
        assert 'Words are matched whole\nand case-folded but NOT stemmed: "meeting" does not find "meetings"' in description


async def test_a_long_conversation_is_read_a_window_at_a_time(tmp_path: Path) -> None:
    async with world_on(tmp_path, agents=AGENTS) as w:
        for i in range(6):  # 6 turns: 12 messages
            await w.run(ALICE, DM_ALICE_3, f"status update number {i}")
        await w.run(ALICE, DM_ALICE, call("search_conversations", query="update"))
        conversation_id = re.search(r"id (\S+) —", SCRIPT.results[-1]).group(1)
        await w.run(ALICE, DM_ALICE, call("read_conversation", conversation_id=conversation_id))
        first = SCRIPT.results[-1]
        assert "messages 1–10 of 12" in first and first.endswith(
            f'[call read_conversation(conversation_id="{conversation_id}", window=2) for messages 11–12]')
        await w.run(ALICE, DM_ALICE, call("read_conversation", conversation_id=conversation_id, window=2))
        assert "messages 11–12 of 12" in SCRIPT.results[-1] and "USER: status update number 5" in SCRIPT.results[-1]
