#!/usr/bin/env python3
"""How long SIGTERM takes to end the daemon with a Slack, a Telegram and a Mattermost binding
connected and idle: `agent-gateway run` in its own process, the three fake platform servers in
this one, on loopback. Prints each run's time from SIGTERM to exit and the median, twice: with
servers that answer a websocket close frame at once, and with servers that never answer it (a
slow edge, a connection that died without a word), which is what a stop must not wait for.

    .venv/bin/python bench/stop.py             # 5 runs of each
    .venv/bin/python bench/stop.py --runs 9 --idle 12

Exit status 0 when every run exited 0 and each median is within the target (2 s), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.adapters.stopping import connected_daemon, fake_platforms  # noqa: E402

TARGET_S = 2.0
CEILING_S = 30.0  # a run still alive after this is killed and counted as a miss


async def scenario(answer_close: bool, runs: int, idle: float, tmp: Path) -> bool:
    times: list[float] = []
    failed = 0
    peers = "servers answer close" if answer_close else "servers never answer close"
    async with fake_platforms(answer_close=answer_close) as platforms:
        for i in range(runs):
            daemon = await connected_daemon(tmp / f"{'answer' if answer_close else 'silent'}{i}", platforms)
            try:
                await asyncio.sleep(idle)  # connected and idle
                code, took = await daemon.sigterm(CEILING_S)
            finally:
                await daemon.close()
            failed += code != 0
            times.append(took)
            print(f"  {peers}, run {i + 1}: SIGTERM -> exit {code if code is not None else '(killed)'} in {took:.2f} s",
                  flush=True)
    p50 = statistics.median(times)
    ok = p50 <= TARGET_S and not failed
    print(f"stop, slack + telegram + mattermost connected, {peers}: p50 {p50:.2f} s, max {max(times):.2f} s "
          f"over {runs} runs (target p50 <= {TARGET_S:.0f} s, exit 0) {'PASS' if ok else 'MISS'}", flush=True)
    return ok


async def main(runs: int, idle: float) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-stop-") as tmp:
        results = [await scenario(answer, runs, idle, Path(tmp)) for answer in (True, False)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario (default 5)")
    parser.add_argument("--idle", type=float, default=1.0, help="seconds connected and idle before SIGTERM (default 1)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.runs, args.idle)))
