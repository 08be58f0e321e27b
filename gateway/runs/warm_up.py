"""A process's first agent run, done once at start so that no person's first message pays for it.

The first run in a process does work every later run reuses, on the event loop, in front of every
other conversation's events. Found by sampling the loop's thread through a fresh daemon's first
message (bench/README.md, "The first message"):
- the first pydantic-ai model built loads genai-prices' price table (its `data` module, ~40 ms; not the
  offline models, which it cannot price: gateway/runs/llm.py);
- a provider's first model imports its SDK (the OpenAI SDK: 0.3-0.9 s) and makes its HTTP client's
  SSL context (`ModelCache.warm`, which did it on the loop before READY);
- the first run imports anyio's asyncio backend, builds the agent's graph (pydantic-ai keeps one per
  agent name) and walks every first-use path of a run: streaming, a tool call and its result;
- each event loop's first synchronous instructions function starts its worker thread (anyio's).

So after `Gateway.start` has opened the gate (READY does not wait for it), `warm_up` builds the
configured models, then rehearses one run per agent name on an offline model that calls a tool and
answers, in a thread with an event loop of its own: the thread takes the GIL in slices, so the loop
keeps serving meanwhile. A run that comes meanwhile waits for the thread (`ModelCache.warming`): doing
the same first-time work on the loop, it imported the modules the thread was importing, and Python's
per-module import lock then held the loop itself until the thread was done (the provider's SDK, 11.6 s
on a loaded machine: every conversation and /readyz frozen, tests/chaos/test_database_faults.py).
What it builds is the process's (modules, pydantic-ai's caches, the models, which the gateway's
`ModelCache` adopts); nothing bound to the thread's loop is kept. Then the daemon's loop starts its own
part: the worker thread its first synchronous instructions function would start. (It was a whole rehearsed
run on the loop, 11-13 ms of the loop's CPU at every start, for a first run on that loop that was then
~1 ms cheaper: the rest of a run's first-time work is the process's, done in the thread; bench/README.md,
"Round 14 (issue 37): the gateway's own start, in process".) Only what the config names is built: a
deployment on Anthropic never imports openai, the offline demo imports neither.

A warm-up that fails is logged and changes nothing else: the first run then pays, as it used to.

The thread's rehearsal is done once per agent name and process: what it builds is the process's, so a
second gateway started in the same process (a test suite's next test, a restart inside one) would
rehearse for nothing (~15 ms of CPU each). The daemon starts one gateway per process; for it nothing
changes. The loop's worker thread is the loop's own and is started at every start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import selectors
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence

import anyio.to_thread
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.capabilities import Capability
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits

from bindings.loader import LoadedConfig

from gateway.runs.agent_run import run_agent
from gateway.runs.llm import offline_model
from gateway.runs.models_cache import ModelCache
from gateway.runs.runner import TurnAgent
from gateway.runs.turn import Turn

log = logging.getLogger("gateway.warm_up")

REHEARSAL_SECONDS = 30.0  # a rehearsal that has not ended by then is given up (logged)

_rehearsed: set[str] = set()  # the agent names this process has rehearsed in the thread (see the module docstring)


async def warm_up(config: LoadedConfig, models: ModelCache,
                  extra: Sequence[Callable[[LoadedConfig], None]] = ()) -> None:
    """Build `config`'s models, do the extensions' part (`Assembly.warm_ups`) and rehearse a run per agent
    (see the module docstring); logs one line."""
    started, cpu, modules = time.monotonic(), time.process_time(), len(sys.modules)
    names = sorted(config.agents)
    try:
        built = await _in_threads(config, models, extra, names)
        on_loop = time.monotonic()
        await _start_loop_worker()
    except Exception as e:  # never the daemon's failure: the first run does it instead
        log.warning("warm-up failed: %s: %s", type(e).__name__, e)
        return
    log.info("warmed up: %s", ", ".join(built) or "no model to build",
             extra={"models": built, "agents": len(names), "seconds": round(time.monotonic() - started, 3),
                    "on_loop_seconds": round(time.monotonic() - on_loop, 3),
                    "cpu_seconds": round(time.process_time() - cpu, 3), "modules": len(sys.modules) - modules})


async def _in_threads(config: LoadedConfig, models: ModelCache, extra: Sequence[Callable[[LoadedConfig], None]],
                      names: list[str]) -> list[str]:
    """The warm-up's work off the loop, with `models.warming` set meanwhile; returns the models built."""
    warming = models.warming = asyncio.Event()
    try:
        built = await models.warm(config)
        for warm in extra:
            await asyncio.to_thread(warm, config)
        fresh = [name for name in names if name not in _rehearsed]
        if fresh:
            await asyncio.to_thread(_rehearse_in_thread, fresh)
            _rehearsed.update(fresh)  # on the loop, after the thread: only a rehearsal that ended counts
        return built
    finally:  # the runs that came meanwhile go on (after a failed warm-up they do its work themselves)
        models.warming = None
        warming.set()


def _rehearse_in_thread(names: list[str]) -> None:
    """`_rehearse` on a loop of this thread's own. The coroutine is made in the thread, once the loop is:
    neither a stop before the thread starts nor a loop that cannot be made leaves one unawaited."""
    with asyncio.Runner(loop_factory=_thread_loop) as runner:
        runner.get_loop()
        runner.run(_rehearse(names))


def _thread_loop() -> asyncio.AbstractEventLoop:
    """The rehearsal thread's loop, or the OSError of making it (out of descriptors), with nothing left behind.

    The selector is made here, not by the loop, so that a loop that cannot be made closes it now."""
    selector = selectors.DefaultSelector()
    try:
        return _ThreadLoop(selector)
    except BaseException:
        selector.close()
        raise


class _ThreadLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, less the traceback of one whose constructor failed.

    Out of descriptors, the constructor's self-pipe (a socketpair) fails with EMFILE; the half-built loop's
    `__del__` then closes it, reaches attributes never set and raises AttributeError into the unraisable hook:
    "Exception ignored in ... Traceback" on stderr, for a failure the warm-up already logs in one line. Such a
    loop never ran and owns nothing (the selector is `_thread_loop`'s), so its `__del__` is skipped."""

    _built = False  # set by a constructor that returned

    def __init__(self, selector: selectors.BaseSelector) -> None:
        super().__init__(selector)
        self._built = True

    def __del__(self) -> None:
        if self._built:
            super().__del__()


async def _start_loop_worker() -> None:
    """Start this loop's worker thread, as the first synchronous instructions function a run calls would
    (pydantic-ai runs one through anyio's `to_thread.run_sync`, whose worker threads are each loop's own)."""
    await anyio.to_thread.run_sync(_instructions)


async def _rehearse(names: list[str]) -> None:
    """One run per agent name, as the runner drives a turn (`TurnAgent`, `run_agent`), on the offline script."""
    for name in names:
        agent = TurnAgent(Agent(None, deps_type=Turn, output_type=[str, DeferredToolRequests], name=name,
                                instructions="A rehearsal."),
                          model=offline_model(_script, "warm-up"), model_settings=None,
                          capabilities=[Capability(instructions=_instructions, toolsets=[FunctionToolset([echo])])])
        await run_agent(agent, "warm up", deps=None, usage_limits=UsageLimits(request_limit=3),
                        timeout=REHEARSAL_SECONDS)


def echo(text: str) -> str:
    """Return `text`: the rehearsal's tool call.

    Args:
        text: what comes back.
    """
    return text


def _instructions() -> str:  # synchronous, as the clock's: pydantic-ai runs it in the loop's worker thread
    return "Call echo once, then answer."


async def _script(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """Call the tool first; once its result is in, answer in two pieces."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield "warmed "
        yield "up"
        return
    yield {0: DeltaToolCall(name=echo.__name__, json_args=json.dumps({"text": "warm"}))}
