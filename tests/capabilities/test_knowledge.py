"""knowledge: a search cites the right file and heading, indexing is incremental, bound to nothing attaches nothing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

import capabilities
from bindings.loader import ConfigError, load_config
from capabilities.knowledge_index import KnowledgeIndexer, chunk_markdown
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store.knowledge import KnowledgeStore

from ..conftest import dump_yaml, wait_for, write_config
from .knowledge_script import SCRIPT, call, scripted_agent, world_on
from ..support.loop_timers import timers_set_from, waits_on
from .support import Account, Place, World

ALICE = Account("slack", "T1", "U1", "alice")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
GATEWAY = {"knowledge": {"collections": {"handbook": {"path": "handbook"}, "secret": {"path": "secret"}}}}
AGENTS = {"assistant": scripted_agent({"id": "knowledge", "config": {"collections": ["handbook"]}})}

TRAVEL = """\
# Travel policy

Book through the portal.

## Expenses

Submit receipts within 30 days. Meals are reimbursed up to 40 euros a day.

## Expenses

A second section with the same heading: its anchor gets a suffix.
"""
HOLIDAYS = """<html><head><title>Holidays</title><script>var reimbursed = 1;</script></head>
<body><h1>Holidays</h1><p>Every team member has 26 days.</p>
<h2>Carry over</h2><p>Up to five unused days carry over to March.</p></body></html>"""


def tiny_pdf(text: str) -> bytes:
    """A one-page PDF whose page says `text` (Helvetica), for the PDF reader."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _documents(config: Path) -> Path:
    handbook = config / "handbook"
    (handbook / "policies").mkdir(parents=True)
    (handbook / "policies" / "travel.md").write_text(TRAVEL)
    (handbook / "holidays.html").write_text(HOLIDAYS)
    (handbook / "parking.pdf").write_bytes(tiny_pdf("The parking garage closes at nine"))
    (handbook / "notes.txt").write_text("Plain notes: the wifi password rotates monthly.")
    (handbook / "logo.png").write_bytes(b"\x89PNG not text")
    (config / "secret").mkdir()
    (config / "secret" / "salaries.md").write_text("# Salaries\n\nThe reimbursed bonus is secret.")
    return handbook


def _indexer(w: World) -> KnowledgeIndexer:
    return next(e for e in w.gw.extensions if isinstance(e, KnowledgeIndexer))


async def test_a_search_cites_the_right_file_and_heading(tmp_path: Path, db_url: str | None) -> None:
    _documents(tmp_path)
    async with world_on(tmp_path, db_url, agents=AGENTS, gateway=GATEWAY) as w:
        await _indexer(w).refresh()
        await w.run(ALICE, DM_ALICE, call("search_documents", query="receipts reimbursed"))
        [found] = SCRIPT.results
        assert found.startswith("[1] cite as [handbook/policies/travel.md#expenses] — policies/travel.md — "
                                "Travel policy › Expenses\nSubmit receipts within 30 days.")
        assert "secret" not in found, "a collection the entry does not bind is never searched"

        await w.run(ALICE, DM_ALICE, call("search_documents", query="carry over unused days"))
        assert SCRIPT.results[-1].startswith("[1] cite as [handbook/holidays.html#carry-over] — holidays.html — "
                                             "Holidays › Carry over\nUp to five unused days")
        await w.run(ALICE, DM_ALICE, call("search_documents", query="parking garage"))
        assert SCRIPT.results[-1].startswith("[1] cite as [handbook/parking.pdf#page=1] — parking.pdf — page 1")
        await w.run(ALICE, DM_ALICE, call("search_documents", query="wifi password"))
        assert "[handbook/notes.txt] — notes.txt — notes\nPlain notes" in SCRIPT.results[-1]
        await w.run(ALICE, DM_ALICE, call("search_documents", query="what is the wifi policy for visitors"))
        assert "notes.txt" in SCRIPT.results[-1], "when every word finds nothing, any of them is tried"
        await w.run(ALICE, DM_ALICE, call("search_documents", query="zeppelin"))
        assert SCRIPT.results[-1] == "Nothing in the documents matched 'zeppelin'. Try other words, or fewer of them."


async def test_indexing_is_incremental_and_follows_the_folder(tmp_path: Path) -> None:
    handbook = _documents(tmp_path)
    async with world_on(tmp_path, agents=AGENTS, gateway=GATEWAY) as w:
        indexer = _indexer(w)
        [first, _] = await indexer.refresh()  # the indexer may have begun on its own at start
        assert first.indexed + first.unchanged == 4 and not first.removed, "the PNG is not a document"
        [again, _] = await indexer.refresh()
        assert (again.indexed, again.removed, again.unchanged) == (0, 0, 4), "unchanged files are not read again"

        (handbook / "notes.txt").write_text("Plain notes: the coffee machine is descaled on Fridays.")
        (handbook / "holidays.html").unlink()
        [changed, _] = await indexer.refresh()
        assert (changed.indexed, changed.removed, changed.unchanged) == (1, 1, 2)
        await w.run(ALICE, DM_ALICE, call("search_documents", query="descaled"))
        assert "notes.txt" in SCRIPT.results[-1]
        await w.run(ALICE, DM_ALICE, call("search_documents", query="carry over"))
        assert SCRIPT.results[-1].startswith("Nothing in the documents matched"), "a deleted file is forgotten"


async def test_bound_to_no_collection_attaches_nothing(tmp_path: Path) -> None:
    agents = {"assistant": scripted_agent({"id": "knowledge"})}
    async with world_on(tmp_path, agents=agents) as w:
        await w.run(ALICE, DM_ALICE, "hello")
        assert SCRIPT.requests[-1].tools == []


async def test_a_reload_that_configures_the_first_collection_starts_indexing_it(tmp_path: Path) -> None:
    """A gateway that started with no collection has no indexer running (its module is not imported,
    tests/test_entry_points.py); the reload that adds one indexes it, and the agent's search finds it;
    the reload that removes it again forgets its documents. Each told by the reload, nothing polled."""
    _documents(tmp_path)
    async with world_on(tmp_path, agents={"assistant": scripted_agent()}) as w:
        assert not any(isinstance(e, KnowledgeIndexer) for e in w.gw.extensions)
        without = (tmp_path / "gateway.yaml").read_text()
        _reconfigure(tmp_path, without + dump_yaml(GATEWAY), AGENTS["assistant"])
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems

        documents = KnowledgeStore(w.gw.store.sessions, w.gw.clock)
        await wait_for(lambda: documents.search(["handbook"], "receipts", 1), what="the new collection indexed")
        await w.run(ALICE, DM_ALICE, call("search_documents", query="receipts reimbursed"))
        assert SCRIPT.results[-1].startswith("[1] cite as [handbook/policies/travel.md#expenses]")

        _reconfigure(tmp_path, without, scripted_agent())
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems
        await wait_for(lambda: _forgotten(documents, "handbook"), what="the removed collection forgotten")
        assert await documents.search(["handbook", "secret"], "receipts", 5) == []


async def test_a_reload_that_removes_a_collection_forgets_it_and_one_that_adds_it_indexes_it(tmp_path: Path) -> None:
    """The indexer of a gateway started with collections hears each reload: the collection a reload drops
    is forgotten (searched, it finds nothing), and the one the next reload names again is indexed again."""
    _documents(tmp_path)
    async with world_on(tmp_path, agents=AGENTS, gateway=GATEWAY) as w:
        documents = _indexer(w).store
        await wait_for(lambda: documents.hashes("secret"), what="the secret collection indexed at start")
        gateway_yaml = (tmp_path / "gateway.yaml").read_text()
        settings = yaml.safe_load(gateway_yaml)
        del settings["knowledge"]["collections"]["secret"]
        _reconfigure(tmp_path, dump_yaml(settings), AGENTS["assistant"])
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems
        await wait_for(lambda: _forgotten(documents, "secret"), what="the removed collection forgotten")
        assert await documents.search(["secret"], "bonus", 5) == []

        _reconfigure(tmp_path, gateway_yaml, AGENTS["assistant"])
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems
        found = await wait_for(lambda: documents.search(["secret"], "bonus", 5), what="the collection indexed again")
        assert found[0].path == "salaries.md"


async def _forgotten(documents: KnowledgeStore, collection: str) -> bool:
    return not await documents.hashes(collection)


def _reconfigure(config: Path, gateway_yaml: str, assistant: dict[str, object]) -> None:
    (config / "gateway.yaml").write_text(gateway_yaml)
    (config / "agents" / "assistant.yaml").write_text(dump_yaml(assistant))


async def test_an_idle_gateway_sets_no_knowledge_timer(tmp_path: Path) -> None:
    """Idle, knowledge wakes the loop for nothing: with no collection configured nothing of it waits at all
    (it looked every second for a reload), and a collection indexed at start that refreshes only at a reload
    (refresh_minutes: 0) leaves its indexer waiting for the reload with no timer (it too looked every second)."""
    with timers_set_from(os.path.dirname(capabilities.__file__)) as made:
        async with world_on(tmp_path / "none", agents={"assistant": scripted_agent()}) as w:
            await wait_for(lambda: made or all(t.done() for t in asyncio.all_tasks()
                                               if t.get_name().startswith("knowledge:")),
                           what="knowledge settled at start")
            assert made == [], "a gateway with no knowledge configured set a timer for it"

        _documents(tmp_path / "some")
        gateway = {"knowledge": {"collections": {"handbook": {"path": "handbook", "refresh_minutes": 0}}}}
        async with world_on(tmp_path / "some", agents=AGENTS, gateway=gateway) as w:
            indexer = _indexer(w)
            assert indexer._task is not None
            task = indexer._task
            await wait_for(lambda: made or (indexer.ready == {"handbook"} and waits_on(task, "KnowledgeIndexer._run", "Event.wait")),
                           what="the collection indexed and the indexer waiting")
            assert made == [], "an indexed collection that refreshes only at a reload set a timer"


def test_unknown_collections_and_missing_folders_are_refused_at_load(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path, gateway={"knowledge": {"collections": {"handbook": {"path": "nowhere"}}}})
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: knowledge\n    config:\n"
                    "      collections:\n        - handbook\n        - wiki\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert sorted(str(p) for p in e.value.problems if not p.warning) == sorted([
        f"{path}:8:11: capabilities.0.config.collections.1: no knowledge collection 'wiki'; configured: handbook",
        f"{cfg / 'gateway.yaml'}:{_at(cfg / 'gateway.yaml', 'path:')}: knowledge.collections.handbook.path: "
        f"no folder {cfg / 'nowhere'}",
    ])


def _at(path: Path, text: str) -> str:
    """line:column of `text` in a file."""
    return next(f"{i}:{line.index(text) + 1}" for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_markdown_chunks_follow_headings_and_ignore_code() -> None:
    title, chunks = chunk_markdown("intro\n# Guide\n\n```\n# not a heading\n```\n## Install\nrun it\n", "f")
    assert title == "Guide"
    assert [(c.heading, c.anchor) for c in chunks] == [("f", ""), ("Guide", "guide"), ("Guide › Install", "install")]
    assert "# not a heading" in chunks[1].text
