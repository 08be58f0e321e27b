#!/usr/bin/env python3
"""Two checkouts' daemons, CPU per message in bursts, interleaved (bench/platforms.py's setup).

A change to the gateway's own CPU is a millisecond of a message's 10-15: on a 2-core machine
shared with other work, two `bench/platforms.py` runs minutes apart differ by more than that. So
both daemons run at once, each with its own instances of the fakes, against the same model
server, and take turns: per round and platform, a burst to each (the order alternating), the CPU
of each burst read from its daemon's /proc. The machine's drift then falls on both alike. The last
column divides each burst's CPU by the model server's over that burst first (the same work for
either daemon, so it moves only with the machine's speed, which changes within seconds here).

    .venv/bin/python bench/cpu_ab.py --before /tmp/base-checkout            # this checkout is "after"
    .venv/bin/python bench/cpu_ab.py --before /tmp/base --after . --burst 300 --rounds 4
    .venv/bin/python bench/cpu_ab.py --before /tmp/base --profile /tmp/prof  # then py-spy over a burst per platform

`--profile DIR` adds, after the rounds, one burst per platform to the "after" daemon under py-spy
(bench/platforms.py's summary, by phase and by whose code): where a burst's CPU goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import (  # noqa: E402
    Mattermost,
    Platform,
    Proc,
    Slack,
    Telegram,
    burst,
    poll,
    start_gateway,
    start_model_server,
    summarise_profile,
)
from bench.threads import thread_cpu  # noqa: E402

NAMES = {"slack": Slack, "telegram": Telegram, "mattermost": Mattermost}


async def profile_burst(p: Platform, proc: Proc, messages: int, budget: float, directory: Path) -> None:
    """One burst of `messages` to `p` while py-spy samples the daemon (as bench/platforms.py's --profile)."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    name = p.name.lower()
    spies = [subprocess.Popen([py_spy, "record", "--nonblocking", "--gil", "-r", "500", "-p", str(proc.pid), "-f", kind,
                               "-o", str(directory / f"{name}-burst.{ext}")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for kind, ext in (("flamegraph", "svg"), ("raw", "txt"))]
    await asyncio.sleep(1.0)  # py-spy attached
    b = await burst(p, proc, messages, budget)
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        spy.wait(30)
    summarise_profile(p.name, directory / f"{name}-burst.txt", b.messages, b.cpu_ms, how=f"in a burst of {messages}")


async def main(args: argparse.Namespace) -> int:
    sides = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    chosen = [NAMES[n.strip().lower()] for n in args.platforms.split(",")]
    platforms = {side: [cls("gateway") for cls in chosen] for side in sides}
    everyone = [p for ps in platforms.values() for p in ps]
    for p in everyone:
        await p.start()
    stop = asyncio.Event()
    poller = asyncio.create_task(poll(everyone, stop))
    model, model_url, model_times = await start_model_server()
    procs: list[Proc] = [model]
    cpu: dict[tuple[str, str], list[float]] = {}
    rate: dict[tuple[str, str], list[float]] = {}
    # The model server's CPU per message in each burst: the same work for either daemon, so it moves only
    # with the machine; each burst's CPU divided by it takes the drift between two bursts out.
    control: dict[tuple[str, str], list[float]] = {}
    opened: dict[tuple[str, str], list[float]] = {}  # connections the model server accepted per message
    try:
        with tempfile.TemporaryDirectory(prefix="gw-cpu-ab-") as tmp:
            daemons: dict[str, Proc] = {}
            for side, src in sides.items():
                (Path(tmp) / side).mkdir()
                daemons[side] = await start_gateway(src, Path(tmp) / side, model_url, platforms[side])
                procs.append(daemons[side])
                print(f"{side}: {src} (pid {daemons[side].pid})", flush=True)
            order = list(sides)
            for i, cls in enumerate(chosen):
                for side in order:  # warm-up: each daemon's backlog high-water mark, its pools
                    await burst(platforms[side][i], daemons[side], args.burst, args.budget)
            for r in range(args.rounds):
                for i, cls in enumerate(chosen):
                    for side in (order if r % 2 == 0 else order[::-1]):
                        model0, opened0 = sum(thread_cpu(model.pid).values()), model_times.opened
                        b = await burst(platforms[side][i], daemons[side], args.burst, args.budget)
                        opened.setdefault((cls.name, side), []).append(
                            (model_times.opened - opened0) / max(1, b.messages))
                        model_ms = (sum(thread_cpu(model.pid).values()) - model0) / 1e6 / max(1, b.messages)
                        cpu.setdefault((cls.name, side), []).append(b.cpu_ms)
                        rate.setdefault((cls.name, side), []).append(b.rate)
                        control.setdefault((cls.name, side), []).append(b.cpu_ms / model_ms if model_ms else float("nan"))
                        print(f"  round {r + 1} {cls.name} {side}: {b.cpu_ms:.2f} ms CPU/msg, {b.rate:.0f} msg/s, "
                              f"model server {model_ms:.2f} ms/msg, "
                              f"{opened[(cls.name, side)][-1]:.3f} model connections opened/msg"
                              f"{'' if b.messages == args.burst else f' ({b.messages} answered)'}", flush=True)
            print(f"\n| burst of {args.burst}, {args.rounds} rounds interleaved | CPU ms/msg before (median; each) "
                  "| after (median; each) | after / before | msg/s before / after (median) "
                  "| after / before, each burst's CPU / the model server's in it "
                  "| model connections opened per message, before / after (median) |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for cls in chosen:
                b, a = cpu[(cls.name, "before")], cpu[(cls.name, "after")]
                print(f"| {cls.name} | {statistics.median(b):.2f} ({', '.join(f'{x:.2f}' for x in b)}) "
                      f"| {statistics.median(a):.2f} ({', '.join(f'{x:.2f}' for x in a)}) "
                      f"| {statistics.median(a) / statistics.median(b):.3f} "
                      f"| {statistics.median(rate[(cls.name, 'before')]):.0f} / {statistics.median(rate[(cls.name, 'after')]):.0f} "
                      f"| {statistics.median(control[(cls.name, 'after')]) / statistics.median(control[(cls.name, 'before')]):.3f} "
                      f"| {statistics.median(opened[(cls.name, 'before')]):.3f} / "
                      f"{statistics.median(opened[(cls.name, 'after')]):.3f} |")
            if args.profile:
                for i, _ in enumerate(chosen):
                    await profile_burst(platforms["after"][i], daemons["after"], args.burst, args.budget,
                                        Path(args.profile))
    finally:
        stop.set()
        await poller
        for proc in reversed(procs):
            proc.stop()
        for p in everyone:
            with contextlib.suppress(Exception):
                await p.stop()
    return 0


def two_checkouts(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a bench comparing two checkouts (this one and bench/wakeups.py)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the checkout measured as before")
    parser.add_argument("--after", default=str(ROOT), help="the checkout measured as after (default: this one)")
    parser.add_argument("--platforms", default="slack,telegram,mattermost")
    return parser


if __name__ == "__main__":
    parser = two_checkouts(__doc__)
    parser.add_argument("--burst", type=int, default=300, help="messages in a burst")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--profile", metavar="DIR", help="py-spy over one more burst per platform on the after daemon")
    sys.exit(asyncio.run(main(parser.parse_args())))
