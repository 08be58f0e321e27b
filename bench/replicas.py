#!/usr/bin/env python3
"""Two replicas against one on PostgreSQL: does a second daemon process add throughput?

Each round starts a fresh PostgreSQL database (127.0.0.1:5432, trust auth, as the tests use it),
one or two daemons (`agent-gateway run`, bench/platforms.py's `start_gateway`) on it with a web
binding and the offline `demo` model (in process, answers at once: the daemons are CPU-bound),
and one load driver in its own process: it creates the conversations (spread evenly over the
replicas), then posts one message into each, all at once, and reads the runs' outcome from the
database. The same driver, the same load, both ways; rounds alternate 1, 2, 1, 2 so the
machine's drift hits both alike.

    .venv/bin/python bench/replicas.py            # 1,000 messages a round, 2 rounds each
    .venv/bin/python bench/replicas.py --quick    # 300, one round each

Throughput: messages over the time from the first run queued to the last run finished (the
runs' own timestamps in the database). Also printed: CPU per message of the daemons (summed),
of PostgreSQL and of the driver, and how busy the machine was. Target: two replicas >= 1.7x
one (bench/README.md says what limits it on a 2-core machine). Exit status 0 when met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from platforms import Proc, start_gateway  # noqa: E402

TARGET = 1.7
WARM_UP = 20  # messages per replica before the measured burst (imports, caches, connections)
DONE = ("finished", "failed", "stopped", "expired", "budget_exceeded", "guardrail_blocked")


# =========================================================================================
# The driver: its own process, the same code whatever it drives.
# =========================================================================================


async def drive(bases: list[str], messages: int, dsn: str, budget: float) -> None:
    """Create `messages` conversations over `bases`, say `ready`, wait for a line on stdin, post
    one message into each at once, and print how the runs went (JSON)."""
    import aiohttp
    import asyncpg

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:

        async def create(base: str) -> tuple[str, str]:
            async with http.post(f"{base}/api/v1/conversations", json={}) as r:
                if r.status != 201:
                    raise RuntimeError(f"create: HTTP {r.status}")
                return base, str((await r.json())["id"])

        async def post(base: str, conversation: str, text: str) -> None:
            async with http.post(f"{base}/api/v1/conversations/{conversation}/messages", json={"text": text}) as r:
                if r.status != 202:
                    raise RuntimeError(f"post: HTTP {r.status}: {await r.text()}")

        db = await asyncpg.connect(dsn)
        try:
            async def settled(total: int) -> int:
                deadline = time.monotonic() + budget
                while time.monotonic() < deadline:
                    done = int(await db.fetchval("select count(*) from runs where status = any($1::text[])", list(DONE)))
                    if done >= total:
                        return done
                    await asyncio.sleep(0.05)
                return int(await db.fetchval("select count(*) from runs where status = any($1::text[])", list(DONE)))

            warm = await asyncio.gather(*(create(bases[i % len(bases)]) for i in range(WARM_UP * len(bases))))
            await asyncio.gather(*(post(base, c, "warm-up") for base, c in warm))
            await settled(len(warm))
            conversations = await asyncio.gather(*(create(bases[i % len(bases)]) for i in range(messages)))
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            since = await db.fetchval("select now()")
            await asyncio.gather(*(post(base, c, f"message {i}") for i, (base, c) in enumerate(conversations)))
            await settled(len(warm) + messages)
            row = await db.fetchrow(
                "select count(*) filter (where status = 'finished') as finished, count(*) as runs,"
                " extract(epoch from max(finished_at) - min(created_at)) as seconds"
                " from runs where created_at >= $1", since)
        finally:
            await db.close()
    print(json.dumps({"finished": int(row["finished"]), "runs": int(row["runs"]),
                      "seconds": float(row["seconds"] or 0.0)}), flush=True)


# =========================================================================================
# CPU of the processes involved, and of the machine.
# =========================================================================================


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return float(sum(fields) - idle), float(sum(fields))


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL process on the machine (the server is shared by all)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    replicas: int
    messages: int
    finished: int
    seconds: float
    daemons_cpu: float
    postgres_cpu: float
    driver_cpu: float
    busy: float  # share of the machine's CPU in use during the burst

    @property
    def rate(self) -> float:
        return self.finished / self.seconds if self.seconds else 0.0


async def one_round(replicas: int, messages: int, budget: float) -> Round:
    from tests.conftest import pg_database

    async with pg_database() as url:
        with tempfile.TemporaryDirectory(prefix="gw-replicas-bench-") as tmp:
            daemons: list[Proc] = []
            driver: Proc | None = None
            try:
                for i in range(replicas):  # one after another: the first migrates the database
                    directory = Path(tmp) / f"replica{i}"
                    directory.mkdir()
                    daemons.append(await start_gateway(ROOT, directory, "", [], {"platform_budget_scale": 0},
                                                       database_url=url, model="demo"))
                bases = [f"http://127.0.0.1:{d.port}" for d in daemons]
                dsn = url.replace("postgresql+asyncpg://", "postgresql://")
                popen = subprocess.Popen([sys.executable, __file__, "--drive", json.dumps([bases, messages, dsn, budget])],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
                driver = Proc("driver", popen)
                assert popen.stdout is not None and popen.stdin is not None
                line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline),
                                              budget)
                if line.strip() != b"ready":
                    raise RuntimeError("the driver did not get ready")
                await asyncio.sleep(0.5)
                cpu0 = [d.cpu() for d in daemons]
                pg0, drv0, m0 = postgres_cpu(), driver.cpu(), machine_cpu()
                popen.stdin.write(b"go\n")
                popen.stdin.flush()
                out = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline),
                                             budget + 30)
                m1 = machine_cpu()
                result = json.loads(out)
                return Round(replicas, messages, result["finished"], result["seconds"],
                             sum(d.cpu() - c for d, c in zip(daemons, cpu0)), postgres_cpu() - pg0, driver.cpu() - drv0,
                             (m1[0] - m0[0]) / max(1.0, m1[1] - m0[1]))
            finally:
                if driver is not None:
                    driver.stop()
                for d in daemons:
                    d.stop()


def report(rounds: list[Round]) -> bool:
    print()
    print("| replicas | messages finished | msg/s | daemons CPU ms/msg | PostgreSQL CPU ms/msg | driver CPU ms/msg "
          "| machine busy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rounds:
        n = max(1, r.finished)
        print(f"| {r.replicas} | {r.finished} / {r.messages} | {r.rate:.1f} | {r.daemons_cpu / n * 1000:.1f} "
              f"| {r.postgres_cpu / n * 1000:.1f} | {r.driver_cpu / n * 1000:.1f} | {r.busy:.0%} |")
    one = statistics.mean(r.rate for r in rounds if r.replicas == 1)
    two = statistics.mean(r.rate for r in rounds if r.replicas == 2)
    ratio = two / one if one else 0.0
    complete = all(r.finished == r.messages for r in rounds)
    ok = ratio >= TARGET and complete
    cpu1 = statistics.mean(r.daemons_cpu / max(1, r.finished) for r in rounds if r.replicas == 1)
    cpu2 = statistics.mean(r.daemons_cpu / max(1, r.finished) for r in rounds if r.replicas == 2)
    print()
    print(f"two replicas / one: {ratio:.2f}x (target >= {TARGET}x) {'PASS' if ok else 'MISS'}"
          + ("" if complete else " (NOT ALL FINISHED)"))
    print(f"daemon CPU per message, two replicas / one: {cpu2 / cpu1:.2f}x (1.00x: a replica adds no work per message)")
    print("load average at the end: %.2f %.2f %.2f on %d CPUs" % (*os.getloadavg(), os.cpu_count() or 0))
    return ok


async def main(args: argparse.Namespace) -> int:
    messages = args.messages or (300 if args.quick else 1000)
    order = [1, 2] if args.quick else [1, 2, 1, 2]
    print("load average at the start: %.2f %.2f %.2f on %d CPUs" % (*os.getloadavg(), os.cpu_count() or 0))
    rounds = []
    for replicas in order:
        print(f"{replicas} replica(s), {messages} messages at once ...", flush=True)
        rounds.append(await one_round(replicas, messages, args.budget))
    return 0 if report(rounds) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 messages, one round each way")
    parser.add_argument("--messages", type=int, help="messages per round (instead of 1,000 or 300)")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds a round's burst may take at most")
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        asyncio.run(drive(*json.loads(args.drive)))
    else:
        sys.exit(asyncio.run(main(args)))
