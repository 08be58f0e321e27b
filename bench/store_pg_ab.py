#!/usr/bin/env python3
"""The store's part of a plain message on PostgreSQL, two versions of `gateway/store/repo.py` alternating.

`bench/store_ab.py` is SQLite's; this is the same message (`Store.ingest(start=True)`, then `Store.end_run`
with the reply's final delivery row) on the machine's PostgreSQL (127.0.0.1:5432, trust auth), in a
database of its own, created, migrated and dropped here. Each statement there is a round trip, counted
by asyncpg's query logger on every connection of the pool (BEGIN and COMMIT included). Old (`--before
DIR`, another checkout's repo.py) and new take turns message by message (A B B A ...), and each store
call is measured apart: `time.thread_time()` of the loop thread (the socket sends, asyncpg's
and our Python) and wall time, medians per round.

    .venv/bin/python bench/store_pg_ab.py --before /work/main --rounds 5 --messages 200 [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from store_ab import Variant, load_repo  # noqa: E402

from gateway.store import repo  # noqa: E402
from gateway.store.engine import create_engine, migrate  # noqa: E402

SERVER = "postgres@127.0.0.1:5432"


class Counted(Variant):
    """A message's two store calls, each timed and its round trips counted."""

    def __init__(self, name: str, module: Any, engine: Any, turns: int, trips: list[int]) -> None:
        super().__init__(name, module, engine, turns)
        self.trips = trips
        self.calls: dict[str, list[tuple[float, float, int]]] = {"ingest": [], "end_run": []}

    async def timed(self, call: str, work: Any) -> Any:
        before, cpu, wall = self.trips[0], time.thread_time(), time.perf_counter()
        result = await work
        self.calls[call].append((time.thread_time() - cpu, time.perf_counter() - wall, self.trips[0] - before))
        return result

    async def message(self) -> None:
        m = self.module
        n = next(self.serial)
        if self.turn % self.turns == 0:
            self.conversation = m.ConversationRef("", f"bench:{self.name}:{uuid.uuid4().hex}", "slack", "slack", "T1",
                                                  "C1", f"{n}", "channel")
        self.turn += 1
        ingested = await self.timed("ingest", self.store.ingest(
            binding_id="slack", event_ids=[f"{self.name}:{n}:{uuid.uuid4().hex}"], conversation=self.conversation,
            identity=m.Identity("person-ada", "Ada"), account_id="U0ADA", text=f"hello {n}", agent_id="assistant",
            platform_message_id=f"{n}.0", queue_limit=10, start=True))
        assert ingested.claimed is not None
        self.conversation = ingested.conversation
        await self.timed("end_run", self.store.end_run(
            ingested.run_id, m.FINISHED, usage=(1, 10, 5), reply="Hello from the fake model.",
            deliveries=[m.FinalRow(0, f"{n}.1", "Hello from the fake model.")]))


async def main(before: Path, rounds: int, messages: int, turns: int) -> None:
    import asyncpg
    from sqlalchemy import event

    name = f"gw_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(f"postgresql://{SERVER}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    trips = [0]
    engine = create_engine(f"postgresql+asyncpg://{SERVER}/{name}")

    def counting(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.driver_connection.add_query_logger(lambda _query: trips.__setitem__(0, trips[0] + 1))

    event.listen(engine.sync_engine, "connect", counting)
    try:
        await migrate(engine)
        variants = [Counted("before", load_repo(before), engine, turns, trips),
                    Counted("after", repo, engine, turns, trips)]
        for v in variants:  # warm: prepared statements, the pool
            for _ in range(20):
                await v.message()
        medians: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(rounds):
            for v in variants:
                v.calls = {"ingest": [], "end_run": []}
            for i in range(messages):
                for v in variants if i % 2 == 0 else variants[::-1]:
                    await v.message()
            for v in variants:
                for call, seen in v.calls.items():
                    medians.setdefault((v.name, call), []).append(
                        (statistics.median(c for c, _w, _t in seen), statistics.median(w for _c, w, _t in seen)))
        print(f"PostgreSQL, {turns} message(s) per conversation; median of each round, {rounds} x {messages}:")
        for v in variants:
            for call, seen in v.calls.items():
                trips_per = sorted({t for _c, _w, t in seen})
                cpu = [c * 1e6 for c, _w in medians[(v.name, call)]]
                wall = [w * 1e3 for _c, w in medians[(v.name, call)]]
                print(f"  {v.name:7} {call:8} round trips {trips_per}  loop CPU {statistics.median(cpu):6.0f} us"
                      f" (rounds {' '.join(f'{x:.0f}' for x in cpu)})  wall {statistics.median(wall):.2f} ms"
                      f" (rounds {' '.join(f'{x:.2f}' for x in wall)})")
    finally:
        await engine.dispose()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a checkout whose gateway/store/repo.py is 'before'")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--turns", type=int, default=1, help="messages per conversation")
    args = parser.parse_args()
    asyncio.run(main(args.before, args.rounds, args.messages, args.turns))
