#!/usr/bin/env python3
"""How long a knowledge collection of 2,000 files takes to index, and to re-index unchanged.

Writes 2,000 Markdown files (a few headings and paragraphs each, about 3 KB) to a temporary
folder, then runs the real indexer (capabilities/knowledge_index.py) into a temporary SQLite
file through the async engine, as the daemon does: a first full index, a second pass with
nothing changed (content hashes only), and a pass after 20 files changed. Prints each time and
a search's latency. Target: the first index well under a minute on this machine.

    .venv/bin/python bench/knowledge_index.py               # SQLite
    .venv/bin/python bench/knowledge_index.py --files 500
    .venv/bin/python bench/knowledge_index.py --database postgresql+asyncpg://postgres@127.0.0.1/bench

Exit status 0 when the first index took under 60 seconds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bindings.models import GatewayConfig  # noqa: E402
from capabilities.knowledge_index import KnowledgeIndexer  # noqa: E402
from gateway.clock import Clock  # noqa: E402
from gateway.store.engine import create_engine, migrate  # noqa: E402
from gateway.store.knowledge import KnowledgeStore  # noqa: E402

WORDS = ("invoice policy travel expense holiday onboarding laptop security password release deploy rollback "
         "incident escalation customer refund contract review budget quarter hiring interview badge office "
         "parking meeting vendor approval deadline report metrics dashboard backup restore network printer").split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."


def write_files(folder: Path, count: int, rng: random.Random) -> None:
    for i in range(count):
        sub = folder / f"team{i % 20:02d}"
        sub.mkdir(exist_ok=True)
        parts = [f"# Document {i}\n", sentence(rng)]
        for h in range(4):
            parts.append(f"\n## Section {h} {rng.choice(WORDS)}\n")
            parts.extend(" ".join(sentence(rng) for _ in range(4)) + "\n" for _ in range(2))
        (sub / f"doc{i:05d}.md").write_text("\n".join(parts))


async def main(files: int, database: str | None) -> int:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        write_files(folder, files, rng)
        size = sum(p.stat().st_size for p in folder.rglob("*.md"))
        url = database or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        engine = create_engine(url)
        await migrate(engine)
        from sqlalchemy.ext.asyncio import async_sessionmaker

        store = KnowledgeStore(async_sessionmaker(engine, expire_on_commit=False), Clock())
        gateway = GatewayConfig.model_validate({"knowledge": {"collections": {"docs": {"path": str(folder)}}}})
        config = SimpleNamespace(directory=Path(tmp), gateway=gateway)
        indexer = KnowledgeIndexer(lambda: config, store)  # type: ignore[arg-type, return-value]
        try:
            print(f"{files} files, {size / 1e6:.1f} MB of Markdown, database {url.split('://')[0]}")
            started = time.perf_counter()
            [report] = await indexer.refresh()
            first = time.perf_counter() - started
            print(f"first index:        {first:6.2f} s  ({report.indexed} files, {files / first:.0f} files/s)")
            started = time.perf_counter()
            [report] = await indexer.refresh()
            print(f"nothing changed:    {time.perf_counter() - started:6.2f} s  ({report.unchanged} unchanged)")
            for path in sorted(folder.rglob("*.md"))[:20]:
                path.write_text(path.read_text() + "\nAmended: zeppelin maintenance window.\n")
            started = time.perf_counter()
            [report] = await indexer.refresh()
            print(f"20 files changed:   {time.perf_counter() - started:6.2f} s  ({report.indexed} re-indexed)")
            started = time.perf_counter()
            for word in WORDS[:20]:
                await store.search(["docs"], f"{word} policy", 5)
            print(f"search (top 5):     {(time.perf_counter() - started) / 20 * 1000:6.1f} ms each")
        finally:
            if database:
                async with engine.begin() as conn:
                    await conn.exec_driver_sql("DELETE FROM knowledge_chunks")
                    await conn.exec_driver_sql("DELETE FROM knowledge_documents")
            await engine.dispose()
    verdict = "PASS" if first < 60 else "MISS"
    print(f"{verdict}: first index {first:.1f} s (target: under 60 s)")
    return 0 if first < 60 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--database", help="a database URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.files, args.database)))
