"""A person's own notes over HTTP, and an administrator's audited read and erasure from the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import select

from gateway.ops import cli
from gateway.clock import ManualClock
from gateway.inbound.memory_card import NOT_ASKED, MemoryClick, note_ref
from gateway.messages import ChatKind, Sender
from gateway.store.notes import Holder, NoteStore, Scope
from gateway.store.engine import create_engine
from gateway.store.models import MemoryAudit
from gateway.store.repo import Store

from ..conftest import run_finished, running_gateway, wait_for, write_config
from .support import agent


async def test_the_web_person_lists_stops_restores_deletes_and_erases(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, agents={"assistant": agent({"id": "memory_files"}, model="demo")})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        for text in ("write_memory name=tea.md content=green", "write_memory name=MEMORY.md content=\"- tea.md: green\""):
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": text})
            run_id = (await r.json())["run_id"]
            await wait_for(lambda: run_finished(gw, run_id), what="the write")

        mine = (await (await s.get("/api/v1/me/memory")).json())["notes"]
        assert [(n["agent"], n["name"], n["in_use"]) for n in mine] == [
            ("assistant", "MEMORY.md", True), ("assistant", "tea.md", True)]
        assert mine[1]["content"] == "green" and mine[1]["updated_at"]

        r = await s.post("/api/v1/me/memory", json={"action": "stop", "agent": "assistant", "name": "tea.md"})
        assert r.status == 200 and (await r.json())["in_use"] is False
        notes = NoteStore(gw.store)
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        assert await notes.read(Scope("assistant", "person", person), "tea.md") is None
        assert (await notes.read(Scope("assistant", "person", person), "MEMORY.md")).content == ""  # type: ignore[union-attr]

        r = await s.post("/api/v1/me/memory", json={"action": "use", "agent": "assistant", "name": "tea.md"})
        assert (await r.json())["in_use"] is True
        r = await s.post("/api/v1/me/memory", json={"action": "delete", "agent": "assistant", "name": "tea.md"})
        assert r.status == 200
        r = await s.post("/api/v1/me/memory", json={"action": "delete", "agent": "assistant", "name": "tea.md"})
        assert r.status == 404
        r = await s.post("/api/v1/me/memory", json={"action": "forget"})
        assert r.status == 400
        assert (await (await s.post("/api/v1/me/memory", json={"action": "erase"})).json()) == {"erased": 1}
        assert (await (await s.get("/api/v1/me/memory")).json()) == {"notes": []}


async def test_a_forged_borrowed_or_replayed_erase_confirmation_erases_nothing(tmp_path: Path) -> None:
    """The old "Yes, erase" carried the current minute: anyone could send it. Now it is a nonce, once
    (docs/security.md, "The web chat and the HTTP API")."""
    clock = ManualClock()
    cfg = write_config(tmp_path, agents={"assistant": agent({"id": "memory_files"}, model="demo")})
    async with running_gateway(cfg, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        notes = NoteStore(gw.store)
        await notes.write(Scope("assistant", "person", person), "tea.md", "green")

        async def click(data: str) -> dict[str, object]:
            return dict(await (await s.post("/api/v1/memory/click", json={"data": data})).json())

        forged = await click(f"y:{int(clock.now().timestamp() // 60):x}")
        assert forged["message"] == NOT_ASKED and len(await notes.about(person)) == 1
        asked = await click("e:")
        confirm = next(b["data"] for b in asked["card"]["actions"] if b["label"].startswith("Yes"))  # type: ignore[index]
        assert len(confirm) <= 24 and confirm.startswith("y:")
        # Another person, in their own conversation, with Alice's nonce: their notes stay too.
        other = (await gw.store.identify("web", "local", "mallory", "mallory")).person_id
        await notes.write(Scope("assistant", "person", other), "own.md", "mine")
        borrowed = await gw.memory_click(MemoryClick("web", "local", "mallory", ChatKind.DM, Sender("mallory", "mallory"),
                                                     confirm))
        assert borrowed.message == NOT_ASKED and len(await notes.about(other)) == 1
        done = await click(confirm)
        assert done["card"]["status"] == "Erased 1 note."  # type: ignore[index]
        await notes.write(Scope("assistant", "person", person), "coffee.md", "black")
        replayed = await click(confirm)
        assert replayed["message"] == NOT_ASKED and len(await notes.about(person)) == 1


async def test_memory_in_the_web_chat_is_a_card_whose_buttons_act_on_the_persons_own_notes(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, agents={"assistant": agent({"id": "memory_files"}, model="demo")})
    clock = ManualClock()
    async with running_gateway(cfg, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "write_memory name=tea.md content=green"})
        run_id = (await r.json())["run_id"]
        await wait_for(lambda: run_finished(gw, run_id), what="the write")
        other = (await gw.store.identify("slack", "T1", "U9", "Zed")).person_id
        await NoteStore(gw.store).write(Scope("assistant", "person", other), "zed.md", "not yours")
        [zeds] = await NoteStore(gw.store).held(Holder("person", other))

        async with gw.events.listen(conv) as events:
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "/memory"})
            body = await r.json()
            assert r.status == 200 and body["command"] is True and [a["role"] for a in body["answers"]] == ["memory"]
            event = await asyncio.wait_for(events.get(), 10)
        assert event["type"] == "memory_card"
        card = event["card"]
        [tea] = card["notes"]
        assert tea["label"] == "assistant/tea.md" and [b["label"] for b in tea["buttons"]] == ["Stop using", "Delete"]
        messages = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        # Kept in the conversation as the asker's own (never in what the model is given: test_web_conversations).
        assert [(m["role"], m["status"]) for m in messages[2:]] == [("command", "private"), ("memory", "private")]
        assert messages[3]["card"]["notes"][0]["label"] == "assistant/tea.md"

        answer = await (await s.post("/api/v1/memory/click", json={"data": tea["buttons"][0]["data"]})).json()
        assert answer["card"]["notes"][0]["in_use"] is False and "Stopped using" in answer["card"]["status"]
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        assert await NoteStore(gw.store).read(Scope("assistant", "person", person), "tea.md") is None

        forged = await (await s.post("/api/v1/memory/click", json={"data": f"d:{note_ref(zeds)}"})).json()
        assert forged["card"] is None and "gone or isn't yours" in forged["message"]
        assert [n.name for n in await NoteStore(gw.store).held(Holder("person", other))] == ["zed.md"]

        asked = await (await s.post("/api/v1/memory/click", json={"data": answer["card"]["actions"][0]["data"]})).json()
        assert "Erase all 1 note about you?" in asked["card"]["status"]
        assert len(await NoteStore(gw.store).about(person)) == 1
        confirm = next(b["data"] for b in asked["card"]["actions"] if b["label"].startswith("Yes"))
        clock.advance(11 * 60)  # a question left open too long is asked again, not taken as a yes
        late = await (await s.post("/api/v1/memory/click", json={"data": confirm})).json()
        assert "too old; nothing was erased" in late["message"] and len(await NoteStore(gw.store).about(person)) == 1
        asked = await (await s.post("/api/v1/memory/click", json={"data": answer["card"]["actions"][0]["data"]})).json()
        confirm = next(b["data"] for b in asked["card"]["actions"] if b["label"].startswith("Yes"))
        done = await (await s.post("/api/v1/memory/click", json={"data": confirm})).json()
        assert done["card"]["status"] == "Erased 1 note." and await NoteStore(gw.store).about(person) == []


def _seed(cfg: Path) -> str:
    """Two notes about Ada, through a Slack account, in the config's database; returns her person id."""

    async def seed() -> str:
        from gateway.store.engine import migrate

        engine = create_engine(f"sqlite+aiosqlite:///{cfg / 'gateway.db'}")
        await migrate(engine)
        store = Store(engine)
        person = (await store.identify("slack", "T1", "U7", "Ada")).person_id
        notes = NoteStore(store)
        await notes.write(Scope("assistant", "person", person), "health.md", "allergic to penicillin")
        await notes.write(Scope("assistant", "chat", "slack:T1:C1"), "room.md", "standup at 9")
        await engine.dispose()
        return person

    return asyncio.run(seed())


def _audit(cfg: Path) -> list[MemoryAudit]:
    async def read() -> list[MemoryAudit]:
        engine = create_engine(f"sqlite+aiosqlite:///{cfg / 'gateway.db'}")
        async with engine.connect() as conn:
            rows = list((await conn.execute(select(MemoryAudit).order_by(MemoryAudit.id))).all())
        await engine.dispose()
        return rows  # type: ignore[return-value]

    return asyncio.run(read())


def test_admin_show_is_audited_without_content_and_erase_clears_the_person(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = write_config(tmp_path)
    person = _seed(cfg)
    monkeypatch.setenv("USER", "root-admin")

    assert cli.main(["memory", "show", "--person", person, "--config", str(cfg)]) == 2
    assert "needs --reason" in capsys.readouterr().err
    assert _audit(cfg) == [], "a refused read leaves nothing to audit"

    assert cli.main(["memory", "show", "--person", "slack:T1:U7", "--reason", "subject access request #12",
                     "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "assistant/health.md (in use;" in out and "allergic to penicillin" in out
    assert "standup at 9" not in out, "a chat's notes are not the person's"
    [row] = _audit(cfg)
    assert (row.action, row.actor, row.subject, row.reason) == ("show", "root-admin", person, "subject access request #12")
    assert "penicillin" not in " ".join(str(v) for v in row)

    assert cli.main(["memory", "erase", "--person", person, "--actor", "dpo", "--config", str(cfg)]) == 0
    assert capsys.readouterr().out.strip() == f"erased 1 note about {person}"
    assert [(r.action, r.actor) for r in _audit(cfg)] == [("show", "root-admin"), ("erase", "dpo")]
    assert cli.main(["memory", "show", "--person", person, "--reason", "check", "--config", str(cfg)]) == 0
    assert capsys.readouterr().out.strip() == f"no agent keeps notes about {person}"

    assert cli.main(["memory", "erase", "--person", "nobody", "--config", str(cfg)]) == 1
    assert "no person 'nobody'" in capsys.readouterr().err


@pytest.mark.postgres
async def test_the_note_store_on_postgresql() -> None:
    import uuid

    import asyncpg

    from gateway.store.engine import migrate

    name = f"gw_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/test")
    await admin.execute(f'CREATE DATABASE "{name}"')
    engine = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}")
    try:
        await migrate(engine)
        store = Store(engine)
        person = (await store.identify("slack", "T1", "U1", "ada")).person_id
        notes, scope = NoteStore(store), Scope("assistant", "person", person)
        assert await notes.write(scope, "tea.md", "green") == "created"
        await notes.write(scope, "MEMORY.md", "- tea.md: green\n- other\n")
        assert await notes.set_suppressed(person, "assistant", "tea.md", True) is not None
        assert await notes.list(scope, 10) == ([await notes.read(scope, "MEMORY.md")], 1)
        assert (await notes.index(scope)) == "- other\n"
        assert await notes.write(scope, "tea.md", "oolong") == "created"  # revived
        assert await notes.edit(scope, "tea.md", "oolong", "black") == ("edited", 1)
        assert await notes.erase(person) == 2
        await notes.audit("show", actor="root", subject=person, reason="test")
        assert [a.reason for a in await notes.audit_log(person)] == ["test"]
    finally:
        await engine.dispose()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
