#!/usr/bin/env python3
"""The model run as the gateway shapes it, against pydantic-ai alone: CPU per run, interleaved in one process.

Issue 37's CPU target (the daemon's CPU per message <= 1.2x pydantic-ai alone's per run) compares
the whole daemon with `bench/platforms.py`'s pydantic-ai alone, an `Agent` with its instructions in
its constructor and no capabilities. The daemon's run is not that agent: it goes through the shared
agent (`gateway.runs.runner.TurnAgent` over `Runner._agent_for`: the instructions and, since Round 8,
`ToolCalls`, the approval gate (`capabilities.approval_gate`) and the slow-call report in one
capability, in the shared Agent's constructor, so a tool-less run brings no capability of its own;
since Round 12 a run with no tool goes through the Agent without `ToolCalls`, the last variant's shape),
a cancellation token, a timeout and usage limits.
pydantic-ai dispatches every hook of every capability, and passes every event of the stream through
one async generator per capability, whether it overrides the hook or not, and re-composes the
Agent's capabilities with a run's whenever a run brings any: this bench says what that costs, beside
the rest of the message's CPU. The shapes before run beside it: the gate as the run's capability
(Round 7's), and the gate a capability of its own beside `SlowCalls` in the shared Agent (Round 8's
first try).

Each variant runs the same bursts (`--runs` runs at concurrency 32, `gateway.runs.agent_run.run_agent`
for the gateway's shapes) against the instant model server of `bench/platforms.py` (its own process),
the variants in turn and the order reversed every other round; process CPU per run is printed per
round, with the median and the median of each round's ratio to pydantic-ai alone's burst. Then each
variant runs `--calls` more under cProfile: function calls per run, which load does not move, for
differences of a few per cent that CPU under load cannot show. Nothing is judged: it says where the
difference lies.

    .venv/bin/python bench/model_run.py              # 7 rounds of 300 runs per variant, 300 counted
    .venv/bin/python bench/model_run.py --rounds 11 --runs 500
    .venv/bin/python bench/model_run.py --rounds 0 --calls 300   # the call counts alone
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import CONCURRENT_RUNS, INSTRUCTIONS, MODEL, _bench_agent, start_model_server  # noqa: E402


async def main(args: argparse.Namespace) -> int:
    model_proc, url, _ = await start_model_server()
    os.environ.update({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "not-needed"})
    from pydantic_ai import Agent, CancellationToken, DeferredToolRequests
    from pydantic_ai.models import infer_model
    from pydantic_ai.usage import UsageLimits

    from pydantic_ai.capabilities import AbstractCapability

    from capabilities.approval_gate import gate
    from gateway.clock import Clock
    from gateway.runs.agent_run import run_agent
    from gateway.runs.runner import TurnAgent
    from gateway.runs.slow_calls import SlowCalls
    from gateway.runs.tool_calls import ToolCalls
    from gateway.runs.turn import Turn

    alone = _bench_agent()
    model = infer_model(MODEL)

    def shared(instructions: str | None = None, capabilities: list[Any] | None = None) -> Any:
        # As Runner._agent_for builds it (once per agent: instructions, the gate, the slow-call threshold).
        return Agent(None, deps_type=Turn, output_type=[str, DeferredToolRequests], name="assistant",
                     instructions=instructions, capabilities=capabilities)

    def limits() -> dict[str, Any]:
        # As Runner.drive runs it: a token, the agent's wall-clock limit and request limit (their defaults).
        return {"cancellation_token": CancellationToken(), "timeout": 300.0,
                "usage_limits": UsageLimits(request_limit=50)}

    def slow_calls() -> SlowCalls:
        return SlowCalls(30.0, Clock(), lambda *_: None)

    def gateway(agent: Any, capabilities: list[Any]) -> Callable[[], tuple[Any, dict[str, Any]]]:
        return lambda: (TurnAgent(agent, model=model, model_settings=None, capabilities=capabilities), limits())

    @dataclass
    class Gate(AbstractCapability[Turn]):
        """The gate as a capability of its own (the shapes before)."""

        def get_wrapper_toolset(self, toolset: Any) -> Any:
            return gate(toolset)

    now = shared(INSTRUCTIONS, [ToolCalls(30.0, Clock(), lambda *_: None, wrappers=(gate,))])
    round7, apart, instructed = (shared(INSTRUCTIONS, [slow_calls()]), shared(INSTRUCTIONS, [Gate(), slow_calls()]),
                                 shared(INSTRUCTIONS))

    variants: dict[str, Callable[[], tuple[Any, dict[str, Any]]]] = {
        "pydantic-ai alone (instructions in the constructor)": lambda: (alone, {}),
        # A plain agent's run takes the last row's shape since Round 12 (no tool: no ToolCalls); this is the shape
        # of a run whose tools all come from the shared Agent.
        "instructions and ToolCalls (gate + slow calls) shared, no run capability": gateway(now, []),
        # Round 7's: the gate held the turn, so it was each run's, and pydantic-ai composed the layers per run.
        "before Round 8 (the approval gate the run's capability)": gateway(round7, [Gate()]),
        "the gate and SlowCalls two capabilities of the shared Agent": gateway(apart, []),
        "TurnAgent with its instructions alone": gateway(instructed, []),
    }

    async def on_event(_: Any) -> None:
        pass

    async def burst(make: Callable[[], tuple[Any, dict[str, Any]]], runs: int) -> float:
        left = list(range(runs))

        async def worker() -> None:
            while left:
                i = left.pop()
                agent, extra = make()
                await run_agent(agent, f"message {i}", deps=None, on_event=on_event, **extra)

        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(CONCURRENT_RUNS)))
        return (time.process_time() - cpu0) * 1000 / runs

    async def counted(make: Callable[[], tuple[Any, dict[str, Any]]], runs: int) -> tuple[float, float]:
        """Function calls per run under cProfile (which load does not move): all, and pydantic-ai's
        capability code's (its hook dispatch, event-stream wrappers and the composing of layers)."""
        profile = cProfile.Profile()
        profile.enable()
        await burst(make, runs)
        profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        capabilities = sum(nc for (file, _, _), (_, nc, *_) in stats.items()
                           if "pydantic_ai/capabilities/" in file or file.endswith("graphlib.py"))
        return pstats.Stats(profile).total_calls / runs, capabilities / runs  # type: ignore[attr-defined]

    cpu: dict[str, list[float]] = {name: [] for name in variants}
    calls: dict[str, tuple[float, float]] = {}
    try:
        async with alone:
            for make in variants.values():  # warm-up: connections, caches, first-run imports
                await burst(make, 100)
            order = list(variants.items())
            for r in range(args.rounds):
                for name, make in (order if r % 2 == 0 else order[::-1]):
                    cpu[name].append(await burst(make, args.runs))
            if args.calls:
                for name, make in order:
                    calls[name] = await counted(make, args.calls)
    finally:
        model_proc.stop()
    first = next(iter(variants))
    if args.rounds:
        base = statistics.median(cpu[first])
        # Each round's ratio to pydantic-ai alone's burst of the same round: the load the two met was closer.
        print(f"| {args.runs} runs at concurrency {CONCURRENT_RUNS}, {args.rounds} rounds interleaved | CPU ms per "
              "run, median | of pydantic-ai alone | of alone, median of each round's ratio | each round |")
        print("| --- | --- | --- | --- | --- |")
        for name, values in cpu.items():
            median = statistics.median(values)
            paired = statistics.median(v / b for v, b in zip(values, cpu[first]))
            print(f"| {name} | {median:.2f} | {median / base:.2f}x | {paired:.3f}x | "
                  f"{', '.join(f'{v:.2f}' for v in values)} |")
    if calls:
        print(f"\n| {args.calls} runs under cProfile | function calls per run | of pydantic-ai alone | in "
              "pydantic_ai/capabilities/ |")
        print("| --- | --- | --- | --- |")
        for name, (total, capability_code) in calls.items():
            print(f"| {name} | {total:,.0f} | {total / calls[first][0]:.3f}x | {capability_code:,.0f} |")
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=300, help="runs per burst")
    parser.add_argument("--calls", type=int, default=300, help="then this many runs per variant under cProfile, "
                                                                "counting function calls (0: none)")
    sys.exit(asyncio.run(main(parser.parse_args())))
