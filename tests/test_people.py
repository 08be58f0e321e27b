"""One person across platforms: a link made on purpose by a one-time code (or by an admin), the
memory that follows the person and never widens a group's, and the commands around it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.ops import cli
from gateway.clock import ManualClock
from gateway.inbound.commands import COMMANDS, LINK_TRIES, LINK_TRIES_WINDOW, help_text, parse_command
from gateway.messages import ChatKind
from gateway.store.engine import create_engine, migrate
from gateway.store.models import LinkCode
from gateway.store.people import LINK_TTL, AccountRef, PeopleStore
from gateway.store.repo import Store
from tests.conftest import write_config

from .capabilities.support import Account, Place, World, agent, slack_binding, telegram_binding, world

ALICE = Account("slack", "T1", "U1", "alice")
ALICE_TG = Account("telegram", "tg", "101", "alice")
MALLORY_TG = Account("telegram", "tg", "666", "mallory")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
DM_ALICE_TG = Place("telegram", "telegram", "tg", "101", ChatKind.DM)
DM_MALLORY_TG = Place("telegram", "telegram", "tg", "666", ChatKind.DM)
GROUP_TG = Place("telegram", "telegram", "tg", "-500", ChatKind.GROUP)

CODE = re.compile(r"/link ([A-Z0-9]{4}-[A-Z0-9]{4})")


async def _code(w: World, who: Account, where: Place) -> str:
    reply = await w.command(who, where, "/link")
    match = CODE.search(reply)
    assert match, reply
    return match[1]


async def test_a_link_by_code_makes_notes_follow_the_person_and_never_widens_a_group(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        code = await _code(w, ALICE, DM_ALICE)
        reply = await w.command(ALICE_TG, DM_ALICE_TG, f"/link {code.lower()}")  # as typed on a phone
        assert reply.startswith("Linked: this account is now the same person as your account on Slack.")
        assert await w.person(ALICE_TG) == await w.person(ALICE)

        # A note written in the Telegram DM is read in the Slack DM: one person, one store.
        await w.say(ALICE_TG, DM_ALICE_TG, "write_memory name=tea.md content=green-tea")
        seen = await w.say(ALICE, DM_ALICE, "read_memory name=tea.md")
        assert seen.tool_results and seen.tool_results[0].endswith("green-tea")

        # In a group the chat's store is used, linked or not: her notes are not read to the room.
        seen = await w.say(ALICE_TG, GROUP_TG, "list_memory")
        assert "tea.md" not in seen.text and "green-tea" not in seen.text

        whoami = await w.command(ALICE_TG, DM_ALICE_TG, "/whoami")
        assert "2 accounts" in whoami and "slack:T1:U1" in whoami and "telegram:tg:101" in whoami


async def test_a_used_or_wrong_code_links_nothing_and_reveals_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        code = await _code(w, ALICE, DM_ALICE)
        assert (await w.command(ALICE_TG, DM_ALICE_TG, f"/link {code}")).startswith("Linked")
        reply = await w.command(MALLORY_TG, DM_MALLORY_TG, f"/link {code}")  # used once already
        assert reply.startswith("That code doesn't work") and "alice" not in reply.lower()
        assert await w.person(MALLORY_TG) != await w.person(ALICE)
        reply = await w.command(MALLORY_TG, DM_MALLORY_TG, "/link ABCD-EFGH")
        assert reply.startswith("That code doesn't work")
        # Codes are kept only as a hash.
        async with w.gw.store.sessions() as s:
            from sqlalchemy import select

            assert code.replace("-", "") not in [row.code_hash for row in await s.scalars(select(LinkCode))]


async def test_wrong_codes_are_throttled_per_account_with_a_time_to_try_again(tmp_path: Path) -> None:
    """Guessing meets a wall: five wrong codes in ten minutes and this account waits, even with a right one
    (docs/security.md, "The web chat and the HTTP API")."""
    clock = ManualClock()
    async with world(tmp_path, clock=clock) as w:
        for n in range(LINK_TRIES):
            reply = await w.command(MALLORY_TG, DM_MALLORY_TG, f"/link ABCD-EFG{n + 2}")
            assert reply.startswith("That code doesn't work"), reply
        code = await _code(w, ALICE, DM_ALICE)
        reply = await w.command(MALLORY_TG, DM_MALLORY_TG, f"/link {code}")
        until = clock.now() + LINK_TRIES_WINDOW
        assert reply.startswith("Too many wrong link codes from this account: try again after "
                                f"{until:%H:%M} UTC (in 10 minutes)"), reply
        assert await w.person(MALLORY_TG) != await w.person(ALICE), "a throttled account was linked"
        # Another account is not throttled by Mallory's guesses; the code still works for it.
        assert (await w.command(ALICE_TG, DM_ALICE_TG, f"/link {code}")).startswith("Linked")
        clock.advance(LINK_TRIES_WINDOW.total_seconds() + 1)
        reply = await w.command(MALLORY_TG, DM_MALLORY_TG, "/link ABCD-EFGH")
        assert reply.startswith("That code doesn't work"), "the throttle outlived its window"


async def test_linking_happens_only_in_a_direct_message_and_can_be_switched_off(tmp_path: Path) -> None:
    bindings = {"slack": slack_binding(), "telegram": telegram_binding(self_linking=False)}
    async with world(tmp_path, agents={"assistant": agent({"id": "memory_files"})}, bindings=bindings) as w:
        group = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
        assert (await w.command(ALICE, group, "/link")) == "`/link` works in a direct message with me, not here."
        code = await _code(w, ALICE, DM_ALICE)
        reply = await w.command(ALICE_TG, DM_ALICE_TG, f"/link {code}")
        assert reply.startswith("Linking accounts yourself is switched off here")
        assert await w.person(ALICE_TG) != await w.person(ALICE)


async def test_unlink_gives_the_account_a_person_of_its_own(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert (await w.command(ALICE_TG, DM_ALICE_TG, "/unlink")) == "This account isn't linked to any other."
        code = await _code(w, ALICE, DM_ALICE)
        await w.command(ALICE_TG, DM_ALICE_TG, f"/link {code}")
        assert (await w.command(ALICE_TG, DM_ALICE_TG, "/unlink")).startswith("Unlinked")
        assert await w.person(ALICE_TG) != await w.person(ALICE)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'people.db'}")
    await migrate(engine)
    store = Store(engine, ManualClock())
    yield store
    await store.close()


async def test_a_code_expires(store: Store) -> None:
    people = PeopleStore(store)
    ada = (await store.identify("slack", "T1", "U1", "Ada")).person_id
    code = await people.issue_code(ada)
    store.clock.advance(LINK_TTL.total_seconds() + 1)  # type: ignore[attr-defined]
    assert await people.redeem(code, AccountRef("telegram", "tg", "101")) is None
    assert await people.person_of(AccountRef("telegram", "tg", "101")) is None


def test_help_is_the_command_table_for_the_chat_kind() -> None:
    dm, group = help_text(ChatKind.DM), help_text(ChatKind.GROUP)
    for spec in COMMANDS:
        if spec.hidden:
            assert f"/{spec.name}`" not in dm
        elif spec.where == "dm":
            assert f"`{spec.usage}`:" in dm and f"`{spec.usage}`:" not in group and f"`/{spec.name}`" in group
        else:
            assert spec.usage in dm and spec.usage in group
    assert parse_command("/etc/passwd is a file") is None, "a path is not a command"
    assert parse_command("!important: read this") is None, "`!` is a command only for known names"
    unknown = parse_command("/frobnicate now")
    assert unknown is not None and unknown.name == "" and unknown.typed == "frobnicate"


async def test_help_and_an_unknown_command_are_answered_without_a_model_run(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert "/link [CODE]" in await w.command(ALICE, DM_ALICE, "/help")
        assert (await w.command(ALICE, DM_ALICE, "/frobnicate")) == "I don't know the command `/frobnicate`. Try `/help`."
        assert await w.gw.store.runs_in(["queued", "running", "finished"]) == []


async def test_new_starts_a_fresh_conversation_in_a_dm(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say(ALICE, DM_ALICE, "hello")
        before = await w.gw.store.conversation_by_key("slack:T1:D1")
        assert before is not None
        await w.command_public(ALICE, DM_ALICE, "/new")
        await w.say(ALICE, DM_ALICE, "hello again")
        after = await w.gw.store.conversation_by_key("slack:T1:D1")
        assert after is not None and after.id != before.id
        assert [m.text for m in await w.gw.store.messages(after.id) if m.role == "user"] == ["hello again"]


async def test_an_admin_links_and_unlinks_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path / "config")
    engine = create_engine(f"sqlite+aiosqlite:///{cfg / 'gateway.db'}")
    await migrate(engine)
    store = Store(engine)
    ada = (await store.identify("slack", "T1", "U1", "Ada")).person_id
    await store.identify("telegram", "tg", "101", "Ada")
    await store.close()

    def run(*argv: str) -> tuple[int, str]:
        code = cli.main([*argv, "--config", str(cfg)])
        out = capsys.readouterr()
        return code, out.out + out.err

    import asyncio

    code, out = await asyncio.to_thread(run, "people", "link", "telegram:tg:101", "slack:T1:U1", "--actor", "root")
    assert code == 0 and f"to person {ada}" in out
    code, out = await asyncio.to_thread(run, "people", "show", "slack:T1:U1")
    assert code == 0 and "telegram:tg:101" in out and "link   telegram:tg:101  by admin:root" in out
    code, out = await asyncio.to_thread(run, "people", "unlink", "telegram:tg:101", "--actor", "root")
    assert code == 0
    code, out = await asyncio.to_thread(run, "people", "show", ada)
    assert "telegram:tg:101  Ada" not in out and "unlink telegram:tg:101  by admin:root" in out
    code, out = await asyncio.to_thread(run, "people", "link", "nonsense", "slack:T1:U1")
    assert code == 2 and "platform:workspace:account" in out


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_first_contact_seen_by_two_replicas_at_once_is_one_person(engine: str, tmp_path: Path) -> None:
    """Two replicas meet the same new account at the same moment (each its own Store on one
    database): both resolve it to the same person, and a later name change is kept."""
    import asyncio

    from tests.conftest import database_url

    async with database_url(engine, tmp_path) as url:
        engines = [create_engine(url), create_engine(url)]
        try:
            await migrate(engines[0])
            a, b = Store(engines[0]), Store(engines[1])
            found = await asyncio.gather(*(s.identify("slack", "T1", f"U{i}", f"Person {i}")
                                           for i in range(20) for s in (a, b)))
            assert all(found[2 * i].person_id == found[2 * i + 1].person_id for i in range(20))
            assert len({f.person_id for f in found}) == 20
            b.forget_identity("slack", "T1", "U0")
            again = await b.identify("slack", "T1", "U0", "Person Zero")
            assert again.person_id == found[0].person_id and again.display_name == "Person Zero"
            (account,) = await PeopleStore(a).accounts(found[0].person_id)
            assert (account.account_id, account.display_name) == ("U0", "Person Zero")
        finally:
            for e in engines:
                await e.dispose()
