#!/usr/bin/env python3
"""One message's path through the daemon, step by step: wall time and the loop thread's CPU per step.

`bench/platforms.py` times a message from the outside (the fakes' and the model server's clocks); this says
where inside the daemon the time between goes. Each daemon runs as its own process, as in platforms.py, with
`bench/path_trace/sitecustomize.py` on its PYTHONPATH: the path's functions (the inbound step, the store's
ingest, the first sign, the run's start and preparation, pydantic-ai's model request and its bytes written,
the answer written, its post, the run's end) leave marks on CLOCK_MONOTONIC and the loop thread's CPU clock.
Marks and the outside times (the event handed to the daemon, the model server's arrival and answer, the
fake's receipt of the final) are joined per message; each step is the time between two marks, p50 over the
messages. With `--other`, a second checkout's daemon on fakes of its own, messages alternating between the
two (A B, then B A), so both sides see the same minutes of the machine; pydantic-ai alone's run -> request
is measured in the same rounds, one run beside each pair of messages.

    .venv/bin/python bench/path_steps.py                                  # this checkout, 60 messages a platform
    .venv/bin/python bench/path_steps.py --gateway-src /work/main --other . --messages 80
    .venv/bin/python bench/path_steps.py --other-env NAME=1        # this checkout twice, B with a switch set
    .venv/bin/python bench/path_steps.py --handles --platforms slack   # the loop's handles by task, before the request
    .venv/bin/python bench/path_steps.py --profile /tmp/steps          # cProfile of submit -> run_agent, answer -> post

Printed per platform: each step's p50 wall / p50 loop-thread CPU (ms), A beside B, then the totals
(event -> the model server had the request; the loop's CPU from `submit` to the request's bytes; the model's
answer -> the fake had the final). Nothing is judged: the marks cost ~1 µs each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pstats
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import (  # noqa: E402
    CONVERSATION_LENGTH,
    AloneRounds,
    Mattermost,
    Platform,
    Proc,
    Record,
    Slack,
    Telegram,
    one_message,
    poll,
    start_gateway,
    start_model_server,
)

HOOK = ROOT / "bench" / "path_trace"
# The path in its order; "@..." are the outside times. Each point is its first mark at or after the previous
# point found, so a mark made elsewhere too (httpcore's write: a Telegram call's as well) is read where it
# falls on the path.
POINTS = ("@event", "submit", "identify", "identify>", "reserve", "ingest", "ingest>", "sign", "sign>",
          "scheduler.start", "submit>", "execute", "prepare>", "drive", "build_agent", "build_agent>", "run_agent",
          "request_stream", "model write", "@model", "@answered", "answer written", "show_answer", "post",
          "@final", "post>", "show_answer>", "run_agent>", "finish", "finish>", "end_run", "end_run>", "drive>")


def timeline(record: Record, marks: list[tuple[str, int, int]], upto: float) -> list[tuple[str, float, float | None]]:
    """The message's points: (name, monotonic s, loop CPU s or None for an outside time)."""
    outside = {"@event": record.event, "@model": record.model, "@answered": record.answered, "@final": record.final}
    mine = [(n, t / 1e9, c / 1e9) for n, t, c in marks if record.event <= t / 1e9 <= upto]
    points: list[tuple[str, float, float | None]] = []
    at = record.event
    for name in POINTS:
        if name.startswith("@"):
            t = outside[name]
            if t is not None:
                points.append((name, t, None))
                at = max(at, t) if name != "@final" else at  # the post's own end may come after the fake's receipt
            continue
        found = next(((n, t, c) for n, t, c in mine if n == name and t >= at), None)
        if found is not None:
            points.append(found)
            at = found[1]
    return points


def steps(records: list[Record], marks: list[tuple[str, int, int]]) -> dict[tuple[str, str], list[tuple[float, float | None]]]:
    """(from, to) -> [(wall ms, loop CPU ms or None)] over the messages."""
    out: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    ordered = sorted(records, key=lambda r: r.event)
    for k, r in enumerate(ordered):
        if r.final is None:
            continue
        upto = ordered[k + 1].event if k + 1 < len(ordered) else r.final + 1.0
        points = timeline(r, marks, upto)
        cpu_from: tuple[str, float] | None = None  # the last loop mark: the CPU of a step reads from it
        for (a, ta, ca), (b, tb, cb) in zip(points, points[1:]):
            cpu = None
            if cb is not None and cpu_from is not None and cpu_from[0] == a:
                cpu = (cb - cpu_from[1]) * 1000
            out.setdefault((a, b), []).append(((tb - ta) * 1000, cpu))
            if cb is not None:
                cpu_from = (b, cb)
        out.setdefault(("@event", "@model"), []).append(((r.model - r.event) * 1000 if r.model else float("nan"), None))
        by_name = {n: (t, c) for n, t, c in points}
        if "submit" in by_name and "model write" in by_name:
            out.setdefault(("submit", "model write [loop CPU]"), []).append(
                ((by_name["model write"][0] - by_name["submit"][0]) * 1000,
                 (by_name["model write"][1] - by_name["submit"][1]) * 1000))  # type: ignore[operator]
        if r.answered is not None:
            out.setdefault(("@answered", "@final"), []).append(((r.final - r.answered) * 1000, None))
    return out


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def cell(samples: list[tuple[float, float | None]] | None) -> str:
    if not samples:
        return ""
    wall = p50([w for w, _ in samples])
    cpus = [c for _, c in samples if c is not None]
    return f"{wall:.2f}" + (f" / {p50(cpus):.2f}" if cpus else "") + f" ({len(samples)})"


async def dump_marks(proc: Proc, path: Path) -> list[tuple[str, int, int]]:
    path.unlink(missing_ok=True)
    os.kill(proc.pid, signal.SIGUSR2)
    for _ in range(200):
        await asyncio.sleep(0.05)
        if path.exists():
            try:
                return [tuple(m) for m in json.loads(path.read_text())]  # type: ignore[misc]
            except json.JSONDecodeError:
                continue  # still being written
    raise RuntimeError(f"no marks from pid {proc.pid}")


async def main(args: argparse.Namespace) -> None:
    if args.handles and "telegram" in args.platforms:
        # With Handle._run wrapped, the Telegram adapter's getMe failed in the daemon ("'NoneType' object has no
        # attribute 'getall'", retried for good): not understood yet, so refused rather than left to hang.
        raise SystemExit("--handles: not with Telegram (its getMe fails in the daemon so traced); name --platforms")
    other = args.other or (args.gateway_src if args.other_env else None)
    sources = [Path(args.gateway_src).resolve()] + ([Path(other).resolve()] if other else [])
    extra = dict(kv.split("=", 1) for kv in args.other_env)
    names = [cls for cls in (Slack, Telegram, Mattermost) if cls.name.lower() in args.platforms]
    sides: list[list[Platform]] = [[cls("gateway") for cls in names] for _ in sources]
    for side in sides:
        for p in side:
            await p.start()
    stop = asyncio.Event()
    poller = asyncio.create_task(poll([p for side in sides for p in side], stop))
    model, model_url, model_times = await start_model_server()
    procs: list[Proc] = [model]
    try:
        with tempfile.TemporaryDirectory(prefix="gw-path-steps-") as tmp:
            daemons = []
            pythonpath = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK), pythonpath) if p)  # after the daemon's src
            if args.profile:
                os.environ["PATH_PROFILE"] = "1"
            if args.handles:
                os.environ["PATH_HANDLES"] = "1"
            for k, (src, side) in enumerate(zip(sources, sides)):
                os.environ["PATH_TRACE"] = str(Path(tmp) / f"marks-{k}.json")
                for name, value in extra.items():  # B's own switches
                    if k:
                        os.environ[name] = value
                    else:
                        os.environ.pop(name, None)
                directory = Path(tmp) / f"daemon-{k}"
                directory.mkdir()
                daemons.append(await start_gateway(src, directory, model_url, side))
                procs.append(daemons[-1])
            del os.environ["PATH_TRACE"]
            for name in extra:
                os.environ.pop(name, None)
            os.environ.pop("PATH_PROFILE", None)
            os.environ.pop("PATH_HANDLES", None)
            if pythonpath is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = pythonpath
            alone = await AloneRounds.start(model_url)
            procs.append(alone.proc)
            print("; ".join(f"{'AB'[k]}: {src} (pid {d.pid})" for k, (src, d) in enumerate(zip(sources, daemons))))
            print("load average at the start: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
            records: list[list[list[Record]]] = [[[] for _ in names] for _ in sources]
            keys: dict[int, Any] = {}
            for side in sides:
                for p in side:
                    for _ in range(3):  # warm-up: a fresh daemon's first messages import and compile
                        keys[id(p)], _r = await one_message(p, None, "warm-up", new=True)
            for i in range(args.messages):
                new = i % CONVERSATION_LENGTH == 0
                for j in range(len(names)):
                    await alone.run(i % CONVERSATION_LENGTH)
                    order = range(len(sources)) if i % 2 == 0 else reversed(range(len(sources)))
                    for k in order:
                        p = sides[k][j]
                        await asyncio.sleep(args.pause)
                        keys[id(p)], record = await one_message(p, None if new else keys[id(p)], f"message {i}", new=new)
                        records[k][j].append(record)
                    await asyncio.sleep(args.pause)
            all_records = [r for by_side in records for by_platform in by_side for r in by_platform]
            model_times.attribute(all_records)
            model_times.attribute_alone(alone)
            marks = [await dump_marks(d, Path(tmp) / f"marks-{k}.json") for k, d in enumerate(daemons)]
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                for f in Path(tmp).glob("marks-*.json"):
                    shutil.copy(f, Path(args.keep) / f.name)
            handles = [json.loads((Path(tmp) / f"marks-{k}.json.handles.json").read_text())
                       for k in range(len(daemons))] if args.handles else []
            if args.profile:
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                for f in Path(tmp).glob("marks-*.pstats"):
                    shutil.copy(f, Path(args.profile) / f.name)
    finally:
        stop.set()
        await poller
        for proc in reversed(procs):
            proc.stop()
        for side in sides:
            for p in side:
                await p.stop()
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print(f"pydantic-ai alone, run -> the model server had the request, p50: {p50(alone.to_model):.2f} ms "
          f"({len(alone.to_model)} runs)\n")
    if handles:
        n = args.messages * len(names)
        keys = sorted({key for h in handles for key in h}, key=lambda key: -max(h.get(key, [0, 0])[1] for h in handles))
        print("### the loop's handles, by what they ran: per message, calls / CPU ms (all platforms; warm-ups in "
              "the sums)")
        print("| handle | " + " | ".join("AB"[k] for k in range(len(handles))) + " |")
        print("| --- |" + " --- |" * len(handles))
        for key in keys[:args.top]:
            print(f"| {key} | " + " | ".join(f"{h[key][0] / n:.2f} / {h[key][1] / 1e6 / n:.3f}" if key in h else ""
                                             for h in handles) + " |")
        print()
    if args.profile:
        for f in sorted(Path(args.profile).glob("marks-*.pstats")):
            print(f"### {f.name}: the top by own time, per message (cProfile's, inflated)")
            stats = pstats.Stats(str(f))
            rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:args.top]  # type: ignore[attr-defined]
            n = args.messages * len(names)
            for (file, line, func), (_cc, calls, own, cum, _callers) in rows:
                print(f"{own * 1000 / n:8.3f} own {cum * 1000 / n:8.3f} cum {calls / n:7.1f} calls  "
                      f"{func} {file.split('site-packages/')[-1]}:{line}")
            print()
        return
    for j, cls in enumerate(names):
        tables = [steps(records[k][j], marks[k]) for k in range(len(sources))]
        pairs = list(dict.fromkeys(pair for t in tables for pair in t))
        totals = [("@event", "@model"), ("submit", "model write [loop CPU]"), ("@answered", "@final")]
        print(f"### {cls.name}: p50 wall / loop-thread CPU, ms (messages)")
        print("| step | " + " | ".join("AB"[k] for k in range(len(sources))) + " |")
        print("| --- |" + " --- |" * len(sources))
        for pair in [q for q in pairs if q not in totals] + totals:
            print(f"| {pair[0]} -> {pair[1]} | " + " | ".join(cell(t.get(pair)) for t in tables) + " |")
        print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway-src", default=str(ROOT), help="the checkout whose daemon is A")
    parser.add_argument("--other", help="a second checkout, B, measured in the same rounds")
    parser.add_argument("--other-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in B's environment only (B is this checkout again without --other)")
    parser.add_argument("--messages", type=int, default=60, help="messages per platform and daemon")
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between messages")
    parser.add_argument("--profile", metavar="DIR", help="the loop under cProfile from `submit` to `run_agent` and from "
                        "the answer written to its post returned (the marks' figures are then not the daemon's): "
                        "DIR/marks-<daemon>.<from>.pstats, summed over the messages")
    parser.add_argument("--handles", action="store_true", help="every loop handle's CPU by what it ran, before the "
                        "model request (from `submit` to its bytes) and after")
    parser.add_argument("--keep", metavar="DIR", help="copy the daemons' marks here (DIR/marks-<daemon>.json)")
    parser.add_argument("--top", type=int, default=40, help="functions printed per profile")
    parser.add_argument("--platforms", default="slack,telegram,mattermost")
    asyncio.run(main(parser.parse_args()))
