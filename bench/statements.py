#!/usr/bin/env python3
"""Every SQL statement and transaction one plain message costs the store, by the store method that issued it.

Issue 37: what is left of ours per message is "ingest, the claim, the run's end, the typing indicator and
the reply's bookkeeping". This runs a gateway in this process (`tests.conftest.running_gateway`) with one
platform's binding on its fake (tests/fakes/, loopback, the real SDK), the bench agent against the fake
OpenAI server (in this process too), on a SQLite file, and sends conversations of plain messages one at a
time: one inbound message -> one run -> one final reply, waited for until the run's end is written (and
a moment after, for what follows it). Each message is counted from its event to the next message's.

Counted on the connection itself (`sqlite3.Connection.set_trace_callback`, which sees every statement
SQLite runs: the driver's own transactions (`gateway/store/driver.py`), which SQLAlchemy's
`before_cursor_execute` never sees, and the ORM's, BEGIN / COMMIT / PRAGMA included), each labelled
by the store method that issued it: a driver transaction by its program's method, an ORM statement by
the outermost `gateway/store` frame of the task that ran it (read in SQLAlchemy's `before_cursor_execute`
and `begin` events, on the loop, before the statement reaches the connection's thread).

CPU: time.thread_time() of each driver transaction's own call (`driver._run_on_sqlite`: its statements,
in the thread that ran them, the loop's when inline), and with `--profile` cProfile's function call
counts per message in SQLAlchemy, aiosqlite, sqlite3 and gateway/store (which load does not move).

    .venv/bin/python bench/statements.py                         # all three platforms
    .venv/bin/python bench/statements.py --platform slack --conversations 20 --turns 3 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import event  # noqa: E402

from bench.platforms import Mattermost, Platform, Slack, Telegram, write_gateway_config  # noqa: E402
from gateway.store import driver, engine as store_engine, repo, sqlite  # noqa: E402

STORE_DIR = str(ROOT / "gateway" / "store") + os.sep
PLATFORMS = {"slack": Slack, "telegram": Telegram, "mattermost": Mattermost}
SETTLE = 0.2  # seconds after a run's end before the next message: what follows the end is the message's


class Counts:
    """Statements seen on the connection, each under the label current when SQLite ran it."""

    def __init__(self) -> None:
        self.label = "?"  # set just before a statement reaches the connection (one connection: never two at once)
        self.on = False
        self.statements: Counter[tuple[str, str]] = Counter()  # (label, kind) -> n
        self.texts: dict[str, Counter[str]] = defaultdict(Counter)  # label -> statement text -> n
        self.cpu: Counter[str] = Counter()  # label -> thread CPU seconds of driver transactions
        self.statement_cpu: Counter[tuple[str, str]] = Counter()  # (label, statement shape) -> seconds
        self.ends = 0
        self.lock = threading.Lock()
        self.seen: set[str] = set()

    def trace(self, sql: str) -> None:
        if not self.on:
            return
        sql = sql.strip()
        head = sql.split(None, 1)[0].upper() if sql else "?"
        # "-- ..." is a trigger's statement inside ours (the full-text index's): counted, not as one of ours.
        kind = "TRIGGER" if sql.startswith("--") else head if head in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA") else "SQL"
        with self.lock:
            if kind in ("BEGIN", "COMMIT", "ROLLBACK"):
                self.seen.clear()
            elif kind == "SQL":
                # sqlite3 reports a statement again each time a trigger of it runs (its expanded text
                # once more, values and all): within one transaction, a repeat is the trigger's.
                if sql in self.seen:
                    kind = "TRIGGER"
                self.seen.add(sql)
            self.statements[(self.label, kind)] += 1
            if kind == "SQL":
                self.texts[self.label][_shape(sql)] += 1

    def snapshot(self) -> Counter[tuple[str, str]]:
        with self.lock:
            return Counter(self.statements)


COUNTS = Counts()
TRACE = True


class Timed:
    """A transaction's sqlite3 connection, each call's thread CPU counted by the statement's shape."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return self._conn.execute(sql, *args)
        finally:
            COUNTS.statement_cpu[(COUNTS.label, _shape(sql)[:70])] += time.thread_time() - t0

    def commit(self) -> None:
        t0 = time.thread_time()
        try:
            self._conn.commit()
        finally:
            COUNTS.statement_cpu[(COUNTS.label, "COMMIT")] += time.thread_time() - t0

    def rollback(self) -> None:
        self._conn.rollback()
_LITERAL = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


def _shape(sql: str) -> str:
    """A statement's text without its values (the trace gives it expanded), for grouping."""
    return _LITERAL.sub("?", " ".join(sql.split()))[:150]


def _task_label() -> str:
    """The outermost gateway/store frame of the running task's coroutines (the store method asked)."""
    with contextlib.suppress(RuntimeError):
        task = asyncio.current_task()
        if task is not None:
            names = []
            coro: Any = task.get_coro()
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
                if frame is not None and frame.f_code.co_filename.startswith(STORE_DIR):
                    names.append(frame.f_code.co_qualname)
                coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
            if names:
                return _short(names[0])
    return "(no store frame)"


def _short(qualname: str) -> str:
    return qualname.replace(".<locals>", "").removesuffix(".program").removesuffix(".<lambda>")


def instrument() -> None:
    """Hooks, before the gateway starts: the connection's trace, SQLAlchemy's events, the driver's calls."""
    real_create = store_engine.create_engine

    def create_engine(url: str, **kw: Any) -> Any:
        engine = real_create(url, **kw)

        def connected(dbapi_connection: Any, _record: Any) -> None:
            aio = dbapi_connection.driver_connection
            if TRACE:  # the trace costs every statement a Python call: off for CPU figures (--cpu)
                aio._conn.set_trace_callback(COUNTS.trace)  # sqlite3.Connection, opened in aiosqlite's thread

        def labelled(*_args: Any) -> None:
            COUNTS.label = "orm " + _task_label()

        event.listen(engine.sync_engine, "connect", connected)
        event.listen(engine.sync_engine, "begin", labelled)
        event.listen(engine.sync_engine, "before_cursor_execute", labelled)
        return engine

    store_engine.create_engine = create_engine  # type: ignore[assignment]
    import gateway.daemon as daemon

    if getattr(daemon, "create_engine", None) is real_create:
        daemon.create_engine = create_engine  # type: ignore[attr-defined]

    real_transaction = driver.transaction
    real_run = driver._run_on_sqlite

    async def transaction(engine: Any, program: Any, *, write: bool = True) -> Any:
        label = _short(getattr(program, "__qualname__", "?"))

        def labelled(q: Any) -> Any:
            return program(q)

        labelled.label = label  # type: ignore[attr-defined]
        return await real_transaction(engine, labelled, write=write)

    def run_on_sqlite(program: Any, conn: Any, write: bool = True) -> Any:
        COUNTS.label = getattr(program, "label", "?")
        t0 = time.thread_time()
        try:
            return real_run(program, Timed(conn), write)
        finally:
            COUNTS.cpu[COUNTS.label] += time.thread_time() - t0

    # The label before the connection's own PRAGMAs around a transaction (inline, or in the thread).
    real_inline, real_thread_run = sqlite.inline, sqlite.run

    def inline(conn: Any, function: Any, bound: float, write: bool = True) -> Any:
        COUNTS.label = getattr(function.args[0], "label", "?")
        return real_inline(conn, function, bound, write)

    async def thread_run(conn: Any, function: Any, bound: float, deadline: float | None = None,
                         write: bool = True) -> Any:
        COUNTS.label = getattr(getattr(function, "args", (None,))[0], "label", "?")
        return await real_thread_run(conn, function, bound, deadline, write)

    sqlite.inline = inline  # type: ignore[assignment]
    sqlite.run = thread_run  # type: ignore[assignment]

    driver.transaction = transaction  # type: ignore[assignment]
    driver._run_on_sqlite = run_on_sqlite  # type: ignore[assignment]

    real_end = repo.Store.end_run

    async def end_run(self: Any, *args: Any, **kw: Any) -> None:
        await real_end(self, *args, **kw)
        COUNTS.ends += 1

    repo.Store.end_run = end_run  # type: ignore[method-assign]


async def until(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def one_platform(name: str, conversations: int, turns: int, profile: bool) -> dict[str, Any]:
    from tests.conftest import running_gateway
    from tests.fakes.openai import FakeOpenAI
    from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

    p: Platform = PLATFORMS[name]("gateway")
    model = await FakeOpenAI().start()
    await p.start()
    os.environ.update({"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "not-needed",
                       "BENCH_SLACK_BOT_TOKEN": BOT_TOKEN, "BENCH_SLACK_APP_TOKEN": APP_TOKEN,
                       "BENCH_SLACK_SIGNING_SECRET": SIGNING_SECRET, "BENCH_MM_TOKEN": Mattermost.TOKEN,
                       "BENCH_TELEGRAM_TOKEN": getattr(getattr(p, "fake", None), "token", "")})
    per_turn: list[list[Counter[tuple[str, str]]]] = [[] for _ in range(turns)]
    cpu: Counter[str] = Counter()
    profiler = cProfile.Profile() if profile else None
    messages = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config"
            write_gateway_config(config, 0, [p])
            async with running_gateway(config):
                # A warm-up conversation, not counted: first-contact identities, caches.
                key = None
                for t in range(2):
                    key, record = await p.send(key, f"warm {t}", new=t == 0)
                    ends = COUNTS.ends
                    await until(lambda: (p.scan(), record.final)[1] is not None and COUNTS.ends > ends, "warm-up")
                await asyncio.sleep(SETTLE)
                COUNTS.on = True
                cpu0 = Counter(COUNTS.cpu)
                for c in range(conversations):
                    key = None
                    for t in range(turns):
                        before = COUNTS.snapshot()
                        ends = COUNTS.ends
                        if profiler is not None:
                            profiler.enable()
                        key, record = await p.send(key, f"message {c}.{t}", new=t == 0)
                        await until(lambda: (p.scan(), record.final)[1] is not None and COUNTS.ends > ends,
                                    f"{name} message {c}.{t}")
                        await asyncio.sleep(SETTLE)
                        if profiler is not None:
                            profiler.disable()
                        per_turn[t].append(COUNTS.snapshot() - before)
                        messages += 1
                COUNTS.on = False
                cpu = Counter({k: v - cpu0.get(k, 0.0) for k, v in COUNTS.cpu.items()})
    finally:
        await p.stop()
        await model.stop()
    return {"per_turn": per_turn, "cpu": cpu, "messages": messages, "profiler": profiler}


def mean_counts(samples: list[Counter[tuple[str, str]]]) -> dict[tuple[str, str], float]:
    total: Counter[tuple[str, str]] = Counter()
    for s in samples:
        total.update(s)
    return {k: v / max(1, len(samples)) for k, v in total.items()}


def print_table(title: str, counts: dict[tuple[str, str], float]) -> None:
    labels = sorted({label for label, _ in counts}, key=lambda lb: (lb.startswith("orm "), lb))
    print(f"\n{title}")
    print(f"  {'store method':52} {'SQL':>6} {'tx':>5} {'PRAGMA':>7} {'BEGIN':>6} {'COMMIT':>7} {'trigger':>8}")
    sums = Counter()
    for label in labels:
        row = {kind: counts.get((label, kind), 0.0) for kind in ("SQL", "BEGIN", "COMMIT", "PRAGMA", "ROLLBACK", "TRIGGER")}
        # A transaction: a BEGIN (driver's IMMEDIATE, or the ORM's implicit one before a write); an ORM
        # read outside one counts as its own statement, no transaction.
        tx = row["BEGIN"]
        sums.update({**row, "tx": tx})
        print(f"  {label:52} {row['SQL']:6.2f} {tx:5.2f} {row['PRAGMA']:7.2f} {row['BEGIN']:6.2f} {row['COMMIT']:7.2f}"
              f" {row['TRIGGER']:8.2f}")
    print(f"  {'total':52} {sums['SQL']:6.2f} {sums['tx']:5.2f} {sums['PRAGMA']:7.2f} {sums['BEGIN']:6.2f}"
          f" {sums['COMMIT']:7.2f} {sums['TRIGGER']:8.2f}")


def print_texts(messages: int) -> None:
    print("\n  statements (per message):")
    for label in sorted(COUNTS.texts):
        for sql, n in COUNTS.texts[label].most_common():
            print(f"    {n / messages:5.2f}  {label:34} {sql}")


PACKAGES = {"sqlalchemy": f"{os.sep}sqlalchemy{os.sep}", "aiosqlite": f"{os.sep}aiosqlite{os.sep}",
            "gateway/store": STORE_DIR}


def profile_counts(profiler: cProfile.Profile, messages: int) -> None:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    calls: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for (filename, _line, func), (_cc, nc, tt, _ct, _callers) in stats.items():
        for package, marker in PACKAGES.items():
            if marker in filename:
                calls[package] += nc
                own[package] += tt
                break
        else:
            if filename == "~" and "sqlite3" in func:
                calls["sqlite3 (C)"] += nc
                own["sqlite3 (C)"] += tt
    print("\n  cProfile, per message: function calls (own time, profiled ms)")
    for package in (*PACKAGES, "sqlite3 (C)"):
        print(f"    {package:16} {calls[package] / messages:8.1f}  ({own[package] * 1000 / messages:.3f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=2, help="messages per conversation (the first starts it)")
    parser.add_argument("--profile", action="store_true", help="cProfile call counts of the store's libraries")
    parser.add_argument("--cpu", action="store_true",
                        help="no statement trace (it costs each statement a Python call): CPU figures only")
    parser.add_argument("--texts", action="store_true", help="each statement's text, per message")
    args = parser.parse_args()
    global TRACE
    TRACE = not args.cpu
    instrument()
    for name in PLATFORMS if args.platform == "all" else [args.platform]:
        COUNTS.statements.clear()
        COUNTS.texts.clear()
        COUNTS.statement_cpu.clear()
        result = asyncio.run(one_platform(name, args.conversations, args.turns, args.profile))
        print(f"\n=== {name}: {args.conversations} conversations x {args.turns} messages, per message")
        for t, samples in enumerate(result["per_turn"]):
            print_table(f"message {t + 1} of its conversation"
                        f" ({'a new conversation' if t == 0 else 'a follow-up'}), {len(samples)} messages",
                        mean_counts(samples))
        messages = result["messages"]
        print("\n  driver transactions' own CPU per message (time.thread_time around driver._run_on_sqlite):")
        for label, seconds in sorted(result["cpu"].items()):
            print(f"    {label:40} {seconds * 1e6 / messages:8.1f} us")
        print(f"    {'total':40} {sum(result['cpu'].values()) * 1e6 / messages:8.1f} us")
        if args.texts:
            print("    by statement (execute and fetch, or commit):")
            for (label, sql), seconds in sorted(COUNTS.statement_cpu.items(), key=lambda kv: -kv[1]):
                print(f"      {seconds * 1e6 / messages:8.1f} us  {label:20} {sql}")
        if args.texts:
            print_texts(messages)
        if result["profiler"] is not None:
            profile_counts(result["profiler"], messages)


if __name__ == "__main__":
    main()
