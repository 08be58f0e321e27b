"""`db backup` / `db restore` / `db current` / `db upgrade` as an operator runs them, against a live daemon.

The backup under load and `run`'s refusals are processes of their own, as an operator starts them; what
the other commands say and return is read from `cli.main` in this process (`run_cli`)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import aiohttp

from gateway.store.notes import NoteStore, Scope

from .conftest import ROOT, run_finished, running_gateway, wait_for, write_config
from .test_approvals import Chat, _config
from .test_cli import run_cli

# What a deployment must get back: its conversations and what was said, the approvals (and their
# cards) still waiting, and the notes agents keep.
KEPT = {
    "conversations": "SELECT id, key FROM conversations",
    "messages": "SELECT id, conversation_id, role FROM messages",  # an answer's text grows as it streams
    "approval_cards": "SELECT id, run_id FROM approval_cards",
    "approvals": "SELECT id, card_id, tool_name, arguments, state FROM approvals",
    "memory_notes": "SELECT agent_id, scope, owner, name, content FROM memory_notes",
}


def rows(database: Path) -> dict[str, set[tuple[Any, ...]]]:
    with sqlite3.connect(database) as db:
        return {table: set(db.execute(sql).fetchall()) for table, sql in KEPT.items()}


async def cli(*args: str) -> tuple[int, str, str]:
    """`agent-gateway ARGS` in a process of its own, as an operator runs it."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.ops.cli", *args, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def command(*args: str) -> tuple[int, str, str]:
    """The same command through `cli.main` in this process, off the test's loop (tests/test_cli.py:run_cli)."""
    done = await asyncio.to_thread(run_cli, *args)
    return done.returncode, done.stdout, done.stderr


async def test_a_backup_taken_under_load_restores_into_a_fresh_deployment(tmp_path: Path) -> None:
    live = _config(tmp_path / "live")
    backup = tmp_path / "backups" / "gateway-1.db"
    async with running_gateway(live) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        parked = await chat.say("deploy api")  # parks on a card: an approval waiting for a decision
        card = await chat.card()
        for person in ("ann", "bob"):
            await NoteStore(gw.store).write(Scope("ops", "person", person), "tea.md", f"{person} likes green tea")
        stop = asyncio.Event()
        sent: list[str] = []

        async def load() -> None:  # new conversations keep arriving while the backup runs
            async with aiohttp.ClientSession(gw.url) as s2:
                while not stop.is_set():
                    other = await Chat(s2).open()
                    sent.append((await other.say(f"status svc{len(sent)}"))["run_id"])

        loader = asyncio.create_task(load())
        await wait_for(lambda: len(sent) >= 5, timeout=30, what="load")
        before = rows(live / "gateway.db")  # committed before the backup starts: all of it must be in it
        code, out, err = await cli("db", "backup", str(backup), "--config", str(live))
        during = len(sent)
        await wait_for(lambda: len(sent) >= during + 3, timeout=30, what="load after the backup")
        stop.set()
        await loader
        assert code == 0, err
        assert f"to {backup}" in out
        # The daemon holds the database: a restore into it is refused, and loses nothing.
        code, _, err = await command("db", "restore", str(backup), "--config", str(live))
        assert code == 1 and "a daemon is running on" in err and "stop it first" in err
        assert (await gw.store.run(parked["run_id"])).status == "parked"  # type: ignore[union-attr]

    fresh = _config(tmp_path / "fresh")
    code, out, err = await command("db", "restore", str(backup), "--config", str(fresh))
    assert code == 0, err
    restored = rows(fresh / "gateway.db")
    for table, kept in before.items():
        assert kept and kept <= restored[table], f"{table}: {len(kept - restored[table])} rows lost"
    # The fresh deployment carries on: the card is decided there and its run resumes.
    async with running_gateway(fresh) as gw, aiohttp.ClientSession(gw.url) as s:
        chat.s = s
        status, _ = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, parked["run_id"]), what="the parked run, resumed")
        assert (await NoteStore(gw.store).read(Scope("ops", "person", "bob"), "tea.md")).content == (  # type: ignore[union-attr]
            "bob likes green tea")


async def test_restore_keeps_the_database_it_replaces_and_refuses_what_is_not_a_backup(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c")  # a database migrated to this version's head
    code, out, err = await command("db", "backup", str(tmp_path / "b.db"), "--config", str(config))
    assert code == 0, err
    code, _, err = await command("db", "backup", str(tmp_path / "b.db"), "--config", str(config))
    assert code == 1 and "exists: choose a new file name" in err
    (tmp_path / "junk.db").write_text("not a database")
    code, _, err = await command("db", "restore", str(tmp_path / "junk.db"), "--config", str(config))
    assert code == 1 and "is not a SQLite database" in err
    code, out, err = await command("db", "restore", str(tmp_path / "b.db"), "--config", str(config))
    assert code == 0, err
    [kept] = (tmp_path / "c").glob("gateway.db.before-restore-*")
    assert f"kept as {kept}" in out


async def test_postgresql_backup_names_the_pg_dump_to_run(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c", gateway={"database": {"url": "postgresql+asyncpg://gw:secret@db.internal/gw"}})
    code, out, err = await command("db", "backup", "/var/backups/gw.dump", "--config", str(config))
    assert code == 2 and "pg_dump" in err
    assert out.strip() == ("pg_dump --format=custom --no-owner --no-privileges --file=/var/backups/gw.dump "
                           "postgresql://gw@db.internal/gw")  # the password never printed


async def test_migrate_check_refuses_an_old_schema_until_db_upgrade(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c", gateway={"database": {"migrate": "check"}})
    (config / "gateway.db").unlink()  # a new deployment: write_config copies in a migrated database
    code, out, err = await cli("run", "--config", str(config))
    assert code == 1
    assert "this version needs" in err and "run `agent-gateway db upgrade` first" in err
    code, out, _ = await command("db", "current", "--config", str(config))
    assert code == 1 and "nothing (empty)" in out
    code, _, err = await command("approvals", "list", "--config", str(config))  # a CLI command does not migrate either
    assert code == 1 and "run `agent-gateway db upgrade` first" in err and "Traceback" not in err
    code, out, err = await command("db", "upgrade", "--config", str(config))
    assert code == 0, err
    code, out, _ = await command("db", "current", "--config", str(config))
    assert code == 0 and "(up to date)" in out
    async with running_gateway(config) as gw:
        assert gw.port


async def test_a_schema_newer_than_the_code_is_refused_naming_the_rollback(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c")  # a database migrated to this version's head
    with sqlite3.connect(config / "gateway.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0099_from_the_future'")
    code, _, err = await cli("run", "--config", str(config))
    assert code == 1 and "Traceback" not in err
    assert "0099_from_the_future" in err and "agent-gateway db restore FILE" in err
