#!/usr/bin/env python3
"""Where the daemon's model run does more work than pydantic-ai alone's: per message, by function.

Issue 37 compares the daemon's CPU per message in a burst with pydantic-ai alone's per run
(`bench/platforms.py`). This bench takes both bursts as they are there (the daemon as its own
process on a platform's fake, pydantic-ai alone in a process of its own, both against one instant
model server, 32 runs at once) and profiles each burst of each side in turn:

- cProfile (`bench/profile_hook/sitecustomize.py`, switched on and off by signal around a burst):
  calls per message by function. Counts do not move with the machine's load, so they say where
  one side does more than the other even when their CPU figures, minutes apart, cannot.
- `--spy`: py-spy too, one more burst per side, samples per message (inclusive) by function.
- `--functions`: the functions of the platform SDKs (and aiohttp) and of the gateway, calls and own /
  inclusive time per message; with `--bare`, beside the bare echo bot's (`bench/bare_bots.py`, profiled
  over a burst of its own on the same fake): what the adapter does per message beyond the SDK's floor.

    .venv/bin/python bench/cpu_diff.py                       # Slack, 3 rounds of 300 per side
    .venv/bin/python bench/cpu_diff.py --platform mattermost --rounds 2 --burst 200 --spy
    .venv/bin/python bench/cpu_diff.py --gateway-src /tmp/old-checkout   # another checkout's daemon
    .venv/bin/python bench/cpu_diff.py --platform telegram --rounds 1 --burst 200 --functions --bare
    .venv/bin/python bench/cpu_diff.py --platform telegram --untimed   # the profiled bursts as unprofiled ones run

Printed: calls per message by library (pydantic-ai, openai, httpx/httpcore, anyio, pydantic,
asyncio, the gateway's own) for each side, then the functions of pydantic-ai, the OpenAI SDK,
httpx/httpcore and anyio called most more often per message by the daemon than alone, with the
time cProfile gave them (inflated by cProfile itself; read as shares). Nothing is judged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import (  # noqa: E402
    CONCURRENT_RUNS,
    run_to_answer,
    Mattermost,
    Proc,
    Slack,
    Telegram,
    _bench_agent,
    _model_env,
    burst,
    poll,
    start_bare,
    start_gateway,
    start_model_server,
)

NAMES = {"slack": Slack, "telegram": Telegram, "mattermost": Mattermost}
HOOK = ROOT / "bench" / "profile_hook"
# Whose code a function is, by its file's path (the first match wins).
LIBRARIES = (
    ("pydantic-ai", ("/pydantic_ai/", "/pydantic_graph/", "/pydantic_ai_harness/")),
    ("openai", ("/openai/",)),
    ("httpx, httpcore", ("/httpx/", "/httpcore/", "/httpx2/", "/httpcore2/", "/h11/")),
    ("anyio, sniffio", ("/anyio/", "/sniffio/")),
    ("pydantic", ("/pydantic/", "/pydantic_core/", "/typing_extensions")),
    ("opentelemetry, logfire", ("/opentelemetry/", "/logfire")),
    ("the gateway", ("/gateway/", "/adapters/", "/capabilities/", "/bindings/")),
    ("platform SDKs, aiohttp", ("/slack_sdk/", "/slack_bolt/", "/telegram/", "/aiohttp/", "/yarl/", "/multidict/")),
    ("the store", ("/sqlalchemy/", "/aiosqlite/", "sqlite3")),
    ("asyncio", ("/asyncio/",)),
    ("logging", ("/logging/",)),
)
EXAMINED = ("pydantic-ai", "openai", "httpx, httpcore", "anyio, sniffio")
OURS = ("platform SDKs, aiohttp", "the gateway")  # `--functions`: the rows a platform's cost is in


def library(filename: str) -> str:
    """`filename` a path (cProfile's) or a py-spy frame, "function (path relative to site-packages)"."""
    filename = filename.replace("(", "(/")
    return next((name for name, marks in LIBRARIES if any(m in filename for m in marks)), "the rest")


def where(filename: str) -> str:
    """A finer name for "the rest": the package (site-packages) or the standard library's module."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins" if filename.startswith("~") else filename
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/lib/python3" in filename:
        return "stdlib " + filename.split("/lib/python3", 1)[1].split("/", 1)[1].split("/", 1)[0]
    return filename


async def alone_worker() -> None:
    """pydantic-ai alone as `bench/platforms.py` runs it, a burst per line read ("<n>"), its CPU per run printed."""
    agent = _bench_agent()

    async def bursting(messages: int) -> float:
        queue = list(range(messages))

        async def worker() -> None:
            while queue:
                await run_to_answer(agent, f"burst {queue.pop()}")

        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(CONCURRENT_RUNS)))
        return (time.process_time() - cpu0) * 1000 / messages

    def read_line() -> str:
        # The hook's signals must reach the loop's thread: one delivered to this reader thread waited
        # for the idle loop to wake, which nothing did (the bench's "no profile" after a burst).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})
        return sys.stdin.readline()

    async def next_line() -> str:
        # The main thread runs Python every 50 ms while it waits: a signal the kernel handed to another
        # thread than the reader (a worker thread of the runs') is handled only when the main thread next
        # runs Python, which an idle loop never did (a "no profile from <pid>" now and then, Round 16).
        reading = asyncio.get_running_loop().run_in_executor(None, read_line)
        while not reading.done():
            await asyncio.wait({reading}, timeout=0.05)
        return reading.result()

    async with agent:
        await bursting(100)  # warm-up: connections, first-run imports
        print("ready", flush=True)
        while line := await next_line():
            print(json.dumps({"cpu_ms": await bursting(int(line))}), flush=True)


class Alone:
    def __init__(self, model_url: str, stats: Path) -> None:
        env = {**_model_env(model_url), "CPU_DIFF_STATS": str(stats), "PYTHONPATH": _pythonpath()}
        self.proc = Proc("alone", subprocess.Popen([sys.executable, __file__, "--alone-worker"], env=env,
                                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE))

    async def line(self) -> str:
        assert self.proc.popen.stdout is not None
        raw = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self.proc.popen.stdout.readline), 300)
        return raw.decode().strip()

    async def burst(self, messages: int) -> float:
        assert self.proc.popen.stdin is not None
        self.proc.popen.stdin.write(f"{messages}\n".encode())
        self.proc.popen.stdin.flush()
        return float(json.loads(await self.line())["cpu_ms"])


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(HOOK), os.environ.get("PYTHONPATH", "")) if p)


class Counts:
    """One side's cProfile figures summed over its bursts: per function, calls and own time."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, int, str], int] = defaultdict(int)
        self.own: dict[tuple[str, int, str], float] = defaultdict(float)
        self.inclusive: dict[tuple[str, int, str], float] = defaultdict(float)
        # Own CPU by library, with the builtins and standard library functions each calls directly.
        self.charged: dict[str, float] = defaultdict(float)
        self.gc = [[0, 0.0, 0.0] for _ in range(3)]  # per generation: passes, CPU ms, the longest pass's ms
        self.messages = 0

    def add(self, path: Path, messages: int) -> None:
        stats = pstats.Stats(str(path)).stats if path.stat().st_size else {}  # type: ignore[attr-defined]
        for func, (_cc, nc, tt, ct, callers) in stats.items():
            self.calls[func] += nc
            self.own[func] += tt
            self.inclusive[func] += ct
            if library(func[0]) != "the rest":
                self.charged[library(func[0])] += tt
            else:  # a builtin or the standard library's: charged to whoever called it
                for caller, (_, _, caller_tt, _) in callers.items():
                    self.charged[library(caller[0])] += caller_tt
        gc_file = path.with_suffix(".gc.json")
        if gc_file.exists():
            for g, (passes, ns, _collected, longest) in enumerate(json.loads(gc_file.read_text())["passes"]):
                self.gc[g][0] += passes
                self.gc[g][1] += ns / 1e6
                self.gc[g][2] = max(self.gc[g][2], longest / 1e6)
        self.messages += messages

    def per_message(self, func: tuple[str, int, str]) -> tuple[float, float]:
        return self.calls.get(func, 0) / self.messages, self.own.get(func, 0.0) * 1000 / self.messages

    def by_library(self) -> dict[str, tuple[float, float]]:
        out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for func, n in self.calls.items():
            lib = library(func[0])
            out[lib][0] += n / self.messages
            out[lib][1] += self.own[func] * 1000 / self.messages
        return {k: (v[0], v[1]) for k, v in out.items()}


async def profiled(pid: int, stats: Path, n: int, run: Any, mode: str = "profile") -> tuple[Any, Path]:
    """`run` with the process's hook on: cProfile and the collector's passes, or ("gc") the passes alone."""
    (stats / "mode").write_text(mode)
    os.kill(pid, signal.SIGUSR1)
    await asyncio.sleep(0.2)
    result = await run
    os.kill(pid, signal.SIGUSR2)
    path = stats / f"{pid}-{n}.pstats"
    for _ in range(300):
        if path.exists():  # put in place whole, after the .gc.json
            return result, path
        await asyncio.sleep(0.1)
    raise RuntimeError(f"no profile from {pid}")


def _short(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    for mark in ("site-packages/", str(ROOT) + "/", "lib/python3"):
        if mark in filename:
            filename = filename.split(mark, 1)[1]
            break
    return f"{name} ({filename}:{line})"


def gc_table(daemon: Counts, alone: Counts, which: str) -> None:
    print(f"\n| the collector in the {which}, per message | daemon passes, CPU ms (longest pass) "
          "| alone passes, CPU ms (longest pass) |\n| --- | --- | --- |")
    for g in range(3):
        d, a = daemon.gc[g], alone.gc[g]
        print(f"| generation {g} | {d[0] / daemon.messages:.3f}, {d[1] / daemon.messages:.3f} ({d[2]:.1f}) "
              f"| {a[0] / alone.messages:.3f}, {a[1] / alone.messages:.3f} ({a[2]:.1f}) |")
    print(f"| all | {sum(x[1] for x in daemon.gc) / daemon.messages:.3f} ms | "
          f"{sum(x[1] for x in alone.gc) / alone.messages:.3f} ms |")


def report(daemon: Counts, alone: Counts, top: int) -> None:
    print(f"\n| calls per message (cProfile; own ms, inflated by it) | daemon ({daemon.messages} msgs) "
          f"| alone ({alone.messages} runs) | daemon - alone |")
    print("| --- | --- | --- | --- |")
    d, a = daemon.by_library(), alone.by_library()
    for lib in sorted(set(d) | set(a), key=lambda k: -d.get(k, (0, 0))[0]):
        dc, dt = d.get(lib, (0.0, 0.0))
        ac, at = a.get(lib, (0.0, 0.0))
        print(f"| {lib} | {dc:,.0f} ({dt:.2f} ms) | {ac:,.0f} ({at:.2f} ms) | {dc - ac:+,.0f} ({dt - at:+.2f} ms) |")
    rest: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for side, counts in ((0, daemon), (2, alone)):
        for func, n in counts.calls.items():
            if library(func[0]) == "the rest":
                rest[where(func[0])][side] += n / counts.messages
                rest[where(func[0])][side + 1] += counts.own[func] * 1000 / counts.messages
    print("\n| of the rest | daemon calls (own ms) | alone calls (own ms) |\n| --- | --- | --- |")
    for name, (dc, dt, ac, at) in sorted(rest.items(), key=lambda kv: -(kv[1][1] - kv[1][3]))[:15]:
        print(f"| {name} | {dc:,.0f} ({dt:.2f}) | {ac:,.0f} ({at:.2f}) |")
    print("\n| own CPU per message (cProfile, the thread's CPU clock), with the builtins and standard library "
          "it calls | daemon ms | alone ms | daemon / alone |\n| --- | --- | --- | --- |")
    for lib in sorted(set(daemon.charged) | set(alone.charged), key=lambda k: -daemon.charged.get(k, 0.0)):
        dt, at = daemon.charged.get(lib, 0.0) * 1000 / daemon.messages, alone.charged.get(lib, 0.0) * 1000 / alone.messages
        print(f"| {lib} | {dt:.2f} | {at:.2f} | {dt / at if at else float('inf'):.2f} |")
    gc_table(daemon, alone, "profiled bursts")
    funcs = [f for f in set(daemon.calls) | set(alone.calls) if library(f[0]) in EXAMINED]
    diff = sorted(funcs, key=lambda f: -(daemon.per_message(f)[0] - alone.per_message(f)[0]))
    print(f"\n| function ({', '.join(EXAMINED)}), most more calls per message first | daemon calls (own ms) "
          "| alone calls (own ms) |")
    print("| --- | --- | --- |")
    for f in diff[:top]:
        (dc, dt), (ac, at) = daemon.per_message(f), alone.per_message(f)
        print(f"| {_short(f)} | {dc:.2f} ({dt:.3f}) | {ac:.2f} ({at:.3f}) |")
    print("\n| the same, most fewer calls per message first | daemon | alone |\n| --- | --- | --- |")
    for f in diff[::-1][:max(5, top // 3)]:
        (dc, dt), (ac, at) = daemon.per_message(f), alone.per_message(f)
        print(f"| {_short(f)} | {dc:.2f} ({dt:.3f}) | {ac:.2f} ({at:.3f}) |")
    by_time = sorted(funcs, key=lambda f: -(daemon.per_message(f)[1] - alone.per_message(f)[1]))
    print("\n| the same, most more own time per message first | daemon calls (own ms) | alone calls (own ms) |")
    print("| --- | --- | --- |")
    for f in by_time[:top]:
        (dc, dt), (ac, at) = daemon.per_message(f), alone.per_message(f)
        print(f"| {_short(f)} | {dc:.2f} ({dt:.3f}) | {ac:.2f} ({at:.3f}) |")


def functions_table(daemon: Counts, bare: Counts | None, top: int) -> None:
    """`OURS` by function: calls, own and inclusive ms per message (cProfile's, inflated), most own time
    first; the bare echo bot's beside them when it was profiled. Inclusive time of a coroutine counts
    each resumption's share only (cProfile's), so it reads as CPU, never as the wall time awaited."""
    def cell(counts: Counts | None, f: tuple[str, int, str]) -> str:
        if counts is None or not counts.messages:
            return ""
        n = counts.calls.get(f, 0) / counts.messages
        own = counts.own.get(f, 0.0) * 1000 / counts.messages
        inc = counts.inclusive.get(f, 0.0) * 1000 / counts.messages
        return f"{n:.2f} ({own:.3f} / {inc:.3f})" if n else "-"

    for lib in OURS:
        funcs = {f for side in (daemon, bare) if side is not None for f in side.calls if library(f[0]) == lib}
        order = sorted(funcs, key=lambda f: -max(daemon.own.get(f, 0.0) / daemon.messages,
                                                 bare.own.get(f, 0.0) / bare.messages if bare else 0.0))
        total = {side: sum(c.calls.get(f, 0) for f in funcs) / c.messages
                 for side, c in (("daemon", daemon), ("bare", bare)) if c is not None}
        print(f"\n| {lib}: function, most own time first ({len(funcs)} functions; calls per message: "
              + ", ".join(f"{k} {v:,.0f}" for k, v in total.items())
              + ") | daemon calls (own / inclusive ms) |" + (" bare echo bot |" if bare else ""))
        print("| --- | --- |" + (" --- |" if bare else ""))
        for f in order[:top]:
            print(f"| {_short(f)} | {cell(daemon, f)} |" + (f" {cell(bare, f)} |" if bare else ""))


async def spy_burst(pid: int, out: Path, run: Any) -> Any:
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--spy needs py-spy in the venv")
    spy = subprocess.Popen([py_spy, "record", "--nonblocking", "--gil", "--nolineno", "-r", "500", "-p", str(pid),
                            "-f", "raw", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(1.0)  # attached
    result = await run
    spy.send_signal(signal.SIGINT)
    spy.wait(30)
    return result


def spy_table(daemon: Path, d_messages: int, alone: Path, a_messages: int, top: int) -> None:
    """Inclusive samples per message by function (each function counted once per stack)."""
    def read(path: Path) -> tuple[dict[str, int], dict[str, int], int]:
        inclusive: dict[str, int] = defaultdict(int)
        libs: dict[str, int] = defaultdict(int)
        total = 0
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            frames = stack.split(";")
            if frames[-1].startswith(("EpollSelector.select (", "Condition.wait (", "_connection_worker_thread (",
                                      "select (selectors")):
                continue
            n = int(count)
            total += n
            for f in set(frames):
                inclusive[f] += n
            libs[next((library(f) for f in reversed(frames) if library(f) != "the rest"), "the rest")] += n
        return inclusive, libs, total

    di, dl, dt = read(daemon)
    ai, al, at = read(alone)
    print(f"\npy-spy: daemon {dt} samples / {d_messages} msgs ({dt / d_messages:.2f} per msg), alone {at} / "
          f"{a_messages} ({at / a_messages:.2f} per run)")
    print("| innermost library frame | daemon samples per msg | alone per run |\n| --- | --- | --- |")
    for lib in sorted(set(dl) | set(al), key=lambda k: -dl.get(k, 0)):
        print(f"| {lib} | {dl.get(lib, 0) / d_messages:.2f} | {al.get(lib, 0) / a_messages:.2f} |")
    funcs = [f for f in set(di) | set(ai) if library(f) in EXAMINED]
    order = sorted(funcs, key=lambda f: -(di.get(f, 0) / d_messages - ai.get(f, 0) / a_messages))
    print("| function (inclusive), most more samples per message first | daemon | alone |\n| --- | --- | --- |")
    for f in order[:top]:
        print(f"| {f} | {di.get(f, 0) / d_messages:.2f} | {ai.get(f, 0) / a_messages:.2f} |")


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="gw-cpu-diff-") as tmp:
        stats = Path(tmp) / "stats"
        stats.mkdir()
        os.environ["CPU_DIFF_STATS"] = str(stats)
        os.environ["PYTHONPATH"] = _pythonpath()  # the daemon's own path is put before it
        platform = NAMES[args.platform]("gateway")
        await platform.start()
        stop = asyncio.Event()
        bare_side = [cls("bare") for cls in NAMES.values()] if args.bare else []
        for p in bare_side:
            await p.start()
        poller = asyncio.create_task(poll([platform, *bare_side], stop))
        model, model_url, _ = await start_model_server()
        procs: list[Proc] = [model]
        try:
            daemon = await start_gateway(Path(args.gateway_src).resolve(), Path(tmp), model_url, [platform])
            procs.append(daemon)
            alone = Alone(model_url, stats)
            procs.append(alone.proc)
            if await alone.line() != "ready":
                raise RuntimeError("pydantic-ai alone did not start")
            await burst(platform, daemon, args.burst, args.budget)  # warm-up, as bench/platforms.py does
            await alone.burst(args.burst)
            counts = {"daemon": Counts(), "alone": Counts()}
            plain = {"daemon": Counts(), "alone": Counts()}  # the unprofiled bursts: the collector's passes
            cpu: dict[str, list[float]] = {"daemon": [], "alone": []}
            n = {"daemon": 0, "alone": 0}
            for r in range(args.rounds):
                for side in (("daemon", "alone") if r % 2 == 0 else ("alone", "daemon")):
                    # Unprofiled first (CPU per message), then the same burst under cProfile (calls).
                    if side == "daemon":
                        b, path = await profiled(daemon.pid, stats, n[side], burst(platform, daemon, args.burst,
                                                                                    args.budget), "gc")
                        cpu[side].append(b.cpu_ms)
                        plain[side].add(path, b.messages)
                        b, path = await profiled(daemon.pid, stats, n[side] + 1, burst(platform, daemon, args.burst,
                                                                                        args.budget),
                                                 "untimed" if args.untimed else "profile")
                        counts[side].add(path, b.messages)
                    else:
                        cpu_ms, path = await profiled(alone.proc.pid, stats, n[side], alone.burst(args.burst), "gc")
                        cpu[side].append(cpu_ms)
                        plain[side].add(path, args.burst)
                        _, path = await profiled(alone.proc.pid, stats, n[side] + 1, alone.burst(args.burst))
                        counts[side].add(path, args.burst)
                    n[side] += 2
                    print(f"  round {r + 1} {side}: {cpu[side][-1]:.2f} ms CPU per message (unprofiled)", flush=True)
            print(f"\nCPU per message, unprofiled bursts of {args.burst}: daemon ({platform.name}) "
                  f"{statistics.median(cpu['daemon']):.2f} ms, alone {statistics.median(cpu['alone']):.2f} ms "
                  f"({statistics.median(cpu['daemon']) / statistics.median(cpu['alone']):.2f}x); "
                  f"load average {os.getloadavg()[0]:.1f}")
            gc_table(plain["daemon"], plain["alone"], "unprofiled bursts")
            report(counts["daemon"], counts["alone"], args.top)
            bare_counts: Counts | None = None
            if args.bare:
                bare_proc = await start_bare({p.name: p for p in bare_side})
                procs.append(bare_proc)
                bare_platform = next(p for p in bare_side if type(p) is type(platform))
                await burst(bare_platform, bare_proc, args.burst, args.budget)  # warm-up, as the daemon's
                bare_counts = Counts()
                for i in range(args.rounds):
                    b, path = await profiled(bare_proc.pid, stats, i, burst(bare_platform, bare_proc, args.burst,
                                                                            args.budget))
                    bare_counts.add(path, b.messages)
                d, bb = counts["daemon"].by_library(), bare_counts.by_library()
                print(f"\n| calls per message (cProfile; own ms) | daemon | bare echo bot ({bare_counts.messages} msgs) "
                      "|\n| --- | --- | --- |")
                for lib in sorted(set(d) | set(bb), key=lambda k: -d.get(k, (0, 0))[0]):
                    (dc, dt), (bc, bt) = d.get(lib, (0.0, 0.0)), bb.get(lib, (0.0, 0.0))
                    print(f"| {lib} | {dc:,.0f} ({dt:.2f} ms) | {bc:,.0f} ({bt:.2f} ms) |")
            if args.functions:
                functions_table(counts["daemon"], bare_counts, args.top)
            if args.spy:
                d_out, a_out = Path(tmp) / "daemon.txt", Path(tmp) / "alone.txt"
                b = await spy_burst(daemon.pid, d_out, burst(platform, daemon, args.burst, args.budget))
                await spy_burst(alone.proc.pid, a_out, alone.burst(args.burst))
                spy_table(d_out, b.messages, a_out, args.burst, args.top)
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    for f in (d_out, a_out):
                        shutil.copy(f, Path(args.keep) / f.name)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                for f in stats.iterdir():
                    shutil.copy(f, Path(args.keep) / f.name)
        finally:
            stop.set()
            await poller
            for proc in reversed(procs):
                proc.stop()
            for p in (platform, *bare_side):
                await p.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--alone-worker"]:
        asyncio.run(alone_worker())
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=sorted(NAMES), default="slack")
    parser.add_argument("--gateway-src", default=str(ROOT), help="the checkout whose daemon runs (default: this one)")
    parser.add_argument("--burst", type=int, default=300, help="messages (runs) in a burst")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--top", type=int, default=30, help="functions listed")
    parser.add_argument("--spy", action="store_true", help="py-spy over one more burst per side")
    parser.add_argument("--functions", action="store_true",
                        help="the platform SDKs' and the gateway's functions, per message")
    parser.add_argument("--bare", action="store_true",
                        help="profile the bare echo bot too (bench/bare_bots.py): beside the daemon in --functions")
    parser.add_argument("--untimed", action="store_true",
                        help="no first draft and no typing renewal in the daemon's profiled bursts: an unprofiled "
                             "burst makes neither (bench/profile_hook says why)")
    parser.add_argument("--keep", metavar="DIR", help="keep the profiles (pstats, py-spy's raw stacks) here")
    sys.exit(asyncio.run(main(parser.parse_args())))
