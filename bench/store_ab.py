#!/usr/bin/env python3
"""The store's part of a plain message, two versions of `gateway/store/repo.py` alternating in one process.

Each message is what the daemon asks of the store for one inbound message answered by one final reply:
`Store.ingest(start=True)` (ledger, conversation, the run claimed) and `Store.end_run` with the reply's
final delivery row, on one SQLite file (the daemon's engine: `gateway.store.engine.create_engine`). The
conversations are new (`--turns 1`) or go on (`--turns N`: the first message of each starts it). The
other version is loaded from another checkout's repo.py (`--before DIR`, e.g. a worktree of main) and
shares everything else of this one (driver, engine). Old and new take turns message by message (A B B A
...), so both meet the same load; `time.thread_time()` of the loop thread around each store call (the
transactions run inline on the loop, nothing else runs meanwhile), medians per round, and cProfile's
function calls per message in one more burst of each (which load does not move).

    .venv/bin/python bench/store_ab.py --before /work/main --rounds 5 --messages 200

A change of schema rather than of code (`--before-revision REV`): both sides run this checkout's repo.py,
each on its own file, "before" migrated only to REV, "after" to head. The messages' full-text index
(migration 0017) is caught up every `--index-every` messages, out of the timed message (the
daemon's sweep does it), and its own loop CPU per message printed apart (on "after" only: REV may predate it).

    .venv/bin/python bench/store_ab.py --before-revision 0016 --rounds 5 --messages 200 [--turns 3]

A connection setting (`--pragmas "cache_size=-16384; mmap_size=268435456"`): both sides this checkout at
head, each on its own file, "after" with the PRAGMAs run on its connection once connected. `--touch MIB`
walks that much memory between messages (both sides), as the daemon's other work between two of a
message's transactions evicts the CPU's caches: SQLite then runs cold, as it does in the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import itertools
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.store import message_index, repo  # noqa: E402
from gateway.store.engine import alembic_config, create_engine, migrate  # noqa: E402


def load_repo(checkout: Path) -> Any:
    spec = importlib.util.spec_from_file_location("repo_before", checkout / "gateway" / "store" / "repo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["repo_before"] = module
    spec.loader.exec_module(module)
    return module


class Variant:
    def __init__(self, name: str, module: Any, engine: Any, turns: int) -> None:
        self.name, self.module, self.turns = name, module, turns
        self.store = module.Store(engine, owner=f"bench-{name}")
        self.serial = itertools.count()
        self.conversation: Any = None
        self.turn = 0

    async def message(self) -> None:
        m = self.module
        n = next(self.serial)
        if self.turn % self.turns == 0:
            self.conversation = m.ConversationRef("", f"bench:{self.name}:{n}", "slack", "slack", "T1", "C1",
                                                  f"{n}", "channel")
        self.turn += 1
        ingested = await self.store.ingest(
            binding_id="slack", event_ids=[f"{self.name}:{n}", f"{self.name}:same:{n}"],
            conversation=self.conversation, identity=m.Identity("person-ada", "Ada"), account_id="U0ADA",
            text=f"hello {n}", agent_id="assistant", platform_message_id=f"{n}.0", queue_limit=10, start=True)
        assert ingested.claimed is not None
        self.conversation = ingested.conversation
        await self.store.end_run(ingested.run_id, m.FINISHED, usage=(1, 10, 5), reply="Hello from the fake model.",
                                 deliveries=[m.FinalRow(0, f"{n}.1", "Hello from the fake model.")])


async def _engine(path: str, revision: str | None = None, pragmas: str = "") -> Any:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    if pragmas:
        from sqlalchemy import event

        def setting(dbapi_connection: Any, _record: object) -> None:
            for pragma in filter(None, (p.strip() for p in pragmas.split(";"))):
                dbapi_connection.cursor().execute(f"PRAGMA {pragma}")

        event.listen(engine.sync_engine, "connect", setting)
    if revision is None:
        await migrate(engine)
    else:
        from alembic import command

        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), revision))
    return engine


async def main(before: Path | None, revision: str | None, rounds: int, messages: int, turns: int,
               index_every: int, pragmas: str = "", touch: int = 0) -> None:
    scratch = bytearray(touch << 20)

    def walk() -> None:  # a write every 64 bytes: every cache line of the scratch
        scratch[::64] = b"\x01" * len(range(0, len(scratch), 64))

    with tempfile.TemporaryDirectory() as tmp:
        if pragmas:
            variants = [Variant("before", repo, await _engine(f"{tmp}/before.db"), turns),
                        Variant("after", repo, await _engine(f"{tmp}/after.db", pragmas=pragmas), turns)]
        elif revision is not None:
            variants = [Variant("before", repo, await _engine(f"{tmp}/before.db", revision), turns),
                        Variant("after", repo, await _engine(f"{tmp}/after.db"), turns)]
        else:
            assert before is not None
            engine = await _engine(f"{tmp}/ab.db")
            variants = [Variant("before", load_repo(before), engine, turns), Variant("after", repo, engine, turns)]
        indexing: dict[str, list[float]] = {"after": []}
        for v in variants:  # warm: statement caches, the connection
            for _ in range(20):
                await v.message()
        cpu: dict[str, list[float]] = {v.name: [] for v in variants}
        for _ in range(rounds):
            times: dict[str, list[float]] = {v.name: [] for v in variants}
            for i in range(messages):
                order = variants if i % 2 == 0 else variants[::-1]
                for v in order:
                    if touch:
                        walk()
                    t0 = time.thread_time()
                    await v.message()
                    times[v.name].append(time.thread_time() - t0)
                    if v.name == "after" and (i + 1) % index_every == 0:  # this checkout's schema has the notes
                        t0 = time.thread_time()
                        await message_index.catch_up(v.store.engine)
                        indexing[v.name].append((time.thread_time() - t0) / index_every)
            for name, ts in times.items():
                cpu[name].append(statistics.median(ts) * 1000)
        print(f"store CPU per message (loop thread, ingest + end_run; median of each round, {rounds} x {messages}):")
        for name, ms in cpu.items():
            print(f"  {name:7} {statistics.median(ms):.3f} ms   rounds: {' '.join(f'{x:.3f}' for x in ms)}")
        ratio = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
        print(f"  after / before, per round: {' '.join(f'{r:.3f}' for r in ratio)}")
        if indexing["after"]:
            print(f"  after   index caught up every {index_every} messages: {statistics.median(indexing['after']) * 1e6:.1f}"
                  " us per message (median), not in the figures above")
        for v in variants:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(messages):
                await v.message()
            profiler.disable()
            stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
            total = sum(nc for (_f, _l, _fn), (_cc, nc, _tt, _ct, _c) in stats.items())
            sqlite_calls = sum(nc for (f, _l, fn), (_cc, nc, _tt, _ct, _c) in stats.items()
                               if f == "~" and "sqlite3" in fn)
            print(f"  {v.name:7} function calls per message {total / messages:.1f} (sqlite3's C calls {sqlite_calls / messages:.1f})")
        for v in variants:
            await v.store.engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout whose gateway/store/repo.py is 'before'")
    parser.add_argument("--before-revision", help="instead: this checkout on a file migrated only to this revision")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--turns", type=int, default=1, help="messages per conversation")
    parser.add_argument("--pragmas", default="", help="instead: PRAGMAs for 'after' ('a=1; b=2'), both at head")
    parser.add_argument("--touch", type=int, default=0, help="MiB of memory walked between messages")
    parser.add_argument("--index-every", type=int, default=100, help="messages between full-text index catch-ups")
    args = parser.parse_args()
    if sum(x is not None for x in (args.before, args.before_revision, args.pragmas or None)) != 1:
        parser.error("give one of --before, --before-revision and --pragmas")
    asyncio.run(main(args.before, args.before_revision, args.rounds, args.messages, args.turns, args.index_every,
                     args.pragmas, args.touch))
