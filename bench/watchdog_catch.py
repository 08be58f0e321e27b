#!/usr/bin/env python3
"""Whether the loop watchdog names a stall just past its threshold, and what its looks cost: two checkouts.

Each checkout's `gateway/ops/loop_watchdog.py` in its own process, A B B A: `--stalls` times the loop is
blocked `--block` seconds (0.3: the next beat runs ~0.25-0.3 s late, past the 0.25 s threshold) at a random
moment after a beat, and the stalls it told are counted; then the watchdog thread's looks a second while
the loop beats (each look takes the GIL from the loop), idle for `--idle` seconds.

    .venv/bin/python bench/watchdog_catch.py --before /tmp/base-checkout     # this checkout is "after"
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import asyncio, importlib.util, random, sys, threading, time
spec = importlib.util.spec_from_file_location("watchdog_under_test", sys.argv[1])
wd = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = wd
spec.loader.exec_module(wd)
stalls, block, idle = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
told, looks = [], 0

def traced(frame, event, arg):
    global looks
    if event == "call" and frame.f_code.co_name == "wait" and frame.f_back and frame.f_back.f_code.co_name == "_watch":
        looks += 1

async def main():
    global looks
    watchdog = wd.LoopWatchdog(on_stall=told.append)
    threading.settrace(traced)
    watchdog.start()
    await asyncio.sleep(idle)
    idle_looks = looks
    for _ in range(stalls):
        await asyncio.sleep(0.4 + random.random() * 0.05)
        time.sleep(block)
        await asyncio.sleep(0.5)
    watchdog.stop()
    print(f"{len(told)} {idle_looks / idle:.1f}")

asyncio.run(main())
"""


def run(checkout: Path, args: argparse.Namespace) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(checkout / "gateway/ops/loop_watchdog.py"),
                          str(args.stalls), str(args.block), str(args.idle)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--stalls", type=int, default=12)
    parser.add_argument("--block", type=float, default=0.3)
    parser.add_argument("--idle", type=float, default=3.0)
    args = parser.parse_args()
    for name in ("before", "after", "after", "before"):  # A B B A: the machine's drift falls on both
        caught, looks = run(getattr(args, name), args)
        print(f"{name:6}  stalls of {args.block:g} s told: {caught:2}/{args.stalls}  looks a second idle: {looks:.1f}")


if __name__ == "__main__":
    main()
