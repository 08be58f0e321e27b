"""code_execution: `run_python`, a small Python program run in Pydantic's Monty sandbox.

Monty (`pydantic-monty`) is a Python interpreter written in Rust that runs in a worker
subprocess of its own. A program there has no filesystem (`open` and `pathlib` I/O are refused),
no network (`socket`, `urllib`, `http` do not exist), no environment (`os.getenv` is refused) and
no way out (`__import__`, `os.system`, `subprocess` do not exist); only a set of pure standard
modules imports. So time and memory are the only limits worth setting, per agent:
`timeout_secs` (default 10, at most 120) and `max_memory_mb` (default 256, 16-4096), which
Monty enforces itself (`max_feed_duration_secs`, `max_memory`).

Each call runs in a fresh session and forgets: nothing carries over to the next call or the next
turn (the `sandbox` capability is what remembers). That is why this is not pydantic-ai-harness's
`CodeMode`: code mode keeps a REPL across calls and exposes the agent's own tools inside the
sandbox, where run_python must reach nothing. The error handling follows code mode's reading of
Monty's errors (which limit tripped is known only from Monty's wording, kept in `_LIMITS`; a Rust
panic surfaces as pyo3's PanicException, matched by name as harness's `is_sandbox_panic` does).

What the model gets back: what the program printed and the value of its last expression, each
clipped at `OUTPUT_LIMIT` characters with a marker saying how much was left out. Trouble takes the
seed's three shapes: a mistake in the code (a SyntaxError, a NameError, an exception it raised,
a limit it ran into) is a retry prompt that says what happened, with the traceback and which
limit with its value; a refusal (a file, the network, the environment, a module that is not
there) is text, so the model stops looking for a way round it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_monty import AsyncMonty, MontyCrashedError, MontyRuntimeError, MontySyntaxError, MontyTypingError

from gateway.runs.turn import Turn

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

OUTPUT_LIMIT = 10_000  # characters of printed output, and again of the last expression's value
MODULES = ("math", "json", "csv", "re", "datetime", "time", "random", "collections", "itertools", "functools",
           "decimal", "dataclasses", "bisect", "base64", "hashlib", "copy", "typing", "unicodedata")
# Monty reports which limit stopped a program only in words; see code mode's _SANDBOX_LIMIT_MARKERS.
_LIMITS = {"time limit exceeded": "timeout_secs", "memory limit exceeded": "max_memory_mb"}
_REFUSED = ("PermissionError", "ModuleNotFoundError")
_REFUSED_PHRASE = "is not supported in this environment"  # os.getenv and friends


class RunPythonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout_secs: float = Field(default=10, gt=0, le=120,
                                description="Seconds one program may run before it is stopped")
    max_memory_mb: int = Field(default=256, ge=16, le=4096,
                               description="Megabytes of memory one program may use before it is stopped")
    wall_clock_secs: float = Field(default=30, gt=0, le=300,
                                   description="Seconds one call may take in all, waiting and sleeping included "
                                               "(timeout_secs counts the program's running time only)")


class _Clipped:
    """Collects printed text up to a limit and counts what is left out (Monty's own collector raises instead)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.parts, self.kept, self.dropped = limit, [], 0, 0

    def __call__(self, stream: str, text: str) -> None:
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))

    @property
    def text(self) -> str:
        return clip("".join(self.parts), self.limit, self.dropped)


def clip(text: str, limit: int = OUTPUT_LIMIT, dropped: int = 0) -> str:
    """`text` cut at `limit` characters, with a marker saying how many more there were."""
    if len(text) > limit:
        dropped += len(text) - limit
        text = text[:limit]
    if dropped:
        text += f"\n…[clipped: {dropped:,} more characters not shown; print less, or return a summary]"
    return text


def _answer(printed: str, value: Any) -> str:
    parts = []
    if printed:
        parts.append(f"Printed:\n{printed}")
    if value is not None:
        parts.append(f"Value of the last expression:\n{clip(repr(value))}")
    if not parts:
        return ("The program ran, printed nothing, and its last line was not an expression with a value. "
                "End the code with an expression (e.g. `total`) or print what you need.")
    return "\n\n".join(parts)


async def _run(code: str, config: RunPythonConfig, printed: _Clipped) -> Any:
    limits = {"max_feed_duration_secs": config.timeout_secs, "max_memory": config.max_memory_mb * 1024 * 1024}
    # A fresh worker per call: a program computes and forgets. The watchdog kills a worker that
    # outlives the sandbox's own time limit (Monty's limit fires first; this is the backstop).
    async with AsyncMonty(max_processes=1, request_timeout=config.timeout_secs + 10) as pool:
        async with pool.checkout(limits=limits) as session:  # type: ignore[arg-type]
            return await session.feed_run(code, print_callback=printed)


_DESCRIPTION = """Run a small Python program in a sandbox and get back what it printed and the value of its last line.

    Use it to compute: add up or average numbers, count, sort, parse CSV or JSON text you were
    given, do date arithmetic, check a calculation. Paste the data into the code itself (e.g. a
    CSV as a string parsed with the csv module): the program has no files, no network and no
    environment variables, and nothing carries over between calls. To keep a file across turns,
    use the workspace tools (write_file) if you have them. Only these modules import: math, json,
    csv, re, datetime, time, random, collections, itertools, functools, decimal, dataclasses,
    bisect, base64, hashlib, copy, typing, unicodedata; no third-party packages (no numpy, pandas).
    The program is stopped after {timeout} seconds of running or {wall} seconds in all
    (sleeping and waiting count), or past {memory} MB of memory (this agent's limits).

    Args:
        code: The whole program, as Python source. End it with an expression (e.g. `total`) to get
            its value back; print() anything else you need. Required.

    Returns:
        What the program printed and the repr of its last expression's value, under the headings
        "Printed" and "Value of the last expression"; each is clipped at 10,000 characters and
        marked "…[clipped, N more characters not shown …]". An exception in the code comes back as an error with its traceback (and what
        was printed before it) so you can fix the code and call again; a program stopped at a
        limit says which limit and its value. Reaching for a file, the network, the environment or
        a module that is not there is refused with a sentence saying so.
"""


def toolset(config: RunPythonConfig) -> FunctionToolset[Turn]:
    """run_python with this agent's limits, which its description states."""

    async def run_python(ctx: RunContext[Turn], code: str) -> str:
        printed = _Clipped(OUTPUT_LIMIT)
        try:
            # Monty's limit counts the program's running time: a program that sleeps or waits is
            # stopped by the wall clock instead (docs/security.md, "Time limits").
            async with asyncio.timeout(config.wall_clock_secs):
                value = await _run(code, config, printed)
        except TimeoutError:
            return trouble(ctx, "mistake", _limit_text("wall_clock_secs", config, printed))
        except (MontySyntaxError, MontyTypingError) as e:
            return trouble(ctx, "mistake", f"The code does not parse, so nothing ran:\n{e.display()}")
        except MontyRuntimeError as e:
            return _runtime_error(ctx, e, printed, config)
        except MontyCrashedError as e:
            if e.timed_out:
                return trouble(ctx, "mistake", _limit_text("timeout_secs", config, printed))
            return trouble(ctx, "mistake", f"The program crashed the sandbox ({e}). Make it do less at once and call again.")
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            if type(e).__name__ == "PanicException":  # pyo3's, not importable: see harness's is_sandbox_panic
                return trouble(ctx, "mistake", "The program aborted the sandbox. Revise the code and call again.")
            if not isinstance(e, Exception):
                raise
            return trouble(ctx, "transient", f"the Python sandbox could not be started ({type(e).__name__}: {e}); try again")
        return _answer(printed.text, value)

    run_python.__doc__ = _DESCRIPTION.format(timeout=f"{config.timeout_secs:g}", wall=f"{config.wall_clock_secs:g}",
                                             memory=config.max_memory_mb)
    return FunctionToolset([run_python])


def _before(printed: _Clipped) -> str:
    text = printed.text
    return f"\n\nPrinted before it stopped:\n{text}" if text else ""


def _limit_text(limit: str, config: RunPythonConfig, printed: _Clipped) -> str:
    if limit == "timeout_secs":
        what = f"ran past the time limit (timeout_secs = {config.timeout_secs:g} seconds)"
    elif limit == "wall_clock_secs":
        what = (f"was still going after the wall-clock limit (wall_clock_secs = {config.wall_clock_secs:g} seconds, "
                "which counts sleeping and waiting too)")
    else:
        what = f"used more than the memory limit (max_memory_mb = {config.max_memory_mb} MB)"
    return (f"The program was stopped: it {what}. Make it do less work or hold less data at once "
            f"(a smaller input, a generator instead of a list), then call again.{_before(printed)}")


def _runtime_error(ctx: RunContext[Turn], e: Any, printed: _Clipped, config: RunPythonConfig) -> str:
    message = e.display(format="msg")
    kind = type(e.exception()).__name__
    for marker, limit in _LIMITS.items():
        if marker in message and kind in ("TimeoutError", "MemoryError"):
            return trouble(ctx, "mistake", _limit_text(limit, config, printed))
    if kind in _REFUSED or _REFUSED_PHRASE in message:
        return trouble(ctx, "refusal", (
            f"Refused: {kind}: {message}. run_python has no files, no network and no environment, and only "
            f"these modules import: {', '.join(MODULES)}. Put the data in the code itself, or answer without "
            f"running code.{_before(printed)}"))
    return trouble(ctx, "mistake", f"The program raised an exception:\n{clip(e.display())}{_before(printed)}\n"
                                   "Fix the code and call run_python again.")


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    assert isinstance(ctx.config, RunPythonConfig)
    return simple(toolsets=[toolset(ctx.config)])


register(CapabilityDecl(
    id="code_execution",
    name="Run Python",
    category="analysis",
    tools=(ToolDecl("run_python", summary="Run a small Python program to compute something."),),
    build=build,
    config_model=RunPythonConfig,
    scopes=("code:execute",),
    shared=True,  # each call runs in a fresh Monty session of the config's limits: nothing is kept between calls
    description=(
        "run_python: a small Python program in Pydantic's Monty sandbox, with no files, no network and no "
        "environment; stopped at timeout_secs and max_memory_mb. Computes and forgets."
    ),
))
