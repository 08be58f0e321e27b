#!/usr/bin/env python3
"""Runs through the real `Runner` against a FunctionModel: CPU per run, interleaved in one process, and a profile.

Issue 37: nothing a run needs should be built per message when the config fixes it. This starts a
gateway in this process on the fake chat platforms (tests/capabilities/support.py's `world`) with
one agent: memory files, tool search, and three MCP servers on stdio (the tool-search test's agent),
or with `--agent plain` one with no capability and no tool, `--agent shipped` the shipped one's (clock, memory files).
Each run is one message as `Runner.drive` takes it: recorded and claimed (`World.turn`, which ends
in `Runner.prepare`), the MCP servers readied (`turn_preparers`), the agent built, and run to its
answer by `run_agent` against the scripted FunctionModel (it answers "done"). Every run is a DM of
its own, so no conversation grows.

The variants take turns message by message (A B B A ...), so both meet the same load:
- `shared`: `Runner.build_agent` (the shared Agent, `TurnAgent`);
- `per run`: the run's Agent built with all of it in its constructor (`built_for_its_run`, what the
  runner built for an agent with tool search until Round 7 shared it).
Process CPU per message (everything above), and the loop thread's CPU building its agent and running
it, are printed: medians over the messages. `--profile FILE` then runs one more burst of
the shared variant under cProfile, writes the stats to FILE, prints the top of them and the
function calls per message (which load does not move).

    .venv/bin/python bench/runner_turn.py                       # 7 rounds of 100 messages per variant
    .venv/bin/python bench/runner_turn.py --rounds 0 --runs 500 --profile /tmp/turn.prof
    .venv/bin/python bench/runner_turn.py --agent plain --rounds 0 --runs 300 --profile /tmp/plain.prof
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic_ai.usage import UsageLimits  # noqa: E402

from gateway.messages import ChatKind  # noqa: E402
from gateway.runs.agent_run import run_agent  # noqa: E402
from gateway.runs.turn import Turn  # noqa: E402
from gateway.store import repo  # noqa: E402
from tests.capabilities.shaping_script import SCRIPT  # noqa: E402
from tests.capabilities.support import Account, Place, World, built_for_its_run, world  # noqa: E402
from bench.run_start import AGENT_HELP, AGENTS  # noqa: E402

ALICE = Account("slack", "T1", "U1", "alice")
Build = Callable[[World, Turn], Any]


async def one_run(w: World, build: Build, channel: str) -> tuple[float, float]:
    """One message's run; returns the event loop thread's CPU (ms) building its agent, and running it (the
    store's thread works meanwhile on other runs' rows in the daemon, not here, but this leaves it out)."""
    turn = await w.turn(ALICE, Place("slack", "slack", "T1", channel, ChatKind.DM), "hello")
    for prepare in w.gw.runner.turn_preparers:
        await prepare(turn)
    cpu0 = time.thread_time()
    agent = build(w, turn)
    built = time.thread_time()

    async def on_event(_: Any) -> None:
        pass

    result = await run_agent(agent, "hello", deps=turn, history=[], on_event=on_event,
                             usage_limits=UsageLimits(request_limit=turn.agent.limits.model_requests),
                             timeout=turn.agent.limits.wall_clock_seconds)
    ran = time.thread_time()
    await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
    return (built - cpu0) * 1000, (ran - built) * 1000


async def main(args: argparse.Namespace) -> int:
    variants: dict[str, Build] = {
        "shared (Runner.build_agent)": lambda w, turn: w.gw.runner.build_agent(turn),
        "per run (the Agent built for its run)": lambda w, turn: built_for_its_run(w.gw, turn),
    }
    names = list(variants)
    channels = (f"D{n}" for n in itertools.count())
    # Per message, per variant: (whole message, agent built, agent run), CPU ms.
    seen: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        agents = AGENTS[args.agent]()
        async with world(Path(tmp), agents=agents) as w:

            async def message(name: str) -> tuple[float, float, float]:
                cpu0 = time.process_time()
                built, ran = await one_run(w, variants[name], next(channels))
                return (time.process_time() - cpu0) * 1000, built, ran

            for _ in range(20):  # warm-up: the shared Agent, connections, first-run imports
                for name in names:
                    await message(name)
            for r in range(args.rounds):
                SCRIPT.reset()
                for i in range(args.runs):  # the variants message by message, in the order A B B A ...
                    for name in (names if i % 2 == 0 else names[::-1]):
                        seen[name].append(await message(name))
            if args.profile:
                SCRIPT.reset()
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.runs):
                    await message(names[0])
                profile.disable()
                profile.dump_stats(args.profile)
                # cProfile's count, which load does not move: what a message costs in calls.
                print(f"function calls per message (cProfile): {pstats.Stats(profile).total_calls / args.runs:,.0f}")
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(r"gateway/|capabilities/", 40)
                print(out.getvalue())
    if args.rounds:
        print(f"| {args.rounds} x {args.runs} messages per variant, interleaved message by message | CPU ms per "
              "message, median | the agent built | the agent run | built + run, mean |")
        print("| --- | --- | --- | --- | --- |")
        for name, rows in seen.items():
            whole, built, ran = zip(*rows)
            both = statistics.fmean(b + r for b, r in zip(built, ran))
            print(f"| {name} | {statistics.median(whole):.2f} | {statistics.median(built):.3f} | "
                  f"{statistics.median(ran):.2f} | {both:.2f} |")
        print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=100, help="messages per variant and round")
    parser.add_argument("--profile", help="write a cProfile of one more burst of the shared variant here")
    parser.add_argument("--agent", choices=tuple(AGENTS), default="tool_search", help=AGENT_HELP)
    sys.exit(asyncio.run(main(parser.parse_args())))
