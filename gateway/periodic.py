"""The daemon's periodic jobs (the sweeps, approval expiry), in one loop.

Each job keeps going whatever one pass raised: a database that does not answer skips that pass
(one warning line, not a traceback; the next pass does the work), anything else is logged with
its traceback. Cancelling the task is how a job stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.store.availability import StoreUnavailable


async def every(seconds: float, job: Callable[[], Awaitable[object]], what: str, log: logging.Logger) -> None:
    """Run `job` every `seconds`, for as long as the task lives; `what` names it in the log."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except StoreUnavailable as e:
            log.warning("%s skipped: the database is unavailable (%s)", what, e)
        except Exception:
            log.exception("%s failed", what)
