#!/usr/bin/env python3
"""What one `agent-gateway` call costs the operator (and every test that runs the CLI as a process):
the CPU time (user + system) and the wall time of a fresh process per call, for a few commands that
need nothing but the config and its SQLite database.

Each command runs `--calls` times in a process of its own (`python -m gateway.ops.cli ...`, as the
tests run it), on a copy of the checkout's `config/` and a database migrated beforehand. With
`--against DIR` another checkout's CLI runs too, interleaved call by call with this one's, so the
two see the same machine; the CPU time is the figure to read on a busy machine, the wall time moves
with its load.

    .venv/bin/python bench/cli.py                         # 10 calls of each command
    .venv/bin/python bench/cli.py --against /tmp/before   # beside another checkout (e.g. a worktree of main)
    .venv/bin/python -X importtime -m gateway.ops.cli --version 2>&1 | sort -t'|' -k2 -n | tail   # where it goes

It prints figures only (no target): exit status 0 unless a call could not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (("--version",), ("--help",), ("check", "--config", "config"), ("db", "current", "--config", "config"),
            ("approvals", "list", "--config", "config"), ("doctor", "--config", "config"))
MODEL_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL")  # the shipped agent: the offline model


def workdir_for(src: Path, parent: Path) -> tuple[Path, dict[str, str]]:
    """A directory with a copy of `src`'s config/ (its database migrated), and the environment that runs
    `src`'s code there."""
    work = parent / f"w{len(list(parent.iterdir()))}"
    shutil.copytree(src / "config", work / "config")
    env = {k: v for k, v in os.environ.items() if k not in MODEL_KEYS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    subprocess.run([sys.executable, "-m", "gateway.ops.cli", "db", "upgrade", "--config", "config"], cwd=work,
                   env=env, capture_output=True, check=True, timeout=300)
    return work, env


def one_call(argv: tuple[str, ...], work: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and exit code of one call in a process of its own."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.ops.cli", *argv], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, wall, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="calls of each command (default 10)")
    parser.add_argument("--against", type=Path, help="another checkout, measured interleaved with this one")
    args = parser.parse_args()
    sources = [ROOT] + ([args.against.resolve()] if args.against else [])
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        runs = [workdir_for(src, Path(tmp)) for src in sources]
        cpu: dict[tuple[int, tuple[str, ...]], list[float]] = {}
        wall: dict[tuple[int, tuple[str, ...]], list[float]] = {}
        codes: dict[tuple[int, tuple[str, ...]], int] = {}
        for _ in range(args.calls):
            for argv in COMMANDS:
                for i, (work, env) in enumerate(runs):
                    c, w, code = one_call(argv, work, env)
                    cpu.setdefault((i, argv), []).append(c)
                    wall.setdefault((i, argv), []).append(w)
                    codes[(i, argv)] = code
    print(f"{args.calls} calls each, median (CPU user+system / wall), one process per call")
    header = "".join(f"  {str(src)[-28:]:>28}" for src in sources)
    print(f"{'command':34}{header}")
    for argv in COMMANDS:
        cells = "".join(f"  {statistics.median(cpu[(i, argv)]):6.3f} s / {statistics.median(wall[(i, argv)]):6.3f} s"
                        f" [{codes[(i, argv)]}]" for i in range(len(runs)))
        print(f"{' '.join(argv):34}{cells}")
    print("[n]: the exit code of the last call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
