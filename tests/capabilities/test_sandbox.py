"""sandbox: whose workspace a run touches (session_scope), on SQLite and PostgreSQL; the tools; load-time refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.sandbox import audit_log
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store.people import AccountRef, PeopleStore

from ..conftest import write_config
from .scripted import database, say_calls  # noqa: F401 (database is a fixture)
from .support import Account, Place, World, agent, slack_binding, telegram_binding, world

ALICE = Account("slack", "T1", "U1", "alice")
BOB = Account("slack", "T1", "U2", "bob")
ALICE_TG = Account("telegram", "tg", "101", "alice")
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
OTHER_CHANNEL = Place("slack", "slack", "T1", "C2", ChatKind.CHANNEL)
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
DM_BOB = Place("slack", "slack", "T1", "D2", ChatKind.DM)
DM_ALICE_TG = Place("telegram", "telegram", "tg", "101", ChatKind.DM)

WRITE = ("write_file", {"path": "drafts/summary.md", "content": "Draft: the outage began at 09:14 UTC."})
READ = ("read_file", {"path": "drafts/summary.md"})


def sandbox_agent(**config: Any) -> dict[str, dict[str, Any]]:
    return {"assistant": agent({"id": "sandbox", "config": config}, model="scripted")}


async def say(w: World, who: Account, where: Place, *calls: tuple[str, dict[str, Any]], thread: str | None = None) -> str:
    """What the model was told by the last call (a result, or a retry prompt)."""
    seen = await w.say(who, where, say_calls(*calls), thread=thread)
    said = seen.tool_results + seen.retries
    assert said, seen
    return said[-1]


async def test_conversation_scope_a_thread_keeps_its_files_and_other_threads_do_not_see_them(
        tmp_path: Path, database: dict[str, Any] | None) -> None:
    async with world(tmp_path, agents=sandbox_agent(), gateway=database) as w:
        assert (await say(w, ALICE, CHANNEL, WRITE, thread="100.1")).startswith("Created drafts/summary.md.")
        assert "the outage began at 09:14 UTC" in await say(w, ALICE, CHANNEL, READ, thread="100.1"), \
            "the next turn of the thread sees it"
        assert "the outage began" in await say(w, BOB, CHANNEL, READ, thread="100.1"), "everyone in that chat does"
        other = await say(w, ALICE, CHANNEL, READ, thread="200.1")
        assert "There is no file 'drafts/summary.md'" in other and "09:14" not in other, "another thread does not"
        assert "09:14" not in await say(w, ALICE, DM_ALICE, READ)
        assert (await say(w, ALICE, CHANNEL, ("ls", {}), thread="200.1")) == "The workspace is empty."


async def test_user_scope_follows_the_person_and_is_never_opened_where_a_channel_listens(
        tmp_path: Path, database: dict[str, Any] | None) -> None:
    async with world(tmp_path, agents=sandbox_agent(session_scope="user"), gateway=database) as w:
        assert (await say(w, ALICE, DM_ALICE, WRITE)).startswith("Created")
        assert "09:14" in await say(w, ALICE, DM_ALICE, READ)
        other = await say(w, BOB, DM_BOB, READ)
        assert "There is no file" in other and "09:14" not in other, "another person's DM does not see it"

        await w.person(ALICE_TG)
        await PeopleStore(w.gw.store).link(AccountRef("telegram", "tg", "101"), await w.person(ALICE), actor="test")
        assert "09:14" in await say(w, ALICE_TG, DM_ALICE_TG, READ), "the same person on another surface does"

        for calls in (READ, ("ls", {}), ("grep", {"pattern": "outage"}), WRITE):
            said = await say(w, ALICE, CHANNEL, calls, thread="300.1")
            assert said.startswith("Refused:") and "one-to-one conversation" in said and "09:14" not in said


async def test_channel_scope_is_shared_by_a_channels_threads_but_not_by_dms_or_other_channels(tmp_path: Path) -> None:
    async with world(tmp_path, agents=sandbox_agent(session_scope="channel")) as w:
        await say(w, ALICE, CHANNEL, WRITE, thread="100.1")
        assert "09:14" in await say(w, BOB, CHANNEL, READ, thread="200.1")
        assert "09:14" not in await say(w, ALICE, OTHER_CHANNEL, READ, thread="300.1")
        assert "09:14" not in await say(w, ALICE, DM_ALICE, READ)


async def test_run_scope_is_fresh_every_turn(tmp_path: Path) -> None:
    async with world(tmp_path, agents=sandbox_agent(session_scope="run")) as w:
        assert "09:14" in await say(w, ALICE, DM_ALICE, WRITE, READ), "within the turn it is there"
        assert "There is no file" in await say(w, ALICE, DM_ALICE, READ)


async def test_two_agents_never_share_a_workspace(tmp_path: Path) -> None:
    agents = {**sandbox_agent(session_scope="user"),
              "other": agent({"id": "sandbox", "config": {"session_scope": "user"}}, model="scripted")}
    bindings = {"slack": slack_binding(), "telegram": telegram_binding(agent="other")}
    async with world(tmp_path, agents=agents, bindings=bindings) as w:
        await say(w, ALICE, DM_ALICE, WRITE)
        assert "09:14" in await say(w, ALICE, DM_ALICE, READ)
        await w.person(ALICE_TG)
        await PeopleStore(w.gw.store).link(AccountRef("telegram", "tg", "101"), await w.person(ALICE), actor="test")
        assert await w.person(ALICE_TG) == await w.person(ALICE)
        assert "There is no file" in await say(w, ALICE_TG, DM_ALICE_TG, READ)


async def test_agent_scope_says_whose_workspace_it_is_and_audits_every_access(tmp_path: Path) -> None:
    async with world(tmp_path, agents=sandbox_agent(session_scope="agent")) as w:
        assert any("session_scope: agent shares one workspace" in str(p) for p in w.gw.config.warnings)
        said = await say(w, ALICE, DM_ALICE, WRITE)
        assert said.startswith("[the workspace shared by everyone who talks to agent 'assistant'")
        assert "09:14" in await say(w, BOB, DM_BOB, READ), "a person sees a file somebody else wrote"
        audit = await audit_log(w.gw.store.capability_state, "assistant")
        assert [(a["tool"], a["path"], a["name"]) for a in audit] == [
            ("write_file", "drafts/summary.md", "alice"), ("read_file", "drafts/summary.md", "bob")]
        assert all(a["conversation"] and a["run"] and a["at"] for a in audit)


async def test_the_file_tools(tmp_path: Path) -> None:
    async with world(tmp_path, agents=sandbox_agent(max_bytes=1000)) as w:
        t = "100.1"
        await say(w, ALICE, CHANNEL, ("write_file", {"path": "/workspace/a.md", "content": "one\ntwo TODO\nthree"}),
                  ("write_file", {"path": "notes/b.md", "content": "todo: tea"}),
                  ("write_file", {"path": "notes/deep/c.csv", "content": "x,1"}), thread=t)
        assert await say(w, ALICE, CHANNEL, ("ls", {}), thread=t) == "a.md (18 bytes)\nnotes/"
        assert await say(w, ALICE, CHANNEL, ("ls", {"path": "notes"}), thread=t) == "b.md (9 bytes)\ndeep/"
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "**/*.md"}), thread=t) == \
            "a.md (18 bytes)\nnotes/b.md (9 bytes)"
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "*.csv"}), thread=t) == "No file matches '*.csv'."
        # `**` spans folders (none too), `*` and `?` stay in one name, `[…]` is a set: gateway/patterns.py.
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "notes/**"}), thread=t) == \
            "notes/b.md (9 bytes)\nnotes/deep/c.csv (3 bytes)"
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "notes/*"}), thread=t) == "notes/b.md (9 bytes)"
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "**/**/?.[cm]*"}), thread=t) == \
            "a.md (18 bytes)\nnotes/b.md (9 bytes)\nnotes/deep/c.csv (3 bytes)"
        assert await say(w, ALICE, CHANNEL, ("glob", {"pattern": "[!a]*"}), thread=t) == "No file matches '[!a]*'."
        assert await say(w, ALICE, CHANNEL, ("grep", {"pattern": "todo", "ignore_case": True}), thread=t) == \
            "a.md:2: two TODO\nnotes/b.md:1: todo: tea"
        assert (await say(w, ALICE, CHANNEL, ("edit_file", {"path": "a.md", "old_text": "two", "new_text": "2"}),
                          thread=t)).startswith("Replaced 1 passage in a.md.")
        assert "one\n2 TODO\nthree" in await say(w, ALICE, CHANNEL, ("read_file", {"path": "a.md"}), thread=t)
        said = await say(w, ALICE, CHANNEL, ("read_file", {"path": "a.md", "offset": 2, "limit": 1}), thread=t)
        assert said == 'a.md (16 bytes, 3 lines; showing 2-2):\n2 TODO\n(lines 3-3 not shown; call ' \
                       'read_file(path="a.md", offset=3))'
        assert "a.md has 3 lines, so there is no line 9" in await say(
            w, ALICE, CHANNEL, ("read_file", {"path": "a.md", "offset": 9}), thread=t)
        assert "occurs 2 times" in await say(w, ALICE, CHANNEL, (
            "edit_file", {"path": "notes/deep/c.csv", "old_text": ",", "new_text": ";"}),
            ("edit_file", {"path": "notes/b.md", "old_text": "t", "new_text": "T"}), thread=t)
        said = await say(w, ALICE, CHANNEL, ("write_file", {"path": "big.txt", "content": "x" * 990}), thread=t)
        assert said.startswith("Not saved: the workspace holds at most 1,000 bytes")
        assert "big.txt" not in await say(w, ALICE, CHANNEL, ("ls", {}), thread=t)
        assert "is not a regular expression" in await say(w, ALICE, CHANNEL, ("grep", {"pattern": "("}), thread=t)
        assert "'a.md' is a file, so it cannot hold" in await say(
            w, ALICE, CHANNEL, ("write_file", {"path": "a.md/x.md", "content": "x"}), thread=t)
        assert "'notes' is a folder here" in await say(
            w, ALICE, CHANNEL, ("write_file", {"path": "notes", "content": "x"}), thread=t)
        assert await say(w, ALICE, CHANNEL, ("ls", {"path": "a.md"}), thread=t) == \
            "a.md is a file (16 bytes); read it with read_file."


async def test_credentials_and_the_system_tree_are_off_limits(tmp_path: Path) -> None:
    async with world(tmp_path, agents=sandbox_agent()) as w:
        t = "100.1"
        for path in (".env", "keys/server.pem", "home/.ssh/id_rsa", "/etc/passwd", "credentials.json"):
            said = await say(w, ALICE, CHANNEL, ("write_file", {"path": path, "content": "SECRET=1"}), thread=t)
            assert said.startswith("Refused:") and "off limits" in said, path
            said = await say(w, ALICE, CHANNEL, ("read_file", {"path": path}), thread=t)
            assert said.startswith("Refused:"), path
        assert "No match" in await say(w, ALICE, CHANNEL, ("grep", {"pattern": "SECRET"}), thread=t)


async def test_execute_is_declared_not_offered_and_can_already_be_gated_and_renamed(tmp_path: Path) -> None:
    entry = {"id": "sandbox", "tool_approval": {"execute": "required"},
             "tool_overrides": {"execute": {"name": "run_shell"}, "write_file": {"name": "save_file"}}}
    async with world(tmp_path, agents={"assistant": agent(entry, model="scripted")}) as w:
        seen = await w.run(ALICE, DM_ALICE, "hello")
        assert set(seen.tools) == {"ls", "read_file", "glob", "grep", "save_file", "edit_file", "share_file", "fetch_file"}
        assert "There is no shell" in seen.instructions[0]


def problems_of(cfg: Path) -> list[str]:
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    return [str(p) for p in e.value.problems if not p.warning]


@pytest.mark.parametrize(("config", "message"), [
    ({"include_execute": True}, "include_execute: include_execute: true needs a container backend"),
    ({"backend": "service"}, "backend: backend: service needs a container sandbox"),
    ({"session_scope": "team"}, "session_scope: Input should be 'run', 'conversation', 'channel', 'user' or 'agent'"),
    ({"max_bytes": 10}, "max_bytes: Input should be greater than or equal to 1000"),
])
def test_what_cannot_work_is_refused_at_load_with_file_and_line(tmp_path: Path, config: dict[str, Any],
                                                                message: str) -> None:
    cfg = write_config(tmp_path, agents=sandbox_agent(**config))
    [problem] = problems_of(cfg)
    assert problem.startswith(f"{cfg / 'agents' / 'assistant.yaml'}:")
    assert f"capabilities.0.config.{message}" in problem


async def test_a_binding_denies_a_tool_the_agent_grants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tools-config "Permission policies": deny means not offered. The Slack binding withholds
    write_file; the Telegram binding of the same agent still offers it."""
    bindings = {"slack": slack_binding(deny_tools=["write_file"]), "telegram": telegram_binding()}
    async with world(tmp_path, agents=sandbox_agent(), bindings=bindings) as w:
        seen = await w.say(ALICE, CHANNEL, say_calls(WRITE), thread="100.1")
        assert "write_file" not in seen.tools and "read_file" in seen.tools
        assert any("write_file" in r and "Unknown tool" in r for r in seen.retries), seen.retries
        assert (await say(w, ALICE, CHANNEL, ("ls", {}), thread="100.1")) == "The workspace is empty."
        telegram = await w.say(ALICE_TG, DM_ALICE_TG, say_calls(WRITE))
        assert "write_file" in telegram.tools and telegram.tool_results[-1].startswith("Created")

    cfg = write_config(tmp_path / "bad", agents=sandbox_agent(), bindings={"slack": slack_binding(deny_tools=["rm_rf"])})
    extensions.register_checks()
    with pytest.raises(ConfigError) as refused:
        load_config(cfg)
    assert "deny_tools.0: no capability offers a tool 'rm_rf'" in str(refused.value)
    assert str(cfg / "bindings" / "slack.yaml") in str(refused.value)
