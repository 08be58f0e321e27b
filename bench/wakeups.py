#!/usr/bin/env python3
"""The loop's own wake-ups, the timers a message sets, the log records nobody keeps: two checkouts.

Counts first, each daemon on its own with `bench/count_hook` on its PYTHONPATH (bench/platforms.py's
setup, one platform's fake per binding): idle for `--idle` seconds, the loop thread's `epoll_wait`
calls (`strace -c` attached to that thread alone) and the hook's counts (the loop's passes, the passes
that waited in the selector, the handles and timer handles run (idle, by callback), timers made by whose line, LogRecords
made and emitted by logger and level); then a burst of `--burst` new conversations per platform, the
same counts per message. Then the idle CPU: both daemons without the hook, side by side, every
thread's CPU (`/proc/<pid>/task/*/schedstat`) over `--windows` windows of `--window` seconds, as ms a
minute (the machine's drift falls on both alike).

    .venv/bin/python bench/wakeups.py --before /tmp/base-checkout            # this checkout is "after"
    .venv/bin/python bench/wakeups.py --before /tmp/base --platforms slack --burst 300 --top 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cpu_ab import NAMES, two_checkouts  # noqa: E402
from bench.platforms import Platform, Proc, burst, poll, start_gateway, start_model_server  # noqa: E402
from bench.threads import thread_cpu  # noqa: E402

HOOK = ROOT / "bench" / "count_hook"
Counts = dict[str, Counter[str]]


@contextlib.asynccontextmanager
async def fakes(platforms: list[Platform]) -> AsyncIterator[None]:
    """The platforms' fakes running, and scanned for the daemons' answers."""
    for p in platforms:
        await p.start()
    stop = asyncio.Event()
    poller = asyncio.create_task(poll(platforms, stop))
    try:
        yield
    finally:
        stop.set()
        await poller
        for p in platforms:
            with contextlib.suppress(Exception):
                await p.stop()


async def snapshot(proc: Proc, directory: Path) -> Counts:
    """What the daemon's hook counted so far (it writes on SIGWINCH)."""
    before = set(directory.glob(f"{proc.pid}-*.json"))
    os.kill(proc.pid, signal.SIGWINCH)
    for _ in range(200):
        new = set(directory.glob(f"{proc.pid}-*.json")) - before
        if new:
            got = json.loads(new.pop().read_text())
            return {k: Counter(v) for k, v in got.items()}
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the daemon {proc.pid} wrote no counts")


def minus(a: Counts, b: Counts) -> Counts:
    return {k: a.get(k, Counter()) - b.get(k, Counter()) for k in a}


async def epoll_waits(pid: int, seconds: float) -> int:
    """The loop thread's epoll_wait calls over `seconds` (strace on that thread alone)."""
    strace = await asyncio.create_subprocess_exec("strace", "-c", "-e", "trace=epoll_wait,epoll_pwait", "-p", str(pid),
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    await asyncio.sleep(seconds)
    strace.send_signal(signal.SIGINT)
    _, err = await strace.communicate()
    found = re.findall(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?epoll_p?wait$", err.decode(), re.M)
    return sum(int(n) for n in found)


def switches(pid: int) -> tuple[int, int]:
    """Voluntary context switches so far (each a thread going to sleep, so one wake-up each): every
    thread's, and the loop thread's."""
    total = loop = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            n = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
            total += n
            loop += n if int(tid) == pid else 0
    return total, loop


def process_cpu_ns(pid: int) -> int:
    return sum(thread_cpu(pid).values())


def table(title: str, rows: dict[str, tuple[float, float]], top: int) -> None:
    print(f"\n| {title} | before | after |")
    print("| --- | --- | --- |")
    for name, (b, a) in sorted(rows.items(), key=lambda kv: -max(kv[1]))[:top]:
        print(f"| {name} | {b:.2f} | {a:.2f} |")
    print(f"| all | {sum(b for b, _ in rows.values()):.2f} | {sum(a for _, a in rows.values()):.2f} |")


def side_by_side(per: dict[str, Counts], key: str) -> dict[str, tuple[float, float]]:
    names = set(per["before"].get(key, {})) | set(per["after"].get(key, {}))
    return {n: (float(per["before"].get(key, Counter())[n]), float(per["after"].get(key, Counter())[n])) for n in names}


async def counted(side: str, src: Path, tmp: Path, model_url: str, chosen: list[type[Platform]],
                  args: argparse.Namespace) -> tuple[Counts, int, dict[str, Counts]]:
    """One daemon with the hook: idle counts over args.idle seconds (and its epoll_waits), then each
    platform's burst counts, per message."""
    counts_dir = tmp / "counts"
    counts_dir.mkdir()
    platforms = [cls("gateway") for cls in chosen]
    async with fakes(platforms):
        saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "WAKEUPS_COUNTS")}
        os.environ["WAKEUPS_COUNTS"] = str(counts_dir)
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(HOOK), saved["PYTHONPATH"]) if x)
        try:
            daemon = await start_gateway(src, tmp, model_url, platforms)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            for p in platforms:  # warm-up: the pools, the model cache, the first-run imports
                await burst(p, daemon, 20, args.budget)
            await asyncio.sleep(3.0)  # the warm-up's connections closed, its timers run out
            a = await snapshot(daemon, counts_dir)
            t0, s0 = time.monotonic(), switches(daemon.pid)
            waits = await epoll_waits(daemon.pid, args.idle)
            s1 = switches(daemon.pid)
            idle = per(minus(await snapshot(daemon, counts_dir), a), time.monotonic() - t0)
            # strace's attach stops the loop thread too: both sides' switches are read under it alike.
            idle["switches"] = per(Counter({"all threads": s1[0] - s0[0], "the loop thread": s1[1] - s0[1]}),
                                   time.monotonic() - t0)
            print(f"{side}: idle: {waits / args.idle:.1f} epoll_wait/s, {idle['loop']['passes']:.1f} loop passes/s",
                  flush=True)
            bursts = {}
            for p in platforms:
                a = await snapshot(daemon, counts_dir)
                b = await burst(p, daemon, args.burst, args.budget)
                bursts[p.name] = per(minus(await snapshot(daemon, counts_dir), a), b.messages)
                print(f"{side}: {p.name} burst of {b.messages}: {sum(bursts[p.name]['timers'].values()):.2f} "
                      f"timers/msg, {sum(bursts[p.name]['records'].values()):.2f} records/msg, "
                      f"{sum(bursts[p.name]['emitted'].values()):.2f} emitted/msg", flush=True)
            return idle, waits, bursts
        finally:
            daemon.stop()


def per(counts, n: float):  # type: ignore[no-untyped-def]
    """Counts (or one Counter) divided by `n` (seconds, messages)."""
    if isinstance(counts, Counter):
        return Counter({k: v / n for k, v in counts.items()})
    return {k: per(c, n) for k, c in counts.items()}


async def idle_cpu(sides: dict[str, Path], tmp: Path, model_url: str, chosen: list[type[Platform]],
                   args: argparse.Namespace) -> dict[str, list[float]]:
    """Both daemons without the hook, idle side by side: CPU ms a minute in each window."""
    platforms = {side: [cls("gateway") for cls in chosen] for side in sides}
    daemons: dict[str, Proc] = {}
    async with fakes([p for ps in platforms.values() for p in ps]):
        try:
            for side, src in sides.items():
                (tmp / f"idle-{side}").mkdir()
                daemons[side] = await start_gateway(src, tmp / f"idle-{side}", model_url, platforms[side])
            for side in sides:
                for p in platforms[side]:
                    await burst(p, daemons[side], 20, args.budget)
            await asyncio.sleep(3.0)
            per_minute: dict[str, list[float]] = {side: [] for side in sides}
            for w in range(args.windows):
                cpu0 = {side: process_cpu_ns(d.pid) for side, d in daemons.items()}
                t0 = time.monotonic()
                await asyncio.sleep(args.window)
                elapsed = time.monotonic() - t0
                for side, d in daemons.items():
                    per_minute[side].append((process_cpu_ns(d.pid) - cpu0[side]) / 1e6 * 60 / elapsed)
                print(f"  idle window {w + 1}: " + ", ".join(f"{s} {v[-1]:.0f} ms/min" for s, v in per_minute.items()),
                      flush=True)
            return per_minute
        finally:
            for d in daemons.values():
                d.stop()


async def main(args: argparse.Namespace) -> int:
    sides = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    chosen = [NAMES[n.strip().lower()] for n in args.platforms.split(",")]
    model, model_url, _ = await start_model_server()
    try:
        with tempfile.TemporaryDirectory(prefix="gw-wakeups-") as tmp:
            idle: dict[str, Counts] = {}
            waits: dict[str, int] = {}
            bursts: dict[str, dict[str, Counts]] = {}
            for side, src in sides.items():
                (Path(tmp) / side).mkdir()
                idle[side], waits[side], bursts[side] = await counted(side, src, Path(tmp) / side, model_url,
                                                                      chosen, args)
            print(f"\n| idle, per second | before | after |\n| --- | --- | --- |")
            print(f"| the loop thread's epoll_wait (strace, {args.idle:g} s) | {waits['before'] / args.idle:.1f} "
                  f"| {waits['after'] / args.idle:.1f} |")
            for key in ("passes", "waits", "handles run", "timer handles run"):
                print(f"| loop {key} | {idle['before']['loop'][key]:.1f} | {idle['after']['loop'][key]:.1f} |")
            for key in ("all threads", "the loop thread"):
                print(f"| voluntary context switches, {key} | {idle['before']['switches'][key]:.1f} "
                      f"| {idle['after']['switches'][key]:.1f} |")
            table("idle timers made a second, by whose line", side_by_side(idle, "timers"), args.top)
            table("idle handles run a second, by callback", side_by_side(idle, "callbacks"), args.top)
            table("idle LogRecords made a second", side_by_side(idle, "records"), args.top)
            for cls in chosen:
                per = {side: bursts[side][cls.name] for side in sides}
                print(f"\n### {cls.name}, per message in a burst of {args.burst}")
                print("| loop, per message | before | after |\n| --- | --- | --- |")
                for key in ("passes", "waits", "handles run", "timer handles run"):
                    print(f"| {key} | {per['before']['loop'][key]:.2f} | {per['after']['loop'][key]:.2f} |")
                table("timers made, by whose line", side_by_side(per, "timers"), args.top)
                table("LogRecords made, by logger", side_by_side(per, "records"), args.top)
                table("LogRecords emitted, by logger", side_by_side(per, "emitted"), args.top)
            if args.windows:
                cpu = await idle_cpu(sides, Path(tmp), model_url, chosen, args)
                print(f"\n| idle CPU, ms a minute ({args.windows} windows of {args.window:g} s) | median (min-max) |")
                print("| --- | --- |")
                for side, values in cpu.items():
                    print(f"| {side} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    parser = two_checkouts(__doc__)
    parser.add_argument("--burst", type=int, default=200, help="messages in a burst")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle counted")
    parser.add_argument("--window", type=float, default=30.0, help="seconds in an idle CPU window")
    parser.add_argument("--windows", type=int, default=4, help="idle CPU windows (0: none)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--top", type=int, default=15, help="rows of each by-name table")
    sys.exit(asyncio.run(main(parser.parse_args())))
