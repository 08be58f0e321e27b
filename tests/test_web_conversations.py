"""The web chat's conversations through its HTTP API: commands and their answers kept in the
conversation, the person's list of conversations (paged, scoped, searchable), renaming, deleting.

A real daemon on a real SQLite file, spoken to over HTTP as the page speaks to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text

from gateway.store.models import Base
from gateway.store.people import AccountRef, PeopleStore

from .conftest import database_url, running_gateway, wait_for, write_config

ENGINES = pytest.mark.parametrize("engine", ["sqlite", "postgresql"])


async def _new(s: aiohttp.ClientSession) -> str:
    r = await s.post("/api/v1/conversations", json={})
    assert r.status == 201
    return str((await r.json())["id"])


async def _say(s: aiohttp.ClientSession, conv: str, words: str) -> None:
    """A message, and wait for the agent's answer (the demo model echoes it)."""
    r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": words})
    assert r.status == 202, await r.text()

    async def answered() -> bool:
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        return any(t["role"] == "assistant" and words in t["text"] for t in turns)

    await wait_for(answered, what=f"the answer to {words!r}")


async def _listing(s: aiohttp.ClientSession, query: str = "") -> dict[str, Any]:
    r = await s.get("/api/v1/conversations" + query)
    assert r.status == 200, await r.text()
    return dict(await r.json())


async def test_a_commands_answer_is_in_the_response_and_in_the_conversation(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = await _new(s)
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "/help"})
        assert r.status == 200
        body = await r.json()
        assert body["command"] is True
        [answer] = body["answers"]
        assert answer["role"] == "notice" and "- `/memory" in answer["text"] and isinstance(answer["id"], int)

        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "/memory"})
        [card] = (await r.json())["answers"]
        assert card["role"] == "memory" and card["card"]["title"]

        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [(t["role"], t["text"]) for t in turns][:3] == [("command", "/help"), ("notice", answer["text"]),
                                                               ("command", "/memory")]
        assert turns[3]["role"] == "memory" and turns[3]["card"] == card["card"]
        # Kept with the conversation, never in what the model is given (the next turn's history).
        await _say(s, conv, "after the commands")
        async with gw.store.sessions() as db:
            rows = (await db.execute(text("SELECT role, status FROM messages WHERE conversation_id = :c"
                                          " ORDER BY id"), {"c": conv})).all()
        assert [tuple(r) for r in rows][:4] == [("command", "private"), ("notice", "private"),
                                                ("command", "private"), ("memory", "private")]
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert "/help" not in turns[-1]["text"] and "Commands" not in turns[-1]["text"]


async def test_a_link_code_is_answered_but_never_stored(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = await _new(s)
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "/link"})
        [answer] = (await r.json())["answers"]
        assert "Your link code is" in answer["text"] and answer["id"] is None
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert turns == []


@ENGINES
async def test_the_listing_is_paged_newest_first_and_only_the_persons_own(tmp_path: Path, engine: str) -> None:
    async with database_url(engine, tmp_path) as url:
        await _listing_is_paged_and_scoped(tmp_path, {"database": {"url": url}})


async def _listing_is_paged_and_scoped(tmp_path: Path, database: dict[str, Any]) -> None:
    cfg = write_config(tmp_path / "c", gateway=database)
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        convs = []
        for words in ("first talk about apples", "second talk about pears", "third talk about plums"):
            convs.append(await _new(s))
            await _say(s, convs[-1], words)
        await _new(s)  # nothing said in it yet: not listed
        page = await _listing(s, "?limit=2")
        assert [c["id"] for c in page["conversations"]] == [convs[2], convs[1]]
        assert page["conversations"][0]["title"] == "third talk about plums"
        assert page["next_cursor"]
        rest = await _listing(s, "?limit=2&cursor=" + page["next_cursor"])
        assert [c["id"] for c in rest["conversations"]] == [convs[0]] and rest["next_cursor"] is None
        assert (await s.get("/api/v1/conversations?cursor=bogus")).status == 400
        found = await _listing(s, "?q=pears")
        assert [c["id"] for c in found["conversations"]] == [convs[1]]
        assert "**pears**" in found["conversations"][0]["passage"]
        local = (await gw.store.identify("web", "local", "local", "local")).person_id

    # The web chat now speaks for someone else: none of the first person's conversations are theirs.
    write_config(tmp_path / "c", gateway=database, bindings={"web": {"platform": "web", "agent": "assistant",
                                                                     "web": {"person": "phone"}}})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        assert (await _listing(s))["conversations"] == []
        assert (await _listing(s, "?q=pears"))["conversations"] == []
        # Linked, the two accounts are one person: the listing is theirs again.
        await PeopleStore(gw.store).link(AccountRef("web", "local", "phone", "phone"), local, actor="admin")
        assert [c["id"] for c in (await _listing(s))["conversations"]] == convs[::-1]


@ENGINES
async def test_rename_and_delete(tmp_path: Path, engine: str) -> None:
    async with database_url(engine, tmp_path) as url:
        await _rename_and_delete(write_config(tmp_path / "c", gateway={"database": {"url": url}}))


async def _rename_and_delete(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        keep, gone = await _new(s), await _new(s)
        await _say(s, keep, "this one stays")
        await _say(s, gone, "this one goes")
        form = aiohttp.FormData()
        form.add_field("text", "and a file")
        form.add_field("file", b"some notes", filename="notes.txt", content_type="text/plain")
        assert (await s.post(f"/api/v1/conversations/{gone}/messages", data=form)).status == 202
        await wait_for(lambda: _idle(gw, gone), what="the file's run to end")
        runs = await _runs_of(gw, gone)
        assert await _attachment_rows(gw, runs), "the upload left no attachment reference to erase"
        r = await s.patch(f"/api/v1/conversations/{keep}", json={"title": "  Kept   safe "})
        assert r.status == 200 and (await r.json())["title"] == "Kept safe"
        assert (await s.patch(f"/api/v1/conversations/{keep}", json={"title": 5})).status == 400
        titles = {c["id"]: c["title"] for c in (await _listing(s))["conversations"]}
        assert titles == {keep: "Kept safe", gone: "this one goes"}

        # The surface's rules hold here too: JSON only, from no other origin (a page can send a DELETE).
        r = await s.delete(f"/api/v1/conversations/{gone}")
        assert r.status == 415
        r = await s.delete(f"/api/v1/conversations/{gone}", data="{}", headers={"Content-Type": "text/plain"})
        assert r.status == 415
        r = await s.delete(f"/api/v1/conversations/{gone}", json={}, headers={"Origin": "http://evil.example"})
        assert r.status == 403
        r = await s.patch(f"/api/v1/conversations/{gone}", json={"title": "x"}, headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status == 403
        assert len((await _listing(s))["conversations"]) == 2

        r = await s.delete(f"/api/v1/conversations/{gone}", json={})
        assert r.status == 200
        assert [c["id"] for c in (await _listing(s))["conversations"]] == [keep]
        assert (await s.get(f"/api/v1/conversations/{gone}/messages")).status == 404
        async with gw.store.sessions() as db:
            assert await db.scalar(text("SELECT count(*) FROM conversations WHERE id = :c"), {"c": gone}) == 0
            for table in Base.metadata.sorted_tables:  # whatever keeps rows under a conversation
                if "conversation_id" in table.c:
                    left = await db.scalar(text(f"SELECT count(*) FROM {table.name} WHERE conversation_id = :c"),
                                           {"c": gone})
                    assert left == 0, table.name
            assert await db.scalar(text("SELECT count(*) FROM messages WHERE conversation_id = :c"), {"c": keep})
        assert await _attachment_rows(gw, runs) == 0
        assert (await s.delete(f"/api/v1/conversations/{gone}", json={})).status == 404


async def _runs_of(gw: Any, conv: str) -> list[str]:
    async with gw.store.sessions() as db:
        return [r[0] for r in (await db.execute(text("SELECT id FROM runs WHERE conversation_id = :c"), {"c": conv}))]


async def _idle(gw: Any, conv: str) -> bool:
    async with gw.store.sessions() as db:
        busy = await db.scalar(text("SELECT count(*) FROM runs WHERE conversation_id = :c"
                                    " AND status IN ('queued', 'running', 'parked')"), {"c": conv})
    return busy == 0


async def _attachment_rows(gw: Any, runs: list[str]) -> int:
    async with gw.store.sessions() as db:
        return int(await db.scalar(text(
            "SELECT count(*) FROM capability_state WHERE capability = 'attachments' AND scope IN ("
            + ", ".join(f"'run:{r}'" for r in runs) + ")")) or 0)
