"""How a shared file is handed to the model, and what is stored of it: a reference, never its bytes (a paused
run's state, a compacted conversation's snapshot). See docs/security.md, "Attachments and stored history"."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pydantic_ai.messages import BinaryContent, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart
from sqlalchemy import select

from gateway.inbound.attachments import FILE_TAG, kind, without_contents
from gateway.runs.llm import register_model
from gateway.store.models import Base
from tests.support.files_model import Recorder

from .conftest import pg_database, run_finished, running_gateway, wait_for, write_config


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_each_file_is_sorted_by_what_the_model_can_take() -> None:
    assert kind("chart.png", "image/png") == "image"
    assert kind("report.pdf", "application/pdf") == "pdf"
    assert kind("q3.csv", "text/csv") == "text"
    assert kind("notes.md", "application/octet-stream") == "text"  # named like text: read as text
    assert kind("main.py", "text/x-python; charset=utf-8") == "text"
    assert kind("data.json", "application/json") == "text"
    assert kind("archive.zip", "application/zip") == "other"
    assert kind("voice.ogg", "audio/ogg") == "audio"  # heard where the audio capability listens, else named
    assert kind("memo.m4a", "application/octet-stream") == "audio"


def test_a_paused_run_keeps_the_names_of_its_files_never_their_contents() -> None:
    secret_csv = "name,salary\nada,100\n"
    request = ModelRequest(parts=[UserPromptPart(content=[
        "Ada: what is this?",
        BinaryContent(data=b"\x89PNG-secret-bytes", media_type="image/png", identifier="chart.png"),
        f'{FILE_TAG}name="pay.csv" type="text/csv">\n{secret_csv}\n</file>',
    ])])
    plain = ModelRequest(parts=[UserPromptPart(content="an earlier turn")])
    stored = ModelMessagesTypeAdapter.dump_json(without_contents([plain, request])).decode()
    assert "secret" not in stored and "salary" not in stored and "iVBOR" not in stored  # no bytes, no base64
    kept = ModelMessagesTypeAdapter.validate_json(stored)
    assert kept[0] == plain
    content = kept[1].parts[0].content  # type: ignore[union-attr]
    kept_note = "its contents reached the model on the turn it was shared, and are not kept"
    png = sha(b"\x89PNG-secret-bytes")
    assert content == ["Ada: what is this?", f"[file chart.png (image/png, 17 bytes, id sha256:{png}): {kept_note}]",
                       f'<file name="pay.csv" type="text/csv" bytes="{len(secret_csv)}" id="sha256:{sha(secret_csv.encode())}">'
                       f'[{kept_note}]</file>']


MARKER = "PLANTED-MARKER-5c1e"
CSV_WITH_MARKER = f"name,code\nada,{MARKER}\n".encode()
PNG_WITH_MARKER = b"\x89PNG\r\n\x1a\n" + MARKER.encode() * 8 + b"\x00" * 32
FILLER = "lorem ipsum dolor " * 30


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    else:
        async with pg_database() as url:
            yield url


def _form(text: str, *files: tuple[str, str, bytes]) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("text", text)
    for name, media_type, data in files:
        form.add_field("file", data, filename=name, content_type=media_type)
    return form


def _traces(text: str) -> list[str]:
    """Where the files' bytes would show: the marker, the image in base64 (either alphabet)."""
    image = base64.b64encode(PNG_WITH_MARKER).decode()
    found = [MARKER] if MARKER in text else []
    return found + [b64 for b64 in (image, base64.urlsafe_b64encode(PNG_WITH_MARKER).decode()) if b64[:40] in text]


async def test_a_compacted_conversation_stores_and_replays_a_reference_never_the_files_bytes(
        tmp_path: Path, database: str) -> None:
    recorder = Recorder()
    register_model("compacting-files", recorder.model)
    compaction = {"id": "compaction", "config": {"strategy": "sliding_window", "context_window": 1000,
                                                 "max_fraction": 0.5, "keep_messages": 6}}
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "compacting-files",
                                                                     "capabilities": [compaction]}},
                          gateway={"database": {"url": database}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]

        async def say(text: str, *files: tuple[str, str, bytes]) -> list[object]:
            before = len(recorder.requests)
            url = f"/api/v1/conversations/{conv}/messages"
            r = await (s.post(url, data=_form(text, *files)) if files else s.post(url, json={"text": text}))
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]
            await wait_for(lambda: run_finished(gw, run_id), what=f"the run of {text[:20]!r}")
            assert len(recorder.requests) == before + 1
            return recorder.requests[-1]

        async def snapshot() -> str | None:
            return await gw.store.capability_state.get("compaction", conv, "history")

        for i in range(12):  # a conversation long enough to have compacted: its history is a stored snapshot
            await say(f"message {i}: {FILLER}")
            if await snapshot() is not None:
                break
        assert await snapshot() is not None
        first = await say("what is in these?", ("codes.csv", "text/csv", CSV_WITH_MARKER),
                          ("chart.png", "image/png", PNG_WITH_MARKER))
        assert _traces(str(first)), "the files reached the model on their own turn"
        second = await say("and now?")
        assert not any(isinstance(c, BinaryContent) for m in second if isinstance(m, ModelRequest)
                       for p in m.parts if isinstance(p, UserPromptPart) and not isinstance(p.content, str)
                       for c in p.content), "the next turn replayed the image"
        assert not _traces(str(second)), "the next turn replayed the files' contents"
        stored = await snapshot()
        assert stored is not None and "codes.csv" in stored and "chart.png" in stored, "the reference is kept"
        assert stored.count(f"sha256:{sha(CSV_WITH_MARKER)}") == 1 and stored.count(f"sha256:{sha(PNG_WITH_MARKER)}") == 1
        async with gw.store.sessions() as session:
            rows = [str(tuple(row)) for table in Base.metadata.sorted_tables
                    for row in (await session.execute(select(table))).all()]
        assert not _traces("\n".join(rows)), "a table holds the files' bytes"
    if database.startswith("sqlite"):
        path = tmp_path / "gateway.db"
        on_disk = b"".join(p.read_bytes() for p in (path, path.with_name("gateway.db-wal")) if p.exists())
        assert not _traces(on_disk.decode("latin-1")), "the database file holds the files' bytes"
