"""Locking a gateway's SQLite file from another process, and measuring the event loop's stalls."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from .loop_lag import own_lag

LOCK_SECONDS = 3.0
STALL_BOUND = 0.100  # the bound on the loop's longest stall, generous on purpose

HOLD_THE_LOCK = """
import select, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT OR REPLACE INTO adapter_state (binding_id, key, value) VALUES ('admin', 'touched', 'yes')")
print("locked", flush=True)
if select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:
    sys.stdin.readline()  # the test lets go early (`Held.let_go`)
print("releasing", flush=True)
sys.stdin.readline()  # the test looks at what happened while the lock was held, then says go
conn.execute("COMMIT")
print("released", flush=True)
"""


class Held(asyncio.Event):
    """Set once the other process has let go of the lock; `let_go()` asks it to now."""

    def __init__(self, stdin: asyncio.StreamWriter) -> None:
        super().__init__()
        self._stdin = stdin
        self.asked = False

    def let_go(self) -> None:
        """Once: a second line would be read as the test's "go" at the end of the hold."""
        if not self.asked:
            self.asked = True
            self._stdin.write(b"now\n")


@contextlib.asynccontextmanager
async def another_process_holds_the_lock(database: Path, seconds: float = LOCK_SECONDS, *,
                                         while_held: Callable[[], None] | None = None) -> AsyncIterator[Held]:
    """A real subprocess holds the write lock on `database` for `seconds`, or until the test calls
    `let_go()` on what this yields, which is set once it has let go. `while_held` runs at the end
    of the hold, the lock still held (what a test sees there cannot have been stored yet; after the
    release it may have been at once). A test whose steps must all fall inside the hold gives a long
    one and lets go itself: on a loaded machine a short hold can end before its steps do."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_THE_LOCK, str(database), str(seconds), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert (await proc.stdout.readline()).strip() == b"locked"
    released = Held(proc.stdin)

    async def watch() -> None:
        assert proc.stdout is not None and proc.stdin is not None
        assert (await proc.stdout.readline()).strip() == b"releasing"
        if while_held is not None:
            while_held()
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        await proc.stdout.readline()
        await proc.wait()
        released.set()

    watcher = asyncio.create_task(watch())
    try:
        yield released
    finally:
        await watcher
        assert proc.returncode == 0


class StallMeter:
    """A timer task: the longest time the loop took to run a 5 ms sleep's wake-up, minus 5 ms and
    minus the time a busy machine kept the loop's thread waiting for a CPU (`loop_lag.own_lag`)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            self.longest = max(self.longest, await own_lag(0.005))

    def __enter__(self) -> StallMeter:
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


