#!/usr/bin/env python3
"""The run's own preparation, from the claim to the model request, through the real `Runner.execute`.

Issue 37, Round 12. `bench/runner_turn.py` builds a turn and runs its agent; this goes the daemon's
way from a claimed run: a gateway in this process on the fake chat platforms
(tests/capabilities/support.py's `world`), each message ingested into an idle DM with its claim
(`Store.ingest(start=True)`, the inbound path's one transaction) and its sign shown as the inbound
path shows it (`TypingIndicator.show`), then `Runner.execute`: `prepare`, the prompt and history,
the reply stream, `drive`'s start (the typing renewals' timer, the MCP pool's `prepare`),
`build_agent`, `run_agent`, and pydantic-ai's run up to the scripted FunctionModel's
`request_stream`, then the answer posted and the run's end.

Printed, medians over the messages: the event loop thread's CPU (`time.thread_time()`, which
counts whatever ran on the loop meanwhile, as the daemon's loop would) from `execute`'s entry to
`run_agent`'s call and to the model request, split at `prepare` and `build_agent`; with
`--calls`, the function calls (`sys.setprofile`, which load does not move) from `execute`'s entry to
`run_agent`'s call and to the model request (a coroutine's every resumption counts as a call, as in
cProfile). The collector is set as the daemon sets it
(`freeze_startup_objects`): with CPython's default a young pass fell inside most windows. A checkout's figures are compared with another's by
running this from each, in turns (A B B A): the code under test is the checkout's own.

    .venv/bin/python bench/run_start.py                        # 300 messages, the plain agent
    .venv/bin/python bench/run_start.py --agent shipped --calls 50     # clock + memory files
    .venv/bin/python bench/run_start.py --agent tool_search --calls 50
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
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

import gateway.runs.runner as runner  # noqa: E402
from gateway.daemon import freeze_startup_objects  # noqa: E402
from gateway.messages import ChatKind, InboundMessage, Sender  # noqa: E402
from gateway.store import repo  # noqa: E402
from tests.capabilities.shaping_script import SCRIPT, ScriptedModel  # noqa: E402
from tests.capabilities.support import World, agent, world  # noqa: E402
from tests.capabilities.test_tool_search import _agent  # noqa: E402

# The agents measured, by `--agent` (bench/runner_turn.py takes the same): the shipped one is
# config/agents/assistant.yaml's capabilities on the scripted model.
AGENTS: dict[str, Callable[[], dict[str, dict[str, Any]]]] = {
    "plain": lambda: {"assistant": agent(model="shaping-scripted")},
    "shipped": lambda: {"assistant": agent({"id": "clock", "config": {"timezone": "UTC"}},
                                           {"id": "memory_files", "tool_approval": {"delete_memory": "required"}},
                                           model="shaping-scripted")},
    "tool_search": lambda: _agent(strategy="keywords"),
    # The shipped agent with the capabilities shared in Round 13 (none of them needs a server or a key).
    "worker": lambda: {"assistant": agent({"id": "clock", "config": {"timezone": "UTC"}}, {"id": "memory_files"},
                                          {"id": "planning"}, {"id": "sandbox"}, {"id": "code_execution"},
                                          {"id": "schedules"}, {"id": "thinking", "config": {"effort": "low"}},
                                          model="shaping-scripted")},
    # Round 14: the shipped agent with the capabilities shared in Round 14 (the image key is read, never used).
    "steered": lambda: {"assistant": agent({"id": "clock", "config": {"timezone": "UTC"}}, {"id": "memory_files"},
                                           {"id": "guardrails", "config": {"redact_secrets_in": True,
                                                                           "redact_secrets_tool": True}},
                                           {"id": "system_reminders", "config": {"goal_reanchor": {"interval": 5}}},
                                           {"id": "tool_output_limits"}, {"id": "compaction"},
                                           {"id": "image_generation", "secret_id": "env:BENCH_IMAGE_KEY",
                                            "config": {"base_url": "http://127.0.0.1:9/v1"}},
                                           model="shaping-scripted")},
}
os.environ.setdefault("BENCH_IMAGE_KEY", "sk-bench-never-sent")
AGENT_HELP = ("plain: no capability, no tool; shipped: clock and memory files (config/agents/assistant.yaml); "
              "tool_search: memory files, tool search, three MCP servers; worker: shipped with planning, sandbox, "
              "code_execution, schedules and thinking; steered: shipped with guardrails, system_reminders, "
              "tool_output_limits, compaction and image_generation")

# Where one message's run is, by the loop thread's CPU clock (or by calls counted): set by the probes.
stamps: dict[str, float] = {}
Clock = Callable[[], float]


def probe(clock: Clock) -> None:
    """Stamp `clock` at `prepare`'s and `build_agent`'s ends, `run_agent`'s call and the model request."""
    prepare, build_agent, run_agent = runner.Runner.prepare, runner.Runner.build_agent, runner.run_agent
    request_stream = ScriptedModel.request_stream

    async def prepared(self: runner.Runner, claimed: Any) -> Any:
        done = await prepare(self, claimed)
        stamps["prepared"] = clock()
        return done

    def built(self: runner.Runner, turn: Any) -> Any:
        stamps["building"] = clock()
        agent = build_agent(self, turn)
        stamps["built"] = clock()
        return agent

    async def running(*args: Any, **kwargs: Any) -> Any:
        stamps["run_agent"] = clock()
        return await run_agent(*args, **kwargs)

    def requested(self: ScriptedModel, *args: Any, **kwargs: Any) -> Any:
        stamps.setdefault("request", clock())
        return request_stream(self, *args, **kwargs)

    runner.Runner.prepare, runner.Runner.build_agent, runner.run_agent = prepared, built, running  # type: ignore[method-assign]
    ScriptedModel.request_stream = requested  # type: ignore[method-assign]


async def claimed(w: World, n: int) -> Any:
    """A message into an idle DM of its own, claimed with its ingest, its sign shown."""
    store = w.gw.store
    identity = await store.identify("slack", "T1", "U1", "alice")
    message = InboundMessage(platform="slack", binding_id="slack", workspace="T1", channel=f"D{n}",
                             chat_kind=ChatKind.DM, sender=Sender("U1", "alice"), text="hello", event_id=f"r{n}",
                             message_id=f"{n}.000", mentioned=True)
    ingested = await store.ingest(binding_id="slack", event_ids=[f"slack:r{n}"],
                                  conversation=repo.ConversationRef.of(message), identity=identity, account_id="U1",
                                  text="hello", agent_id="assistant", platform_message_id=message.message_id,
                                  queue_limit=1000, start=True)
    assert ingested.claimed is not None
    conversation = ingested.conversation
    await w.gw.typing_indicator.show(w.gw.adapters["slack"], conversation.target(), conversation.id)
    return ingested.claimed


class Calls:
    """Function calls (Python and C) on this thread, counted by `sys.setprofile` while on."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.n += 1

    def count(self) -> float:
        return float(self.n)


async def main(args: argparse.Namespace) -> int:
    counter = Calls()
    probe(counter.count if args.calls else time.thread_time)
    agents = AGENTS[args.agent]()
    numbers = itertools.count()
    split: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with world(Path(tmp), agents=agents) as w:
            freeze_startup_objects()  # as `agent-gateway run` does: the daemon's collector, not CPython's default
            for _ in range(20):  # warm-up: the shared Agent, first-run imports
                await w.gw.runner.execute(await claimed(w, next(numbers)))
            SCRIPT.reset()
            for _ in range(args.calls or args.runs):
                run = await claimed(w, next(numbers))
                stamps.clear()
                if args.calls:
                    counter.n = 0
                    sys.setprofile(counter)
                start = counter.count() if args.calls else time.thread_time()
                try:
                    await w.gw.runner.execute(run)
                finally:
                    sys.setprofile(None)
                marks = {"execute → prepared": ("start", "prepared"), "prepared → build_agent": ("prepared", "building"),
                         "build_agent": ("building", "built"), "built → run_agent": ("built", "run_agent"),
                         "execute → run_agent": ("start", "run_agent"),
                         "run_agent → the model request": ("run_agent", "request"),
                         "execute → the model request": ("start", "request")}
                at = {"start": start, **stamps}
                for name, (a, b) in marks.items():
                    split.setdefault(name, []).append(at[b] - at[a])
    unit, scale = ("calls", 1.0) if args.calls else ("µs loop-thread CPU", 1e6)
    print(f"| {args.agent} agent, {args.calls or args.runs} messages, median | {unit} |")
    print("| --- | --- |")
    for name, values in split.items():
        print(f"| {name} | {statistics.median(values) * scale:,.0f} |")
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="messages, one at a time")
    parser.add_argument("--calls", type=int, default=0, help="count calls over this many messages instead of CPU")
    parser.add_argument("--agent", choices=tuple(AGENTS), default="plain", help=AGENT_HELP)
    sys.exit(asyncio.run(main(parser.parse_args())))
