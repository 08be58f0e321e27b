#!/usr/bin/env python3
"""Does the daemon's process make the same model run dearer? Its census, then its traits switched on in alone.

Round 8 and Round 16 found the daemon's pydantic-ai, OpenAI and httpx code making the same calls per
message as pydantic-ai alone's (within 1 %), and reading dearer for them under cProfile. Two kinds of
cause could do that without a call more: the run's shape (the agent and run arguments: measured in
one process by `bench/model_run.py`) and the process the run is in. This bench is about the second.

1. The census: the daemon (a platform's fake, as `bench/platforms.py` runs it) and pydantic-ai alone,
   each with a hook on its PYTHONPATH that on SIGWINCH writes what its process holds, read idle and in
   the middle of a burst: the collector's thresholds, frozen and tracked objects, a profile or trace
   function, warnings filters, the loop's tasks, ready handles and timers, the context's variables, the
   modules imported, threads.
2. The switches: pydantic-ai alone's burst (`bench/platforms.py`'s agent, 32 runs at once) in one process
   per variant, each variant one of the daemon's traits put into alone; the variants take bursts in
   turn, the order reversed every other round (A B B A), each child reporting its process CPU per run
   and its collector's passes (gc.callbacks). A trait that made the same run dearer shows here as a
   variant dearer than alone's, by more than the A/A (two plain alone processes) differ.
3. The guest (`--guest-rounds`): alone's agent and burst run inside the daemon's loop (the census hook starts it),
   idle and while the daemon answers a burst of its own, against the alone process: the same code in both.

    .venv/bin/python bench/run_env.py                        # census on Slack, then 6 rounds of 300
    .venv/bin/python bench/run_env.py --no-census --rounds 8 --burst 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import (  # noqa: E402
    CONCURRENT_RUNS,
    Mattermost,
    Proc,
    Slack,
    Telegram,
    _bench_agent,
    _model_env,
    burst,
    poll,
    run_to_answer,
    start_gateway,
    start_model_server,
)

NAMES = {"slack": Slack, "telegram": Telegram, "mattermost": Mattermost}

# Put on a process's PYTHONPATH as sitecustomize.py: SIGWINCH writes $RUN_ENV_CENSUS/<pid>-<n>.json.
# The handler runs on the main thread, between two bytecodes of whatever the loop is running.
CENSUS_HOOK = r'''
import gc, json, os, signal, sys, threading, time, warnings
_n = [0]
def _kinds(handles):
    out = {}
    for h in handles:
        cb = h._callback
        owner = getattr(cb, "__self__", None)
        key = ("cancelled " if h.cancelled() else "") + getattr(cb, "__qualname__", repr(cb)) + (
            " of " + type(owner).__qualname__ if owner is not None else "")
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:15])
_steps = {}
_GUEST = __import__("contextvars").ContextVar("run_env_guest", default="")
class _Timed(__import__("collections.abc").abc.Coroutine):
    """A task's coroutine whose every step's thread CPU is added to its kind's (the coroutine's name)."""
    __slots__ = ("_coro", "_row")
    def __init__(self, coro):
        self._coro = coro
        # A guest burst's tasks (below) apart from the daemon's own: the creator's context says which.
        self._row = _steps.setdefault(getattr(coro, "__qualname__", type(coro).__name__) + _GUEST.get(), [0, 0])
    def _step(self, how, *args):
        t0 = time.thread_time_ns()
        try:
            return how(*args)
        finally:
            self._row[0] += 1
            self._row[1] += time.thread_time_ns() - t0
    def send(self, value):
        return self._step(self._coro.send, value)
    def throw(self, *args):
        return self._step(self._coro.throw, *args)
    def close(self):
        return self._coro.close()
    def __await__(self):
        return self._coro.__await__()
    def __getattr__(self, name):
        return getattr(self._coro, name)
def _factory(loop, coro, **kwargs):
    import asyncio
    return asyncio.Task(_Timed(coro), loop=loop, **kwargs)
_guest = []
async def _guest_burst(messages, path):
    """pydantic-ai alone's burst run inside this process (the daemon's), for the same code in both processes."""
    import asyncio
    from bench.platforms import CONCURRENT_RUNS, _bench_agent, run_to_answer
    _GUEST.set(" (guest)")  # this task's context, copied into every task the burst starts
    if not _guest:
        _guest.append(_bench_agent())
        await _guest[0].__aenter__()
        for i in range(100):
            await run_to_answer(_guest[0], f"warm-up {i}")
    agent, left = _guest[0], list(range(messages))
    async def worker():
        while left:
            await run_to_answer(agent, f"guest {left.pop()}")
    run0 = sum(v[1] for k, v in _steps.items() if k.removesuffix(" (guest)") in _RUN_TASKS and k.endswith(")"))
    cpu0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(CONCURRENT_RUNS)))
    out = {"cpu_ms": (time.process_time() - cpu0) * 1000 / messages,
           "run_ms": (sum(v[1] for k, v in _steps.items() if k.removesuffix(" (guest)") in _RUN_TASKS
                          and k.endswith(")")) - run0) / 1e6 / messages}
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)
_RUN_TASKS = ("AgentRunEvents._ensure_started.<locals>.run_agent", "ScopedTask.__init__.<locals>.run",
              "TaskHandle._run_coro", "async_generator_athrow")
def _census(*_):
    import asyncio, contextvars
    loop = asyncio._get_running_loop()
    guest = os.path.join(os.environ["RUN_ENV_CENSUS"], f"guest-{os.getpid()}")
    if loop is not None and os.path.exists(guest):
        with open(guest) as f:
            messages = int(f.read())
        os.remove(guest)
        loop.create_task(_guest_burst(messages, guest + ".json"))
        return
    if loop is not None and _n[0] == 0 and os.environ.get("RUN_ENV_STEPS"):
        loop.set_task_factory(_factory)  # the first census starts the steps' count
    tasks = asyncio.all_tasks(loop) if loop is not None else set()
    named = {}
    for t in tasks:
        coro = t.get_coro()
        key = getattr(coro, "__qualname__", type(coro).__name__)
        named[key] = named.get(key, 0) + 1
    out = {
        "threshold": gc.get_threshold(), "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
        "tracked": [len(gc.get_objects(g)) for g in range(3)], "counts": gc.get_count(),
        "profile": repr(sys.getprofile()), "trace": repr(sys.gettrace()),
        "threading_profile": repr(getattr(threading, "_profile_hook", None)),
        "tracemalloc": __import__("tracemalloc").is_tracing(), "flags": repr(sys.flags),
        "coroutine_origin": sys.get_coroutine_origin_tracking_depth(),
        "asyncgen_hooks": repr(sys.get_asyncgen_hooks().firstiter),
        "warnings_filters": len(warnings.filters), "switch_interval": sys.getswitchinterval(),
        "asyncio_debug": loop.get_debug() if loop is not None else None,
        "task_factory": repr(loop.get_task_factory()) if loop is not None else None,
        "tasks": len(tasks), "task_kinds": dict(sorted(named.items(), key=lambda kv: -kv[1])[:25]),
        "ready": len(getattr(loop, "_ready", ())), "timers": len(getattr(loop, "_scheduled", ())),
        "timer_kinds": _kinds(getattr(loop, "_scheduled", ())),
        "context_vars": len(contextvars.copy_context()), "modules": sorted(sys.modules),
        "threads": [t.name for t in threading.enumerate()],
        "steps": {k: v for k, v in _steps.items()},
        "maxrss_kib": __import__("resource").getrusage(__import__("resource").RUSAGE_SELF).ru_maxrss,
    }
    path = os.path.join(os.environ["RUN_ENV_CENSUS"], f"{os.getpid()}-{_n[0]}.json")
    _n[0] += 1
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)
if os.environ.get("RUN_ENV_CENSUS"):
    signal.signal(signal.SIGWINCH, _census)
'''

# The tasks pydantic-ai starts for a run (its graph's driver, the model request's stream): the same code in both
# (the census hook's own copy is `_RUN_TASKS`).
RUN_TASKS = ("AgentRunEvents._ensure_started.<locals>.run_agent", "ScopedTask.__init__.<locals>.run",
             "TaskHandle._run_coro", "async_generator_athrow")

VARIANTS = {
    "alone": "pydantic-ai alone as bench/platforms.py runs it (CPython's collector defaults, nothing frozen)",
    "alone again": "the same, a second process: the A/A",
    "gc": "the daemon's collector: start-up objects frozen, young threshold 10,000 (gateway.daemon)",
    "gc + heap": "as gc, and the daemon's modules imported first (its heap, frozen as the daemon's is)",
    "gc + heap + loop": "as gc + heap, and as many more tasks and timers waiting on the loop as the daemon's mid-burst",
    "gc again": "as gc, a second process: the A/A of the neighbour's row",
    "gc + neighbour": "as gc, and other work between the run's steps (8 steps a run: JSON, an SQLite commit, a regex, a dataclass)",
    "gc + wide neighbour": "as gc + neighbour, each step also through SQLAlchemy's compiler, yarl and slack_sdk",
    "gc + twice the runs": "as gc, 64 runs at once (as many as the busy daemon's guest burst and its own)",
    "gc + threads": "as gc, and the daemon's threads' part: 3 SQLite commits a run in a thread of their own, a 25 ms beat",
}
DEFAULT_VARIANTS = "alone,alone again,gc,gc + heap,gc + heap + loop"


def churn(db: Any, i: int) -> None:
    """Work of the daemon's kinds, none of it the model run's: a frame parsed, a row written, text matched."""
    import dataclasses
    import re

    @dataclasses.dataclass
    class Frame:
        kind: str
        text: str
        user: str

    raw = json.dumps({"envelope_id": f"e{i}", "payload": {"event": {"type": "app_mention", "text": f"<@U1> hi {i}",
                                                                      "user": "U2", "ts": f"{i}.000"}}})
    event = json.loads(raw)["payload"]["event"]
    frame = Frame(event["type"], re.sub(r"<@\w+>\s*", "", event["text"]), event["user"])
    db.execute("INSERT INTO m VALUES (?, ?)", (i, json.dumps(dataclasses.asdict(frame))))
    db.commit()


def wide_churn(db: Any, i: int) -> None:
    """`churn` and code of the daemon's libraries besides: an SQL statement compiled (SQLAlchemy Core), a URL built
    (yarl, as aiohttp does), a Socket Mode request parsed (slack_sdk): a code footprint far wider than the run's."""
    import sqlalchemy as sa
    from slack_sdk.socket_mode.request import SocketModeRequest
    from yarl import URL

    churn(db, i)
    t = sa.table("messages", sa.column("id"), sa.column("run_id"), sa.column("text"))
    str(sa.select(t.c.id, t.c.text).where(t.c.run_id == i).order_by(t.c.id).compile())
    URL("http://127.0.0.1:1/api/chat.postMessage").with_query({"channel": f"C{i}", "ts": f"{i}.0"})
    SocketModeRequest.from_dict({"type": "events_api", "envelope_id": f"e{i}",
                                 "payload": {"event": {"type": "app_mention", "text": "hi"}}})


async def census(pid: int, directory: Path, n: int) -> dict[str, Any]:
    os.kill(pid, signal.SIGWINCH)
    path = directory / f"{pid}-{n}.json"
    for _ in range(200):
        if path.exists():
            return json.loads(path.read_text())
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no census from {pid}")


def print_census(rows: dict[str, dict[str, Any]]) -> None:
    keys = ("threshold", "enabled", "frozen", "tracked", "profile", "trace", "tracemalloc", "flags", "coroutine_origin",
            "asyncgen_hooks", "warnings_filters", "switch_interval",
            "asyncio_debug", "task_factory", "tasks", "ready", "timers", "context_vars", "threads", "maxrss_kib")
    print("| | " + " | ".join(rows) + " |\n|" + " --- |" * (len(rows) + 1))
    for k in keys:
        print(f"| {k} | " + " | ".join(str(r[k]) if k != "threads" else str(len(r[k])) for r in rows.values()) + " |")
    print("| modules | " + " | ".join(str(len(r["modules"])) for r in rows.values()) + " |")
    for name, r in rows.items():
        print(f"  {name}: tasks by coroutine {r['task_kinds']}")
        print(f"  {name}: timers by callback {r['timer_kinds']}")


def print_steps(daemon: dict[str, list[int]], d_messages: int, alone: dict[str, list[int]], a_messages: int) -> None:
    """The tasks' own CPU by kind (each step of a task timed on the thread's clock, no profiler), per message."""
    print(f"\n| tasks' own CPU by coroutine, unprofiled, per message | daemon ({d_messages}): steps, ms | "
          f"alone ({a_messages}): steps, ms |\n| --- | --- | --- |")
    for kind in sorted(set(daemon) | set(alone), key=lambda k: -(daemon.get(k, [0, 0])[1] + alone.get(k, [0, 0])[1])):
        d, a = daemon.get(kind, [0, 0]), alone.get(kind, [0, 0])
        if d[1] / d_messages < 0.005 * 1e6 and a[1] / a_messages < 0.005 * 1e6:
            continue
        print(f"| {kind} | {d[0] / d_messages:.1f}, {d[1] / 1e6 / d_messages:.3f} | "
              f"{a[0] / a_messages:.1f}, {a[1] / 1e6 / a_messages:.3f} |")
    print(f"| all tasks' steps | {sum(v[1] for v in daemon.values()) / 1e6 / d_messages:.3f} | "
          f"{sum(v[1] for v in alone.values()) / 1e6 / a_messages:.3f} |")


# =========================================================================================
# The child: pydantic-ai alone with one of the daemon's traits.


async def child(variant: str, modules_file: str | None, idle_tasks: int, context_vars: int, timers: int) -> None:
    import contextvars
    import gc
    import importlib

    held: list[Any] = []
    if "heap" in variant and modules_file:
        # The daemon's modules (its heap: code objects, classes, the SDKs' tables), imported as it did.
        for name in json.loads(Path(modules_file).read_text()):
            if name.startswith(("__main__", "sitecustomize", "bench")):
                continue
            try:
                held.append(importlib.import_module(name))
            except BaseException:  # noqa: BLE001 - a module the daemon imported lazily, by a path we lack
                pass
    agent = _bench_agent()
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE m (id INTEGER, body TEXT)")
    passes = [0, 0, 0]
    gc_ns = [0]
    began = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.thread_time_ns()
        else:
            passes[info["generation"]] += 1
            gc_ns[0] += time.thread_time_ns() - began[0]

    gc.callbacks.append(on_gc)
    stop = asyncio.Event()
    if "loop" in variant:
        # Idle tasks as the daemon's (pollers, queues' workers waiting) and a context of its size.
        for i in range(context_vars):
            contextvars.ContextVar(f"v{i}").set(i)
        held.extend(asyncio.create_task(stop.wait()) for _ in range(idle_tasks))
        # The daemon's timers in a burst: aiohttp's and asyncio.timeout's, the runs' limits, typing's sleeps; a
        # third of them cancelled (asyncio leaves a cancelled timer in the heap until they are half of it).
        handles = [asyncio.get_running_loop().call_later(3600 + i, lambda: None) for i in range(timers)]
        for h in handles[::3]:
            h.cancel()
        held.extend(handles)

    async def bursting(messages: int) -> dict[str, float]:
        queue = list(range(messages))

        async def neighbour(i: int) -> None:
            for k in range(8):
                (wide_churn if "wide" in variant else churn)(db, i * 8 + k)
                await asyncio.sleep(0)

        async def in_thread(i: int) -> None:
            # As the daemon's store does through aiosqlite's thread: three transactions a message, each a
            # hand-off of the GIL and a wake-up of the loop (its self-pipe) when the thread's call is done.
            for k in range(3):
                await loop.run_in_executor(store_thread, churn, thread_db[0], i * 3 + k)

        async def worker() -> None:
            while queue:
                i = queue.pop()
                if "neighbour" in variant:
                    held.append(asyncio.create_task(neighbour(i)))
                if "threads" in variant:
                    held.append(asyncio.create_task(in_thread(i)))
                await run_to_answer(agent, f"burst {i}")

        steps0 = sum(hook["_steps"].get(k, [0, 0])[1] for k in RUN_TASKS)
        before, ns0 = list(passes), gc_ns[0]
        cpu0, th0 = time.process_time(), time.thread_time()
        await asyncio.gather(*(worker() for _ in range(CONCURRENT_RUNS * (2 if "twice" in variant else 1))))
        return {"cpu_ms": (time.process_time() - cpu0) * 1000 / messages,
                "run_ms": (sum(hook["_steps"].get(k, [0, 0])[1] for k in RUN_TASKS) - steps0) / 1e6 / messages,
                "loop_ms": (time.thread_time() - th0) * 1000 / messages,
                "gc_ms": (gc_ns[0] - ns0) / 1e6 / messages,
                "passes": [(a - b) / messages for a, b in zip(passes, before)]}

    loop = asyncio.get_running_loop()
    import concurrent.futures
    import threading

    store_thread = concurrent.futures.ThreadPoolExecutor(1)
    thread_db: list[Any] = []

    def open_db() -> None:
        thread_db.append(sqlite3.connect(":memory:"))
        thread_db[0].execute("CREATE TABLE m (id INTEGER, body TEXT)")

    store_thread.submit(open_db).result()
    if "threads" in variant:
        def beat() -> None:  # the loop watchdog's thread: Python every 25 ms (gateway/ops/loop_watchdog.py)
            while not stopped.wait(0.025):
                pass

        stopped = threading.Event()
        threading.Thread(target=beat, daemon=True).start()

    def read_line() -> str:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})  # the census's signal is the loop thread's
        return sys.stdin.readline()

    async def next_line() -> str:
        # Python every 50 ms while waiting: an idle loop with no wakeup fd never ran the census's handler
        # ("no census from <pid>"; bench/cpu_diff.py's alone worker does the same).
        reading = loop.run_in_executor(None, read_line)
        while not reading.done():
            await asyncio.wait({reading}, timeout=0.05)
        return reading.result()

    hook: dict[str, Any] = {}
    exec(CENSUS_HOOK, hook)  # the census's step timing, the same code  # noqa: S102
    loop.set_task_factory(hook["_factory"])
    async with agent:
        await bursting(100)  # warm-up: connections, first-run imports
        if variant.startswith("gc"):
            gc.collect()
            gc.freeze()  # as gateway.daemon.freeze_startup_objects, once started
            gc.set_threshold(10_000, *gc.get_threshold()[1:])
        # The census's first signal counts from here on (in a census the hook's handler is this one's: `exec` above).
        hook["_steps"].clear()
        print("ready", flush=True)
        while line := await next_line():
            print(json.dumps(await bursting(int(line))), flush=True)
    stop.set()


class Child:
    def __init__(self, variant: str, model_url: str, modules: Path | None, tasks: int, ctx: int, timers: int) -> None:
        args = [sys.executable, __file__, "--child", variant, "--tasks", str(tasks), "--ctx", str(ctx),
                "--timers", str(timers)]
        if modules is not None:
            args += ["--modules", str(modules)]
        env = {**_model_env(model_url), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = Proc(variant, subprocess.Popen(args, env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE))

    async def line(self) -> str:
        assert self.proc.popen.stdout is not None
        raw = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, self.proc.popen.stdout.readline),
                                     600)
        return raw.decode().strip()

    async def burst(self, messages: int) -> dict[str, Any]:
        assert self.proc.popen.stdin is not None
        self.proc.popen.stdin.write(f"{messages}\n".encode())
        self.proc.popen.stdin.flush()
        return json.loads(await self.line())


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="gw-run-env-") as tmp:
        directory = Path(tmp) / "census"
        directory.mkdir()
        hook = Path(tmp) / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(CENSUS_HOOK)
        model, model_url, _ = await start_model_server()
        procs: list[Proc] = [model]
        modules_file: Path | None = None
        tasks, ctx, timers = args.tasks, args.ctx, args.timers
        try:
            if args.census:
                os.environ["RUN_ENV_CENSUS"] = str(directory)
                os.environ["RUN_ENV_STEPS"] = "1"
                os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", ""))
                                                           if p)
                platform = NAMES[args.platform]("gateway")
                await platform.start()
                stop = asyncio.Event()
                poller = asyncio.create_task(poll([platform], stop))
                try:
                    daemon = await start_gateway(ROOT, Path(tmp), model_url, [platform])
                    procs.append(daemon)
                    alone = Child(args.census_alone, model_url, None, 0, 0, 0)
                    procs.append(alone.proc)
                    assert await alone.line() == "ready"
                    await burst(platform, daemon, args.burst, 120.0)  # warm-up
                    rows = {"daemon idle": await census(daemon.pid, directory, 0)}
                    during = asyncio.create_task(burst(platform, daemon, args.burst, 120.0))
                    await asyncio.sleep(args.mid)
                    rows["daemon mid-burst"] = await census(daemon.pid, directory, 1)
                    d_burst = await during
                    d_steps = (await census(daemon.pid, directory, 2))["steps"]
                    rows["alone idle"] = await census(alone.proc.pid, directory, 0)
                    during_alone = asyncio.create_task(alone.burst(args.burst))
                    await asyncio.sleep(args.mid / 2)
                    rows["alone mid-burst"] = await census(alone.proc.pid, directory, 1)
                    await during_alone
                    a_steps = (await census(alone.proc.pid, directory, 2))["steps"]
                    print_census(rows)
                    print_steps(d_steps, d_burst.messages, a_steps, args.burst)
                    # More bursts in turn (the order alternating): the model run's own tasks, per round.
                    n = {"daemon": 3, "alone": 3}
                    seen = {"daemon": d_steps, "alone": a_steps}
                    mine: dict[str, list[float]] = {"daemon": [], "alone": []}
                    for r in range(args.step_rounds):
                        for side in (("daemon", "alone") if r % 2 == 0 else ("alone", "daemon")):
                            pid = daemon.pid if side == "daemon" else alone.proc.pid
                            if side == "daemon":
                                messages = (await burst(platform, daemon, args.burst, 120.0)).messages
                            else:
                                await alone.burst(args.burst)
                                messages = args.burst
                            now = (await census(pid, directory, n[side]))["steps"]
                            n[side] += 1
                            mine[side].append(sum(now.get(k, [0, 0])[1] - seen[side].get(k, [0, 0])[1]
                                                  for k in RUN_TASKS) / 1e6 / messages)
                            seen[side] = now
                    # pydantic-ai alone's own burst run inside the idle daemon, against the alone process's.
                    # "busy": the same, while the daemon answers a burst of its platform's at the same time.
                    sides = ("in the daemon", "alone", "in the busy daemon")
                    guest: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
                    for r in range(args.guest_rounds):
                        for side in (sides if r % 2 == 0 else sides[::-1]):
                            if side == "alone":
                                guest[side].append(await alone.burst(args.burst))
                                continue
                            busy = (asyncio.create_task(burst(platform, daemon, args.burst, 120.0))
                                    if side == "in the busy daemon" else None)
                            flag = directory / f"guest-{daemon.pid}"
                            flag.write_text(str(args.burst))
                            os.kill(daemon.pid, signal.SIGWINCH)
                            done = directory / f"guest-{daemon.pid}.json"
                            for _ in range(6000):
                                if done.exists():
                                    break
                                await asyncio.sleep(0.05)
                            guest[side].append(json.loads(done.read_text()))
                            done.unlink()
                            if busy is not None:
                                await busy
                    if args.guest_rounds:
                        for key in ("cpu_ms", "run_ms"):
                            for side in ("in the daemon", "in the busy daemon"):
                                ratios = [d[key] / a[key] for d, a in zip(guest[side], guest["alone"])]
                                print(f"  alone's burst {side} / in alone's process, {key}: "
                                      f"{', '.join(f'{d[key]:.2f}' for d in guest[side])} / "
                                      f"{', '.join(f'{a[key]:.2f}' for a in guest['alone'])}: median "
                                      f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
                    if args.step_rounds:
                        ratios = [d / a for d, a in zip(mine["daemon"], mine["alone"])]
                        print(f"\n  pydantic-ai's run tasks ({', '.join(RUN_TASKS)}), own CPU ms a message, "
                              f"{args.step_rounds} rounds: daemon {', '.join(f'{x:.2f}' for x in mine['daemon'])}; "
                              f"alone {', '.join(f'{x:.2f}' for x in mine['alone'])}; daemon / alone median "
                              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
                    idle = rows["daemon idle"]
                    extra = sorted(set(idle["modules"]) - set(rows["alone idle"]["modules"]))
                    print(f"  modules the daemon holds that alone does not: {len(extra)}")
                    modules_file = Path(tmp) / "modules.json"
                    modules_file.write_text(json.dumps(extra))
                    mid, alone_mid = rows["daemon mid-burst"], rows["alone mid-burst"]
                    tasks = max(0, mid["tasks"] - alone_mid["tasks"])
                    timers = max(0, mid["timers"] - alone_mid["timers"])
                    ctx = max(0, idle["context_vars"] - rows["alone idle"]["context_vars"])
                finally:
                    stop.set()
                    await poller
                    for proc in procs[1:]:
                        proc.stop()
                    del procs[1:]
                    await platform.stop()
                    os.environ.pop("RUN_ENV_CENSUS")
                    os.environ.pop("RUN_ENV_STEPS")
            if not args.rounds:
                return 0
            chosen = args.variants.split(",")
            children = {v: Child(v, model_url, modules_file, tasks, ctx, timers) for v in chosen}
            procs.extend(c.proc for c in children.values())
            for c in children.values():
                assert await c.line() == "ready", "a child did not start"
            results: dict[str, list[dict[str, Any]]] = {v: [] for v in chosen}
            order = list(children.items())
            for r in range(args.rounds):
                for v, c in (order if r % 2 == 0 else order[::-1]):
                    results[v].append(await c.burst(args.burst))
                print(f"  round {r + 1}: " + ", ".join(f"{v} {results[v][-1]['cpu_ms']:.2f} (run {results[v][-1]['run_ms']:.2f})" for v in chosen),
                      flush=True)
            base = results[chosen[0]]
            print(f"\n| alone's burst of {args.burst} at {CONCURRENT_RUNS}, {args.rounds} rounds A B B A | process CPU "
                  "ms a run, median (min-max) | of alone, median of the rounds' ratios (min-max) | collector ms a "
                  "run | passes a run young / middle / full | pydantic-ai's run tasks' own ms a run, median (min-max); "
                  "of the first row's |\n| --- | --- | --- | --- | --- | --- |")
            for v, rows_ in results.items():
                cpu = [x["cpu_ms"] for x in rows_]
                ratio = [x["cpu_ms"] / b["cpu_ms"] for x, b in zip(rows_, base)]
                passes = [statistics.median(x["passes"][g] for x in rows_) for g in range(3)]
                run = [x["run_ms"] for x in rows_]
                print(f"| {v} ({VARIANTS[v]}) | {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
                      f"{statistics.median(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}) | "
                      f"{statistics.median(x['gc_ms'] for x in rows_):.3f} | "
                      + " / ".join(f"{p:.3f}" for p in passes) + f" | {statistics.median(run):.2f} ({min(run):.2f}-"
                      f"{max(run):.2f}); {statistics.median(r / b['run_ms'] for r, b in zip(run, base)):.3f} |")
            print(f"  {tasks} tasks, {timers} timers, {ctx} context variables put in 'loop'; load average "
                  "%.1f %.1f %.1f" % os.getloadavg())
        finally:
            for proc in reversed(procs):
                proc.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=sorted(NAMES), default="slack")
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mid", type=float, default=1.0, help="seconds into the burst the mid-burst census is taken")
    parser.add_argument("--step-rounds", type=int, default=4, help="bursts a side after the census, steps timed")
    parser.add_argument("--guest-rounds", type=int, default=4,
                        help="bursts a side of alone's agent run inside the idle daemon and in alone's process")
    parser.add_argument("--census-alone", choices=("alone", "gc"), default="alone",
                        help="the census's alone: as bench/platforms.py runs it, or with the daemon's collector")
    parser.add_argument("--no-census", dest="census", action="store_false")
    parser.add_argument("--tasks", type=int, default=0, help="idle tasks for 'loop' without a census")
    parser.add_argument("--ctx", type=int, default=0, help="context variables for 'loop' without a census")
    parser.add_argument("--timers", type=int, default=0, help="timers for 'loop' without a census")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--modules", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.child:
        asyncio.run(child(a.child, a.modules, a.tasks, a.ctx, a.timers))
        sys.exit(0)
    sys.exit(asyncio.run(main(a)))
