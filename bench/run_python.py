#!/usr/bin/env python3
"""What one run_python call costs: a fresh Monty worker per call (spawn, run, tear down).

run_python starts every program in a new worker so nothing carries over between calls. This
prints what that costs, one call at a time and eight at once, for a trivial program and for a
CSV sum of 10,000 rows pasted into the code. Printed, not judged: there is no target.

    .venv/bin/python bench/run_python.py [--calls 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capabilities.run_python import RunPythonConfig, _Clipped, _run  # noqa: E402

TRIVIAL = "1 + 1"
CSV = "import csv\nrows = list(csv.reader(DATA.splitlines()))\nsum(float(r[1]) for r in rows)"
DATA = "\n".join(f"item{i},{i % 97}.5" for i in range(10_000))


async def timed(code: str) -> float:
    start = time.perf_counter()
    await _run(code, RunPythonConfig(), _Clipped(10_000))
    return time.perf_counter() - start


def line(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{name:<34} median {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   n={len(ordered)}"


async def main(calls: int) -> None:
    csv_code = f"DATA = {DATA!r}\n{CSV}"
    print(line("trivial, one at a time", [await timed(TRIVIAL) for _ in range(calls)]))
    print(line("CSV of 10,000 rows, one at a time", [await timed(csv_code) for _ in range(calls)]))
    concurrent: list[float] = []
    for _ in range(max(1, calls // 8)):
        concurrent.extend(await asyncio.gather(*(timed(TRIVIAL) for _ in range(8))))
    print(line("trivial, eight at once", concurrent))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    asyncio.run(main(parser.parse_args().calls))
