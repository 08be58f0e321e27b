"""`settled()`: wait until nothing is left to happen on its own, then assert what must not have.

An absence ("no second answer", "no duplicate card") cannot be waited for; what can is the end of
everything that could still produce one: every run ended in the store (parked runs, and runs
queued behind one, wait for a person, so they count as ended), the gateway's outbound queue drained, and each fake platform with
no call in flight and nothing it still means to deliver. Each part answers `busy()` with what it
is still doing; settled() returns once every part has said nothing, `steady` polls in a row (a
run's end is written a moment before its last post's answer is read), and fails, saying what was
still busy, after `timeout`.

For a gateway in the test's own process, pass the `Gateway`; for the daemon in its own process,
`daemon_parts(api_url, database_url)` reads the store and /metrics from outside.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sqlite3
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sqlalchemy import text

# Runs that go on by themselves: running, or queued in a conversation no parked run holds (one
# queued behind a parked run waits for a person, as the parked run does).
LIVE_RUNS = ("SELECT (SELECT count(*) FROM runs r WHERE r.status = 'running' OR (r.status = 'queued' AND NOT EXISTS"
             " (SELECT 1 FROM runs p WHERE p.conversation_id = r.conversation_id AND p.status = 'parked')))"
             " + (SELECT count(*) FROM background_runs WHERE status = 'running')")


class Part(Protocol):
    def busy(self) -> list[str] | Awaitable[list[str]]: ...


class _Call:
    """A part made of a function (what the daemon is still doing, read from outside)."""

    def __init__(self, busy: Callable[[], Awaitable[list[str]]]) -> None:
        self.busy = busy


def _live(count: int) -> list[str]:
    return [f"store: {count} runs queued or running"] if count else []


def gateway_part(gw: Any) -> Part:
    """An in-process `Gateway`: its store's live runs and its outbound queue."""
    async def busy() -> list[str]:
        async with gw.store.engine.connect() as conn:
            found = _live(int((await conn.execute(text(LIVE_RUNS))).scalar_one()))
        pending = gw.outbound.pending()
        return found + ([f"outbound: {pending} messages being sent"] if pending else [])
    return _Call(busy)


def daemon_parts(api: str, database_url: str) -> list[Part]:
    """The daemon in its own process: the live runs in its database, its outbound queue from /metrics."""
    async def runs() -> list[str]:
        if database_url.startswith("sqlite"):
            path = database_url.split("///", 1)[1]

            def count() -> int:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                    return int(db.execute(LIVE_RUNS).fetchone()[0])
            return _live(await asyncio.to_thread(count))
        import asyncpg

        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            return _live(int(await conn.fetchval(LIVE_RUNS)))
        finally:
            await conn.close()

    async def outbound() -> list[str]:
        def read() -> str:
            try:
                with urllib.request.urlopen(f"{api}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError as e:  # between a kill and the restart's bind: not settled
                return f"unreachable {e}"
        body = await asyncio.to_thread(read)
        found = re.search(r"^agent_gateway_outbound_pending (\S+)$", body, re.M)
        if found is None:
            return [f"daemon: no outbound figure ({body[:80]})"]
        pending = float(found.group(1))
        return [f"outbound: {pending:.0f} messages being sent"] if pending else []
    return [_Call(runs), _Call(outbound)]


async def settled(*parts: Any, timeout: float = 60.0, steady: int = 3, interval: float = 0.05) -> None:
    """Until every part (a `Gateway`, a fake, `daemon_parts(...)`) has nothing in progress."""
    found: list[Part] = []
    for part in parts:
        if isinstance(part, list | tuple):
            found.extend(part)
        elif hasattr(part, "busy"):
            found.append(part)
        else:
            found.append(gateway_part(part))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    calm = 0
    while True:
        busy: list[str] = []
        for part in found:
            said = part.busy()
            busy += await said if inspect.isawaitable(said) else said
        calm = 0 if busy else calm + 1
        if calm >= steady:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not settled after {timeout}s: {busy}")
        await asyncio.sleep(interval)
