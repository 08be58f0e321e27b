"""Database faults under load: the daemon keeps serving or recovers by itself, loses nothing, and
/readyz says what happened meanwhile (tests/chaos/faults.py holds the faults).

PostgreSQL: the daemon's backends terminated again and again, and its database closed to new
connections for a few seconds. SQLite: the file locked by another process for a few seconds,
several times. bench/chaos.py runs the same faults longer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .faults import BUSY, Faults, stream_under_faults
from .harness import Tally, world


def _stalls(log: str) -> str:
    """The daemon's lines naming what held its loop (gateway/ops/loop_watchdog.py): why a /readyz went unanswered."""
    return "\n".join(line for line in log.splitlines() if "logger=gateway.loop" in line)


@pytest.mark.postgres
async def test_postgres_backends_terminated_and_refused_under_load(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "postgresql", busy_timeout=BUSY) as w:
        tally, faults = Tally("postgresql"), Faults()
        await stream_under_faults(w, tally, faults, "postgresql", 16)
        after = (await w.daemon.readiness() or {}).get("database", {})
        assert w.daemon.proc is not None and w.daemon.proc.returncode is None, "the daemon died"
    log = w.daemon.log()
    assert faults.done >= 5 and faults.closed >= 1, faults
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 0), f"{tally}\n{log[-6000:]}"
    assert tally.answered == tally.admitted == tally.sent, tally
    # While it was closed /readyz answered, saying so and since when; afterwards, that it
    # recovered and when.
    down = [d for d in faults.seen if d.get("unavailable_since")]
    assert faults.unanswered == 0, f"{faults}\n{_stalls(log)}"
    assert down and any(d["status"] == "down" for d in down) and "accepting connections" in down[-1]["last_error"], faults
    assert after["status"] == "ok" and "unavailable_since" not in after, after
    assert after["recovered_at"] > down[0]["unavailable_since"] and after["last_error"], after
    assert "Traceback" not in log, log[-6000:]


async def test_sqlite_locked_by_an_admin_under_load(tmp_path: Path) -> None:
    async with world(tmp_path / "config", "sqlite", busy_timeout=BUSY) as w:
        tally, faults = Tally("sqlite"), Faults()
        await stream_under_faults(w, tally, faults, "sqlite", 16)
        after = (await w.daemon.readiness() or {}).get("database", {})
    log = w.daemon.log()
    assert faults.done >= 2, faults
    assert (tally.lost, tally.duplicated, tally.wrong) == (0, 0, 0), f"{tally}\n{log[-6000:]}"
    assert tally.answered == tally.admitted == tally.sent, tally
    # The loop is free while the store waits in its own thread: /readyz answered throughout,
    # first "degraded" (writes waiting), then "unavailable since" (refused past the bound).
    assert faults.unanswered == 0, f"{faults}\n{_stalls(log)}"
    assert any(d["status"] == "degraded" for d in faults.seen), faults
    down = [d for d in faults.seen if d.get("unavailable_since")]
    assert down and down[-1]["last_error"], faults
    assert after["status"] == "ok" and "unavailable_since" not in after, after
    assert after["outages"] >= 2 and after["recovered_at"] > down[-1]["unavailable_since"], after
    assert "Traceback" not in log, log[-6000:]
