"""channel_tools against a fake directory: bound to the conversation's channel, offered only where answerable."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gateway.messages import ChatKind
from gateway.outbound.adapter import CHANNEL_TOOL_IDS, ChannelInfo, ChannelMember, HistoryMessage

from ..fakes.chat import DIRECTORIES, FakeDirectory
from ..conftest import wait_for
from .support import Account, Place, agent, slack_binding, telegram_binding, world

ALICE = Account("slack", "T1", "U1", "alice")
GENERAL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
SECRET = Place("slack", "slack", "T1", "C9", ChatKind.CHANNEL)  # the bot is not in it
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
WEB = Place("web", "web", "local", "conv-1", ChatKind.DM)
ALL = list(CHANNEL_TOOL_IDS)


def directory(**extra: Any) -> FakeDirectory:
    return FakeDirectory(
        channels={"C1": ChannelInfo("C1", "general", purpose="Company-wide", member_count=3, is_private=False),
                  "C2": ChannelInfo("C2", "design", purpose="Design reviews")},
        members={"C1": [ChannelMember(f"U{i}", f"user{i}", f"User {i}") for i in range(30)]},
        history={"C1": [HistoryMessage("bob", f"message {i}", datetime(2025, 1, 1, 9, i, tzinfo=timezone.utc))
                        for i in range(30)],
                 "C1/7.000": [HistoryMessage("carol", "in the thread")]},
        **extra,
    )


def bindings(tools: list[str], **extra: Any) -> dict[str, dict[str, Any]]:
    return {
        "slack": slack_binding(channel_tools={"tools": tools, "default_limit": 5}, **extra),
        "telegram": telegram_binding(),
        "web": {"platform": "web", "agent": "assistant", "channel_tools": {"tools": ALL}},
    }


async def test_tools_take_no_channel_and_answer_about_the_conversations_channel(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = fake = directory()
        seen = await w.run(ALICE, GENERAL, "get_channel_info")
        assert seen.tools == sorted(ALL)
        for tool in seen.defs.values():
            props = tool.parameters_json_schema.get("properties", {})
            assert not {"channel", "channel_id", "target"} & set(props), f"{tool.name} must not take a channel"
        assert seen.tool_results == ["name: general\npurpose: Company-wide\nmembers: 3\nprivate: no"]
        assert fake.calls == [("channel_info", "C1", "1.000")]


async def test_limit_defaults_from_the_binding_with_a_ceiling_of_200_and_truncation_is_said(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = directory()
        seen = await w.run(ALICE, GENERAL, "list_channel_members")
        limit = seen.defs["list_channel_members"].parameters_json_schema["properties"]["limit"]
        assert (limit["default"], limit["maximum"], limit["minimum"]) == (5, 200, 1)
        assert limit["description"] == "How many members to list; default 5, at most 200."
        lines = seen.tool_results[0].splitlines()
        assert lines[:5] == [f"User {i} (@user{i})" for i in range(5)]
        assert lines[5].startswith("(only the first 5 members are shown; there are more.")

        seen = await w.run(ALICE, GENERAL, "read_channel_history limit=3")
        lines = seen.tool_results[0].splitlines()
        assert lines[0].startswith("(older messages left out")
        assert lines[1:] == [f"[2025-01-01 09:{i}] bob: message {i}" for i in (27, 28, 29)]

        seen = await w.run(ALICE, GENERAL, "list_channel_members limit=500")
        assert seen.retries and not seen.tool_results, "past the ceiling is the model's mistake"


async def test_history_is_the_threads_when_asked_in_a_thread_and_the_channels_when_asked_at_top_level(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = fake = directory()
        seen = await w.say(ALICE, GENERAL, "read_channel_history", thread="7.000")
        assert seen.tool_results == ["carol: in the thread"]
        assert fake.calls[-1] == ("channel_history", "C1", "7.000")

        # A top-level mention anchors the reply thread on itself; "what was said here" is the channel.
        seen = await w.say(ALICE, GENERAL, "read_channel_history limit=1")
        assert fake.calls[-1] == ("channel_history", "C1", None)
        assert seen.tool_results[0].endswith("bob: message 29")
        seen = await w.say(ALICE, GENERAL, "read_channel_history limit=1", thread="2.000")
        assert fake.calls[-1] == ("channel_history", "C1", None), "a follow-up in that thread reads the channel too"


async def test_a_channel_the_bot_cannot_see_is_bad_news_in_text(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = directory()
        seen = await w.run(ALICE, SECRET, "read_channel_history")
        assert not seen.retries
        assert seen.tool_results == ["The bot cannot see this channel, so it cannot read its messages. It only sees "
                                     "channels it is a member of; someone would have to add it."]
        seen = await w.run(ALICE, SECRET, "search_channels query=design")
        assert seen.tool_results == ["#design — Design reviews"]


async def test_only_tools_granted_and_answerable_are_offered(tmp_path: Path) -> None:
    grant = ["get_channel_info", "search_channels", "read_channel_history"]
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(grant)) as w:
        # Like Telegram: no directory to search, no history the bot was not sent.
        DIRECTORIES["slack"] = directory(supported=frozenset({"get_channel_info", "list_channel_members"}))
        seen = await w.run(ALICE, GENERAL, "hello")
        assert seen.tools == ["get_channel_info"]


async def test_a_platform_note_is_in_that_tools_description_only(tmp_path: Path) -> None:
    note = "On this platform only administrators are listed."
    async with world(tmp_path, agents={"assistant": agent()}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = directory(notes={"list_channel_members": note})
        seen = await w.run(ALICE, GENERAL, "hello")
        members = seen.defs["list_channel_members"].description or ""
        assert members.startswith("<summary>List the people in this channel.") and note in members
        assert members.index(note) < members.index("<returns>"), "the note belongs to what the tool does"
        assert not any(note in (d.description or "") for name, d in seen.defs.items() if name != "list_channel_members")


async def test_absent_from_runs_with_no_channel_directory(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": agent({"id": "memory_files"})}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = None  # a platform with no directory at all
        seen = await w.run(ALICE, GENERAL, "hello")
        assert seen.tools == ["delete_memory", "edit_memory", "list_memory", "read_memory", "write_memory"]

        # The web chat and HTTP API have no channel: even a binding that grants the tools gets none.
        seen = await w.run(Account("web", "local", "local", "local"), WEB, "hello")
        assert seen.tools == ["delete_memory", "edit_memory", "list_memory", "read_memory", "write_memory"]


async def test_a_channel_override_can_take_the_tools_away(tmp_path: Path) -> None:
    b = bindings(ALL, channels={"C2": {"channel_tools": {"tools": []}}})
    async with world(tmp_path, agents={"assistant": agent()}, bindings=b) as w:
        DIRECTORIES["slack"] = directory()
        assert (await w.run(ALICE, GENERAL, "hello")).tools == sorted(ALL)
        assert (await w.run(ALICE, Place("slack", "slack", "T1", "C2", ChatKind.CHANNEL), "hello")).tools == []


async def test_a_renamed_gated_tool_stays_gated(tmp_path: Path) -> None:
    entry = {"id": "channel_tools", "tool_approval": {"read_channel_history": "required"},
             "tool_overrides": {"read_channel_history": {"name": "read_room", "description": "Read the room."}}}
    async with world(tmp_path, agents={"assistant": agent(entry)}, bindings=bindings(ALL)) as w:
        DIRECTORIES["slack"] = fake = directory()
        turn = await w.turn(ALICE, GENERAL, "x")
        w.gw.runner.build_agent(turn)
        assert turn.tools["read_room"].stable_id == "read_channel_history"
        assert "read_channel_history" not in turn.tools

        seen = await w.say(ALICE, GENERAL, "read_room")
        assert "read_room" in seen.tools and "read_channel_history" not in seen.tools
        assert seen.defs["read_room"].description == "Read the room."
        # The run is marked parked just before its card is posted.
        [card] = await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        assert [i.tool_name for i in card.items] == ["read_room"]
        assert not any(c[0] == "channel_history" for c in fake.calls), "nothing is read before a decision"
