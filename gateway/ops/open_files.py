"""Open files: as many as the system lets the daemon have, and one quiet line when they run out.

Every connection is a file descriptor. The default soft limit (1,024) is reached by a thousand
idle clients; the shipped unit sets `LimitNOFILE=65536`, and `raise_limit` lifts the soft limit
to the hard one for a daemon started some other way. (Under the unit soft and hard are equal,
so nothing is called: the unit's `SystemCallFilter=~@resources` forbids setrlimit.)

When descriptors run out anyway, asyncio's accept loop reports "socket.accept() out of system
resource" once per pending connection, every second, each with a traceback: 57 MB of log in
20 s. `quiet_accept_errors` lets the first through as one line and then at most one line a
minute saying how many more there were.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from typing import Any

log = logging.getLogger("gateway.ops.open_files")

ACCEPT_ERROR = "socket.accept() out of system resource"
REPORT_EVERY = 60.0  # seconds between lines about descriptors running out
# The period, injectable for a test of the daemon in its own process: the test waits for the second
# line (which counts what was held back) instead of watching a fixed window for lines that must not come.
REPORT_EVERY_ENV = "AGENT_GATEWAY_FD_REPORT_SECONDS"


def raise_limit() -> tuple[int, int]:
    """Lift RLIMIT_NOFILE's soft limit to the hard one; logs the outcome once. Returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as e:
            log.warning("open files: could not raise the soft limit %d to the hard limit %d: %s", soft, hard, e)
            return soft, hard
        log.info("open files: raised the soft limit from %d to %d (the hard limit)", soft, hard)
        return hard, hard
    log.info("open files: limit %d", soft)
    return soft, hard


class _QuietAcceptErrors:
    """A loop exception handler: accept-loop resource errors rate-limited, the rest as before."""

    def __init__(self, previous: Any, every: float) -> None:
        self._previous, self._every = previous, every
        self._next_report = 0.0
        self._suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR:
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now < self._next_report:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last report)" if self._suppressed else ""
        log.error("out of file descriptors: new connections wait%s: %s; raise LimitNOFILE or lower the load",
                  more, context.get("exception"))
        self._suppressed, self._next_report = 0, now + self._every


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    every = float(os.environ.get(REPORT_EVERY_ENV) or REPORT_EVERY)
    loop.set_exception_handler(_QuietAcceptErrors(loop.get_exception_handler(), every))
