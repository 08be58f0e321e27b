"""Database faults for tests/chaos/test_database_faults.py and bench/chaos.py, run alongside a stream.

PostgreSQL: the daemon's own backends (its database only, never another session on the shared
server) terminated with `pg_terminate_backend` again and again, and once the database closed to
new connections for a few seconds (what a restart looks like from the daemon). SQLite: the
file's write lock held by another process (an admin's `sqlite3` shell) for a few seconds, again
and again. Each reads /readyz while the fault lasts; `Faults` keeps what it saw.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import PG_ADMIN_DSN
from tests.support.locking import another_process_holds_the_lock

from .harness import Tally, Until, World, count_after_drain, slack_conversation, web_conversation

BUSY = 1.0  # database.busy_timeout_seconds for these runs: past it a write is refused and tried again
HOLD_AT_MOST = 60.0  # seconds a SQLite lock may be held waiting for /readyz to say unavailable


@dataclass
class Faults:
    done: int = 0  # backends terminated (PostgreSQL) or locks held (SQLite)
    closed: int = 0  # times the PostgreSQL database was closed to connections
    seen: list[dict[str, Any]] = field(default_factory=list)  # /readyz's database part during faults
    unanswered: int = 0  # /readyz reads that got no answer (the loop stalled or the daemon died)
    # Each of those: when it was asked (seconds from the start) and how long it waited; the daemon's log
    # then says what held its loop (gateway.loop's "event loop stalled ... in task ..." lines).
    silent: list[tuple[float, float]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


async def _watch(w: World, faults: Faults, seconds: float | None = None, until: asyncio.Event | None = None,
                 on_read: Callable[[], None] = lambda: None) -> None:
    """Read /readyz every 0.2-0.3 s while a fault lasts (`on_read` after each read)."""
    end = time.monotonic() + (seconds or 0)
    while (until is not None and not until.is_set()) or (until is None and time.monotonic() < end):
        asked = time.monotonic()
        state = await w.daemon.readiness()
        if state is None:
            faults.unanswered += 1
            faults.silent.append((round(asked - faults.started, 2), round(time.monotonic() - asked, 2)))
        else:
            faults.seen.append(state["database"])
        on_read()
        await asyncio.sleep(0.25)


async def postgres_faults(w: World, faults: Faults, until: float, *, closed_for: float = 4.0, seed: int = 22) -> None:
    import asyncpg

    name = w.url.rsplit("/", 1)[1]
    rng = random.Random(seed)
    admin = await asyncpg.connect(PG_ADMIN_DSN)  # on another database: this one gets closed

    async def terminate() -> int:
        rows = await admin.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                 " WHERE datname = $1 AND pid <> pg_backend_pid()", name)
        return sum(1 for r in rows if r[0])

    try:
        await asyncio.sleep(2)  # pacing only: the stream is under way before the first fault
        first = True
        while time.monotonic() < until:
            for _ in range(4):  # connections dropped under the daemon's feet
                faults.done += await terminate()
                await asyncio.sleep(rng.uniform(0.5, 1.5))
            if first or time.monotonic() < until - closed_for - 2:
                first = False
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                try:
                    faults.closed += 1
                    faults.done += await terminate()
                    await _watch(w, faults, closed_for)
                finally:
                    await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    finally:
        await admin.close()


async def sqlite_faults(w: World, faults: Faults, until: float, *, hold: float = 3.0, times: int = 2) -> None:
    """The lock held `times` times at least (more while `until` allows), each `hold` s and until
    /readyz said the database is unavailable, which must come once a write waited past its bound
    (BUSY): a fixed 3 s hold ended, on a loaded machine, before any read saw it (CI; here 1 run in 8
    beside CPU hogs), and a slow first hold left no time for the second."""
    await asyncio.sleep(2)  # pacing only: the stream is under way before the first lock
    while faults.done < times or time.monotonic() < until - hold:
        async with another_process_holds_the_lock(Path(w.url.split("///", 1)[1]), HOLD_AT_MOST) as released:
            faults.done += 1
            start, first = time.monotonic(), len(faults.seen)

            def enough() -> None:
                if time.monotonic() - start >= hold and any(
                        d.get("unavailable_since") for d in faults.seen[first:]):
                    released.let_go()
            await _watch(w, faults, until=released, on_read=enough)
        await asyncio.sleep(2)  # pacing only: the daemon works unlocked between two locks


async def stream_under_faults(w: World, tally: Tally, faults: Faults, store: str, duration: float, *,
                              slack_threads: int = 4, web_conversations: int = 3, wait: float = 60) -> None:
    """Slack threads and web conversations for `duration` s with the store's faults alongside."""
    # What Slack does with an event nobody acked: three more tries, over minutes there, far longer than these faults
    # last. The fake's must outlast them too: 3 s apart, on a loaded machine three events were refused on all four
    # tries within 14 s of terminations, and the fake gave up on them (as Slack would only minutes later) while
    # settled() waited for their ack. Half the stream's span apart (the faults end within about 1.4 spans); at
    # most 30 s, as a sender waits `wait` for its answer.
    w.slack.redeliver_after = min(duration / 2, 30.0)
    until = time.monotonic() + duration
    fault = postgres_faults if store == "postgresql" else sqlite_faults
    running = asyncio.create_task(fault(w, faults, until))
    # SQLite's locks last until /readyz showed them (a slow machine's take longer): the stream goes
    # on while they do, so a write is waiting during each one.
    going: Until = until if store == "postgresql" else lambda: not running.done()
    senders = [slack_conversation(w, tally, going, wait=wait, tag=f"s{i}") for i in range(slack_threads)]
    senders += [web_conversation(w, tally, going, wait=wait, tag=f"w{i}") for i in range(web_conversations)]
    await asyncio.gather(*senders)
    await running
    await count_after_drain(w, tally)
