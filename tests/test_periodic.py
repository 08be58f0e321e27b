"""The daemon's periodic jobs keep going whatever one pass raised: a database that does not answer
skips a pass with one line (no traceback), anything else is logged with its traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.periodic import every
from gateway.store.availability import StoreUnavailable


async def test_a_failing_pass_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    passes: list[int] = []
    done = asyncio.Event()

    async def job() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise StoreUnavailable("the database is locked", retry_after=1.0)
        if len(passes) == 2:
            raise RuntimeError("a bug in one pass")
        done.set()

    log = logging.getLogger("test.periodic")
    with caplog.at_level(logging.WARNING, logger="test.periodic"):
        task = asyncio.create_task(every(0, job, "the sweep", log))
        await asyncio.wait_for(done.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    skipped, failed = caplog.records[:2]
    assert skipped.getMessage().startswith("the sweep skipped: the database is unavailable") and not skipped.exc_info
    assert failed.getMessage() == "the sweep failed" and failed.exc_info is not None
    assert passes[:3] == [0, 1, 2], "each pass after a failing one still ran"
