"""Database faults under load: the daemon keeps serving or recovers by itself, loses nothing, and
/readyz says what happened meanwhile.

PostgreSQL: the daemon's own backends (this test's database only, never another session on the
shared server) terminated with `pg_terminate_backend` again and again, and once closed to new
connections for a few seconds, as a restart looks from the daemon. SQLite: the file's write lock
held by another process (an admin's `sqlite3` shell) for a few seconds, several times.
bench/chaos.py runs the same faults longer.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from tests.conftest import PG_ADMIN_DSN
from tests.support.locking import another_process_holds_the_lock

from .harness import Tally, World, count_after_drain, slack_conversation, web_conversation, world

BUSY = 1.0  # database.busy_timeout_seconds: past it a write is refused (503 / no ack) and tried again


async def _stream(w: World, tally: Tally, duration: float, fault: Any) -> Any:
    """Slack threads and web conversations for `duration` s with `fault` running alongside."""
    until = time.monotonic() + duration
    senders = [slack_conversation(w, tally, until, wait=60, tag=f"s{i}") for i in range(4)]
    senders += [web_conversation(w, tally, until, wait=60, tag=f"w{i}") for i in range(3)]
    faults = asyncio.create_task(fault(until))
    await asyncio.gather(*senders)
    result = await faults
    await count_after_drain(w, tally)
    return result


def _database_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def test_postgres_backends_terminated_and_refused_under_load(tmp_path: Path) -> None:
    import asyncpg

    async with world(tmp_path / "config", "postgresql", busy_timeout=BUSY) as w:
        w.slack.redeliver_after = 3.0  # what Slack does (after minutes) with an event nobody acked
        name = _database_name(w.url)
        seen: list[dict[str, Any]] = []

        async def terminate(admin: Any) -> int:
            # Only this test database's backends (the daemon's), never the admin's own session.
            rows = await admin.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                     " WHERE datname = $1 AND pid <> pg_backend_pid()", name)
            return sum(1 for r in rows if r[0])

        async def fault(until: float) -> int:
            rng = random.Random(22)
            admin = await asyncpg.connect(PG_ADMIN_DSN)  # another database: this one gets closed
            killed = 0
            try:
                await asyncio.sleep(2)
                for _ in range(4):  # connections dropped under the daemon's feet
                    killed += await terminate(admin)
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
                # Closed to new connections for a few seconds, its sessions ended: a restart.
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                try:
                    killed += await terminate(admin)
                    closed_until = time.monotonic() + 4
                    while time.monotonic() < closed_until:
                        state = await w.daemon.readiness()
                        assert state is not None, "the daemon stopped answering /readyz"
                        seen.append(state["database"])
                        await asyncio.sleep(0.3)
                finally:
                    await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                while time.monotonic() < until:
                    killed += await terminate(admin)
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
            finally:
                await admin.close()
            return killed

        tally = Tally("postgresql")
        killed = await _stream(w, tally, 16, fault)
        after = (await w.daemon.readiness() or {}).get("database", {})
        assert w.daemon.proc is not None and w.daemon.proc.returncode is None, "the daemon died"
    log = w.daemon.log()
    assert killed >= 5, f"only {killed} backends terminated"
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 0), f"{tally}\n{log[-6000:]}"
    assert tally.answered == tally.admitted == tally.sent, tally
    # While it was closed /readyz said so, and since when; afterwards, that it recovered and when.
    down = [d for d in seen if d.get("unavailable_since")]
    assert down and any(d["status"] == "down" for d in down) and "accepting connections" in down[-1]["last_error"], seen
    assert after["status"] == "ok" and "unavailable_since" not in after, after
    assert after["recovered_at"] > down[0]["unavailable_since"] and after["last_error"], after
    assert "Traceback" not in log, log[-6000:]


async def test_sqlite_locked_by_an_admin_under_load(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite", busy_timeout=BUSY) as w:
        w.slack.redeliver_after = 3.0  # what Slack does (after minutes) with an event nobody acked
        seen: list[dict[str, Any]] = []

        async def fault(until: float) -> int:
            locks = 0
            await asyncio.sleep(2)
            while time.monotonic() < until - 3 and locks < 3:
                async with another_process_holds_the_lock(Path(w.url.split("///", 1)[1]), 3.0) as released:
                    locks += 1
                    while not released.is_set():
                        state = await w.daemon.readiness()
                        # The loop is free while the store waits in its own thread: /readyz answers.
                        assert state is not None, "the daemon stopped answering /readyz during the lock"
                        seen.append(state["database"])
                        await asyncio.sleep(0.2)
                await asyncio.sleep(2)
            return locks

        tally = Tally("sqlite")
        locks = await _stream(w, tally, 16, fault)
        after = (await w.daemon.readiness() or {}).get("database", {})
    log = w.daemon.log()
    assert locks >= 2, locks
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 0), f"{tally}\n{log[-6000:]}"
    assert tally.answered == tally.admitted == tally.sent, tally
    # During a lock: writes waiting ("degraded"), then refused past the bound ("unavailable since").
    assert any(d["status"] == "degraded" for d in seen), seen
    down = [d for d in seen if d.get("unavailable_since")]
    assert down and down[-1]["last_error"], seen
    assert after["status"] == "ok" and "unavailable_since" not in after, after
    assert after["outages"] >= 2 and after["recovered_at"] > down[-1]["unavailable_since"], after
    assert "Traceback" not in log, log[-6000:]
