#!/usr/bin/env python3
"""The daemon's CPU per message in a burst, by thread, and the loop thread's by whose code.

`bench/platforms.py` reads the daemon's whole process from /proc; this says which thread spent it:
the event loop's, aiosqlite's connection thread (the store's transactions that do not run inline),
the default executor's, any other. Each thread's own CPU (`/proc/<pid>/task/<tid>/schedstat`,
nanoseconds) is read before and after each burst and divided by the messages; the threads are named
by the daemon itself (`THREADS_HOOK`, a sitecustomize put on its PYTHONPATH that writes
`threading.enumerate()`'s native ids and names on SIGWINCH). The same hook times the store's driver
transactions (`driver._run_on_sqlite`, `time.thread_time_ns` around each, by the thread that ran
it: the loop when inline, aiosqlite's thread otherwise). pydantic-ai alone's burst (its own
process, `bench/platforms.py`'s) runs beside each of the daemon's, the order alternating, so the
ratio is taken within a round.

`--profile` adds one burst per round under cProfile (`bench/profile_hook`, the loop thread only, on
its CPU clock): the loop's own time split by whose code (the platform SDK and aiohttp, our inbound,
the store, the runner, the outbound side, pydantic-ai and the model's client, asyncio), each share
then given as ms of the unprofiled loop thread's CPU per message. Read these as a ranking of the
Python: cProfile inflates a Python call ~8x and a C call (SQLite's statements, json) hardly, so C-heavy
code reads too small (the driver transactions' own figure is the one to use for the store); and it
slows runs enough that drafts show which an unprofiled burst never posts (5 Web API calls a Slack
message under it, 2 without); `--untimed` holds those off in the profiled burst (no first draft, no
typing renewal), so it counts the calls the unprofiled burst makes.

    .venv/bin/python bench/threads.py                               # Slack, 3 rounds of 200
    .venv/bin/python bench/threads.py --platform mattermost --profile
    .venv/bin/python bench/threads.py --platform telegram --profile --untimed
    .venv/bin/python bench/threads.py --gateway-src /tmp/old-checkout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cpu_diff import NAMES, profiled  # noqa: E402
from bench.platforms import (CONCURRENT_RUNS, AloneBursts, Burst, Mattermost, Platform, burst, poll,  # noqa: E402
                             start_gateway, start_model_server)

HOOK = ROOT / "bench" / "profile_hook"
THREADS_HOOK = '''
import json, os, signal, sys, threading, time
exec(compile(open(%(profile_hook)r).read(), %(profile_hook)r, "exec"))
_store = {}  # thread name -> [driver transactions, their thread CPU ns]
_programs = {}  # the store method a transaction is of ("Store.ingest") -> [transactions, thread CPU ns]

def _timed(run):
    def timed(program, *args, **kwargs):
        t0 = time.thread_time_ns()
        try:
            return run(program, *args, **kwargs)
        finally:
            took = time.thread_time_ns() - t0
            for key, table in ((threading.current_thread().name, _store),
                               (getattr(program, "__qualname__", "?").split(".<locals>")[0], _programs)):
                got = table.setdefault(key, [0, 0])
                got[0] += 1
                got[1] += took
    return timed

def _names(*_):
    driver = sys.modules.get("gateway.store.driver")
    if driver is not None and not hasattr(driver._run_on_sqlite, "__wrapped_by_bench__"):
        driver._run_on_sqlite = _timed(driver._run_on_sqlite)  # looked up at each transaction
        driver._run_on_sqlite.__wrapped_by_bench__ = True
    out = {"names": {t.native_id: t.name for t in threading.enumerate()}, "store": _store, "programs": _programs}
    path = os.path.join(os.environ["THREADS_OUT"], "%%d.json" %% os.getpid())
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGWINCH, _names)
'''
# Whose code a loop-thread function is, by its file's path (the first match wins); a builtin or the
# standard library's is charged to its caller.
KINDS = (
    ("pydantic-ai, openai, httpx", ("/pydantic_ai/", "/pydantic_graph/", "/openai/", "/httpx/", "/httpcore/",
                                    "/h11/", "/anyio/", "/sniffio/", "/pydantic/", "/pydantic_core/",
                                    "/typing_extensions", "/jiter/", "/opentelemetry/", "/logfire", "/griffe")),
    # Ours before the SDKs': "/telegram/" and "/mattermost" are in our adapters' paths too (adapters/telegram/
    # was charged to the SDK, and "adapters (ours)" read 0).
    ("adapters (ours)", ("/adapters/",)),
    ("platform SDK, aiohttp", ("/slack_sdk/", "/slack_bolt/", "/telegram/", "/aiohttp/", "/yarl/", "/multidict/",
                               "/websockets/", "/aiohappyeyeballs/", "/frozenlist/", "/propcache/", "/mattermost")),
    ("inbound (ours)", ("/gateway/inbound/", "/gateway/membership", "/gateway/messages", "/bindings/")),
    ("store, loop side (ours, SQLite inline)", ("/gateway/store/", "/sqlalchemy/", "/aiosqlite/", "sqlite3")),
    ("runner (ours)", ("/gateway/runs/", "/capabilities/")),
    ("outbound (ours)", ("/gateway/outbound/", "/gateway/markdown")),
    ("the rest of ours", ("/gateway/",)),
    ("asyncio", ("/asyncio/",)),
    ("logging", ("/logging/",)),
)


def kind(filename: str) -> str | None:
    return next((name for name, marks in KINDS if any(m in filename for m in marks)), None)


def api_calls(platform: Platform) -> list[str]:
    """Every call the platform's fake has had so far, by name: a Bot API or Web API method; Mattermost's
    REST route (its ids cut) or a websocket typing frame."""
    fake: Any = getattr(platform, "fake")
    if isinstance(platform, Mattermost):
        routes = [f"{method} {'/'.join('*' if len(part) == 26 else part for part in path.split('/'))}"
                  for method, path, _ in fake.requests]
        return routes + ["typing (websocket)"] * len(fake.typing)
    return [call.method for call in fake.calls]


def per_message(calls: list[str], messages: int) -> str:
    return ", ".join(f"{name} {n / messages:.2f}" for name, n in Counter(calls).most_common())


def thread_cpu(pid: int) -> dict[int, int]:
    """Each thread's CPU so far, ns (schedstat: on the CPU, not waiting)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return out


Tally = dict[str, tuple[int, int]]  # a name -> (driver transactions, their CPU ns), so far


async def thread_names(pid: int, out: Path) -> tuple[dict[int, str], Tally, Tally]:
    """The daemon's threads by native id; its driver transactions so far by thread name, and by store method."""
    path = out / f"{pid}.json"
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGWINCH)
    for _ in range(100):
        if path.exists():
            got = json.loads(path.read_text())
            return ({int(k): v for k, v in got["names"].items()},
                    {k: (int(v[0]), int(v[1])) for k, v in got["store"].items()},
                    {k: (int(v[0]), int(v[1])) for k, v in got["programs"].items()})
        await asyncio.sleep(0.05)
    return {}, {}, {}


def label(name: str) -> str:
    """A thread's name without its number: threads of one kind come and go between bursts."""
    if name == "MainThread":
        return "the event loop (MainThread)"
    if "_connection_worker_thread" in name:
        return "aiosqlite's connection thread"
    if name.startswith("asyncio_"):
        return "the loop's default executor"
    return name.split(" ", 1)[-1].strip("()") if name.startswith("Thread-") else name


def charged(path: Path) -> tuple[dict[str, float], float, list[tuple[float, str]]]:
    """Own CPU seconds by kind of code in a pstats file, a builtin's or the standard library's charged
    to the nearest caller that is someone's (split by the time each caller's calls took); the total;
    and our own functions (gateway/, adapters/) with their inclusive seconds."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    memo: dict[tuple[str, int, str], dict[str, float]] = {}

    def owner(func: tuple[str, int, str], seen: frozenset[tuple[str, int, str]]) -> dict[str, float]:
        k = kind(func[0])
        if k is not None:
            return {k: 1.0}
        if func in memo:
            return memo[func]
        callers = stats.get(func, (0, 0, 0, 0, {}))[4]
        weights = {c: edge[3] for c, edge in callers.items() if c not in seen and edge[3] > 0}
        spent = sum(weights.values())
        out: dict[str, float] = defaultdict(float)
        if not spent:
            out["the rest (the loop's own, stdlib)"] = 1.0
            weights = {}
        for c, w in weights.items():
            for k2, f in owner(c, seen | {func}).items():
                out[k2] += f * w / spent
        memo[func] = out
        return out

    out: dict[str, float] = defaultdict(float)
    total = 0.0
    ours: list[tuple[float, str]] = []
    for func, (_cc, _nc, tt, ct, _callers) in stats.items():
        total += tt
        for k, f in owner(func, frozenset()).items():
            out[k] += tt * f
        if "/gateway/" in func[0] or "/adapters/" in func[0]:
            ours.append((ct, f"{func[2]} ({func[0].split(str(ROOT) + '/', 1)[-1]}:{func[1]})"))
    return out, total, ours


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="gw-threads-") as tmp:
        hook, stats, names_out = Path(tmp) / "hook", Path(tmp) / "stats", Path(tmp) / "names"
        for d in (hook, stats, names_out):
            d.mkdir()
        (hook / "sitecustomize.py").write_text(THREADS_HOOK % {"profile_hook": str(HOOK / "sitecustomize.py")})
        (stats / "mode").write_text("gc")
        os.environ.update(CPU_DIFF_STATS=str(stats), THREADS_OUT=str(names_out),
                          PYTHONPATH=os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p))
        platform = NAMES[args.platform]("gateway")
        await platform.start()
        stop = asyncio.Event()
        poller = asyncio.create_task(poll([platform], stop))
        model, model_url, _ = await start_model_server()
        procs = [model]
        try:
            daemon = await start_gateway(Path(args.gateway_src).resolve(), Path(tmp), model_url, [platform])
            procs.append(daemon)
            alone = await AloneBursts.start(model_url, CONCURRENT_RUNS)
            procs.append(alone.proc)
            await thread_names(daemon.pid, names_out)  # the driver's transactions timed from here on
            await burst(platform, daemon, args.burst, args.budget)  # warm-up, as bench/platforms.py does
            await alone.burst(args.burst, args.budget)
            per_thread: dict[str, list[float]] = defaultdict(list)
            whole: list[float] = []
            transactions: dict[str, list[float]] = defaultdict(list)  # the driver's, per message, by thread
            driver_cpu: dict[str, list[float]] = defaultdict(list)  # their own CPU ms per message, by thread
            programs: dict[str, list[tuple[float, float]]] = defaultdict(list)  # by store method: per message, CPU ms
            alone_cpu: list[float] = []
            shares: dict[str, float] = defaultdict(float)
            profiled_total = 0.0
            profiled_messages = 0
            inclusive: dict[str, float] = defaultdict(float)
            calls: dict[str, list[str]] = defaultdict(list)  # the platform's calls in the bursts, unprofiled / profiled
            counted: dict[str, int] = defaultdict(int)  # and their messages
            n = 0
            for r in range(args.rounds):
                for side in (("daemon", "alone") if r % 2 == 0 else ("alone", "daemon")):
                    if side == "alone":
                        alone_cpu.append((await alone.burst(args.burst, args.budget)).cpu_ms)
                        continue
                    _, store0, programs0 = await thread_names(daemon.pid, names_out)
                    before, seen = thread_cpu(daemon.pid), len(api_calls(platform))
                    b: Burst = await burst(platform, daemon, args.burst, args.budget)
                    after = thread_cpu(daemon.pid)
                    calls["unprofiled"] += api_calls(platform)[seen:]
                    counted["unprofiled"] += b.messages
                    names, store1, programs1 = await thread_names(daemon.pid, names_out)
                    for name, (count, ns) in programs1.items():
                        count0, ns0 = programs0.get(name, (0, 0))
                        programs[name].append(((count - count0) / b.messages, (ns - ns0) / 1e6 / b.messages))
                    for name, (count, ns) in store1.items():
                        count0, ns0 = store0.get(name, (0, 0))
                        where = label(name)
                        transactions[where].append((count - count0) / b.messages)
                        driver_cpu[where].append((ns - ns0) / 1e6 / b.messages)
                    by: dict[str, float] = defaultdict(float)
                    for tid, ns in after.items():
                        by[label(names.get(tid, f"thread {tid} (ended or unnamed)"))] += (ns - before.get(tid, 0)) / 1e6
                    for k, v in by.items():
                        per_thread[k].append(v / b.messages)
                    whole.append(sum(by.values()) / b.messages)
                    if args.profile:
                        seen = len(api_calls(platform))
                        pb, path = await profiled(daemon.pid, stats, n, burst(platform, daemon, args.burst, args.budget),
                                                  "untimed" if args.untimed else "profile")
                        (stats / "mode").write_text("gc")
                        calls["profiled"] += api_calls(platform)[seen:]
                        counted["profiled"] += pb.messages
                        n += 1
                        got, total, own = charged(path)
                        for k, v in got.items():
                            shares[k] += v
                        for t, f in own:
                            inclusive[f] += t
                        profiled_total += total
                        profiled_messages += pb.messages
                print(f"  round {r + 1}: daemon {whole[-1]:.2f} ms a message (loop "
                      f"{per_thread['the event loop (MainThread)'][-1]:.2f}), alone {alone_cpu[-1]:.2f} ms a run",
                      flush=True)
            med = statistics.median
            print(f"\n{platform.name}, {args.rounds} rounds of {args.burst} new conversations at once; load average "
                  f"{os.getloadavg()[0]:.1f}. CPU per message, median of rounds (min-max):")
            print("| thread | ms per message |\n| --- | --- |")
            for k, v in sorted(per_thread.items(), key=lambda kv: -med(kv[1])):
                if med(v) >= 0.005:
                    print(f"| {k} | {med(v):.2f} ({min(v):.2f}-{max(v):.2f}) |")
                if k in driver_cpu:
                    d = driver_cpu[k]
                    print(f"| of which the store's driver transactions ({med(transactions[k]):.2f} a message) "
                          f"| {med(d):.2f} ({min(d):.2f}-{max(d):.2f}) |")
            print(f"| the daemon, all threads | {med(whole):.2f} ({min(whole):.2f}-{max(whole):.2f}) |")
            print(f"| pydantic-ai alone, per run | {med(alone_cpu):.2f} ({min(alone_cpu):.2f}-{max(alone_cpu):.2f}) |")
            print("\n| the store's driver transactions, by store method | a message | CPU ms a message |\n| --- | --- | --- |")
            for name, got in sorted(programs.items(), key=lambda kv: -med([c for _, c in kv[1]])):
                print(f"| {name} | {med([n for n, _ in got]):.2f} | {med([c for _, c in got]):.3f} |")
            for which, made in calls.items():
                print(f"the platform's calls per message, {which} bursts: {per_message(made, counted[which])}")
            ratios = [w / a for w, a in zip(whole, alone_cpu)]
            print(f"daemon / alone, per round: {', '.join(f'{x:.2f}' for x in ratios)}x (median {med(ratios):.2f}x)")
            if args.profile and profiled_total:
                loop = med(per_thread["the event loop (MainThread)"])
                print(f"\n| the loop thread, whose code (cProfile's shares x the unprofiled loop's {loop:.2f} ms) "
                      "| share | ms per message |\n| --- | --- | --- |")
                for k, v in sorted(shares.items(), key=lambda kv: -kv[1]):
                    print(f"| {k} | {v / profiled_total:.1%} | {v / profiled_total * loop:.2f} |")
                print(f"\n| our functions, inclusive (cProfile's ms per message, inflated) | ms |\n| --- | --- |")
                for f, t in sorted(inclusive.items(), key=lambda kv: -kv[1])[:args.top]:
                    print(f"| {f} | {t * 1000 / profiled_messages:.3f} |")
        finally:
            stop.set()
            await poller
            for proc in reversed(procs):
                proc.stop()
            await platform.stop()
    return 0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=sorted(NAMES), default="slack")
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--profile", action="store_true", help="a cProfiled burst per round: the loop by whose code")
    parser.add_argument("--top", type=int, default=40, help="our functions listed with --profile")
    parser.add_argument("--untimed", action="store_true",
                        help="with --profile: no first draft and no typing renewal in the profiled burst, which an "
                             "unprofiled burst does not make either (bench/profile_hook says why)")
    parser.add_argument("--gateway-src", default=str(ROOT), help="the checkout whose daemon is measured")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
