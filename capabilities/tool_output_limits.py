"""tool_output_limits: an oversized tool return is reduced once, when it is produced, and the reduction persists.

The reduction is pydantic-ai-harness's `ToolOutputLimits` (its hook runs for every tool of the run,
MCP tools included). What is ours:

- the config: one action at one threshold (the seed's form), turned into the harness's bands:
  spill → truncate, summarize → spill → truncate, truncate; never a silent drop;
- the spill store: `RunSpills`, the harness's `OverflowStore` over `Turn.state` (CapabilityState
  rows, scope = the run's own id from `Turn.scope`, a delegate's its own), so a spill is visible to every replica sharing the database and a
  handle from another run reads nothing. The harness's default `LocalFileStore` is one host's temp
  directory that keeps files forever, which is the opposite of both rules;
- the lifetime: the run's spills are deleted when the run ends (`wrap_run`), except when it parks for
  an approval — a parked run is the same run, resumed later from its stored messages, which hold the
  handles. A spill larger than `MAX_SPILL_BYTES` is refused and falls back to truncation;
- the read tool's description (what it does, its arguments with defaults and ceilings, what comes back).
"""

from __future__ import annotations

import base64
import copy
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_ai import DeferredToolRequests
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext, Tool, ToolDefinition
from pydantic_ai.toolsets import FunctionToolset, PreparedToolset
from pydantic_ai_harness.tool_output_limits import (
    READ_TOOL_NAME,
    Band,
    Spill,
    Summarize,
    ToolOutputLimits,
    Truncate,
    TruncationStrategy,
)
# The harness's bounded slicing of a spill (its read tool keeps the store it was made with; ours reads the run's).
from pydantic_ai_harness.tool_output_limits._capability import _read_slice

from gateway.store.capability_state import CapabilityState
from gateway.runs.turn import Turn

from .tool_text import tool_text
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, template_fields

log = logging.getLogger("gateway.capabilities.tool_output_limits")

CAPABILITY = "tool_output_limits"
MAX_SPILL_BYTES = 8 * 1024 * 1024  # one spill; above it the store refuses and the return is truncated


class ToolOutputLimitsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["spill", "truncate", "summarize"] = Field(
        default="spill", description="spill (lossless, read back with read_tool_result), truncate (lossy, free) or "
                                     "summarize (one model call)")
    threshold: int = Field(default=10_000, ge=100, le=10_000_000,
                           description="size at or above which a return is reduced (characters, or tokens with "
                                       "over_tokens)")
    over_tokens: bool = Field(default=False, description="measure the threshold in estimated tokens, not characters")
    max_chars: int = Field(default=4_000, ge=100, le=1_000_000,
                           description="characters kept when a return is truncated, or a spill falls back to one")
    truncation_strategy: Literal["head", "tail", "head_tail"] = Field(
        default="head_tail", description="which end(s) of the return to keep when truncating")
    strip_ansi: bool = Field(default=False, description="strip terminal colour codes before measuring and reducing")
    summary_prompt: str | None = Field(
        default=None, description="what the summarising model is told; must contain {tool_name} and {output} "
                                  "(default: the library's own)")

    @field_validator("summary_prompt")
    @classmethod
    def _placeholders(cls, v: str | None) -> str | None:
        if v is None:
            return v
        fields = template_fields(v, "summary_prompt")
        missing = {"tool_name", "output"} - fields
        if missing:
            raise ValueError("summary_prompt must contain {tool_name} and {output}; it lacks "
                             + " and ".join(f"{{{m}}}" for m in sorted(missing)))
        unknown = fields - {"tool_name", "output"}
        if unknown:
            raise ValueError("summary_prompt may use only {tool_name} and {output}; it also names "
                             + ", ".join(f"{{{u}}}" for u in sorted(unknown)) + " (write a literal brace as {{ or }})")
        return v


class SpillRefused(OSError):
    """The store would not keep this spill; the harness then truncates instead."""


@dataclass
class RunSpills:
    """The harness's `OverflowStore` over CapabilityState rows scoped to one of our runs (`Turn.scope`).
    `borrowed`: the scope is a parent's, lent to this delegate; its spills are the parent's to discard."""

    state: CapabilityState
    run_id: str
    borrowed: bool = False

    async def write(self, key: str, data: bytes) -> str:
        if len(data) > MAX_SPILL_BYTES:
            raise SpillRefused(f"{len(data)} bytes is over the {MAX_SPILL_BYTES}-byte spill ceiling")
        try:
            text = data.decode("utf-8")
            value = "b:" + base64.b64encode(data).decode() if "\x00" in text else "t:" + text
        except UnicodeDecodeError:
            value = "b:" + base64.b64encode(data).decode()
        try:
            await self.state.put(CAPABILITY, self.run_id, key, value)
        except Exception as e:  # a database refusing the row is a refusal, not a lost return
            raise SpillRefused(str(e)) from e
        return key

    async def read(self, handle: str) -> bytes:
        value = await self.state.get(CAPABILITY, self.run_id, handle)
        if value is None:
            raise FileNotFoundError(handle)
        return value[2:].encode() if value.startswith("t:") else base64.b64decode(value[2:])

    async def discard(self) -> int:
        return await self.state.delete(CAPABILITY, self.run_id)


READ_DESCRIPTION = tool_text(
    "Read part of a tool result that was too large to show whole.",
    "Use it when an earlier tool result says \"[Tool output too large ...; stored to handle '...']\": pass that "
    "exact handle. Page through with offset and limit, read the end with from_end, or keep only the lines "
    "containing some text with pattern. The result is kept only until this reply is finished; to see it again "
    "in a later reply, run the original tool again.",
    "A header \"[handle ...: N matching line(s); showing M]\" followed by the lines. At most 1,000 lines and "
    "50,000 characters come back per call (\"output capped\" in the header says the characters were cut). "
    "An unknown or expired handle returns a line saying so.",
)
READ_ARGS = {
    "handle": "The handle string from the \"stored to handle\" line, exactly.",
    "offset": "How many (matching) lines to skip; default 0.",
    "limit": "How many lines to return; default 200, at most 1,000.",
    "from_end": "Count offset and limit from the last line instead of the first (to read the tail); default false.",
    "pattern": "Only lines containing this literal text (case-sensitive, not a regular expression); default none.",
}


@dataclass
class _Describe:
    async def __call__(self, ctx: Any, tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        return [_described(t) if t.name == READ_TOOL_NAME else t for t in tool_defs]


def _described(tool: ToolDefinition) -> ToolDefinition:
    schema = copy.deepcopy(tool.parameters_json_schema)
    for name, prop in schema.get("properties", {}).items():
        if name in READ_ARGS:
            prop["description"] = READ_ARGS[name]
    return replace(tool, description=READ_DESCRIPTION, parameters_json_schema=schema)


def spills_of(turn: Turn) -> RunSpills:
    """The run's spill store: its own run's scope, or the parent's where lent (share_with_delegates)."""
    return RunSpills(turn.state, turn.scope(CAPABILITY, "run"), borrowed=turn.owner(CAPABILITY) is not turn)


@dataclass
class RunToolOutputLimits(ToolOutputLimits[Turn]):
    """The harness's reduction with our store, our description, and the run's spills gone when it ends.

    Built once for the config (`shared`): the built one has no store; each run's copy (`for_run`) writes
    and discards the run's own spills (`spills_of` its deps), and the read tool, made once, reads the
    calling run's. The harness's read tool keeps the store it was made with, so it is not used."""

    _reader: Any = field(default=None, init=False, repr=False, compare=False)

    async def for_run(self, ctx: RunContext[Turn]) -> RunToolOutputLimits:
        clone = copy.copy(await super().for_run(ctx))
        clone.store = clone._store = spills_of(ctx.deps)
        return clone

    def get_toolset(self) -> Any:
        if self._reader is None:  # copied into each run's copy: made once, not per run
            self._reader = PreparedToolset(FunctionToolset([Tool(_read_tool_result, name=READ_TOOL_NAME)]), _Describe())
        return self._reader

    async def wrap_run(self, ctx: RunContext[Turn], *, handler: Any) -> Any:
        parked = False
        try:
            result = await handler()
            parked = isinstance(result.output, DeferredToolRequests)
            return result
        finally:
            if not parked and isinstance(self.store, RunSpills) and not self.store.borrowed:
                try:
                    await self.store.discard()
                except Exception as e:  # the run's outcome stands; an orphan row is logged, not raised
                    log.warning("could not delete the spills of run %s: %s", self.store.run_id, e)


async def _read_tool_result(ctx: RunContext[Turn], handle: str, offset: int = 0, limit: int = 200,
                            from_end: bool = False, pattern: str | None = None) -> str:
    """Read a slice of a spilled tool result (the harness's slicing, over the calling run's spills).

    Args:
        handle: The handle from the overflowed tool return.
        offset: Number of matching lines to skip from the start (or end). Must be >= 0.
        limit: Maximum number of lines to return (>= 1; clamped to a built-in cap).
        from_end: Count `offset`/`limit` from the end of the result.
        pattern: Optional literal substring; only lines containing it are returned.
    """
    return await _read_slice(spills_of(ctx.deps), handle, offset, limit, from_end, pattern)


def _not_the_read_tool(ctx: RunContext[Turn], tool_def: ToolDefinition) -> bool:
    """The harness exempts `read_tool_result` by name; a rename must not make its pages spill again."""
    info = ctx.deps.tools.get(tool_def.name)
    return not (info is not None and info.capability == CAPABILITY and info.stable_id == READ_TOOL_NAME)


def bands_for(config: ToolOutputLimitsConfig) -> list[Band]:
    truncate = Truncate(strategy=TruncationStrategy(config.truncation_strategy), max_chars=config.max_chars)
    if config.action == "truncate":
        action: Any = truncate
    elif config.action == "spill":
        action = Spill(then=truncate)
    else:
        action = Summarize(then=Spill(then=truncate))
    return [Band(over=config.threshold, action=action)]


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    config = ctx.config
    assert isinstance(config, ToolOutputLimitsConfig)
    extra: dict[str, Any] = {"summary_prompt": config.summary_prompt} if config.summary_prompt else {}
    return RunToolOutputLimits(bands=bands_for(config), tool_filter=_not_the_read_tool,
                               over_tokens=config.over_tokens, strip_ansi=config.strip_ansi, **extra)


register(CapabilityDecl(
    id=CAPABILITY, name="Tool output limits", category="utility",
    tools=(ToolDecl(READ_TOOL_NAME, summary="Read a slice of a tool result that was too large to show whole."),),
    build=build, config_model=ToolOutputLimitsConfig,
    # The bands are the config's; the spills are the run's, written, read and discarded through the run's
    # deps by its own copy (`RunToolOutputLimits.for_run`) and the read tool, never by the built one.
    shared=True,
    description="Reduces an oversized tool return (MCP tools included) once, when it is produced: spilled to a "
                "store kept for the run and paged back with read_tool_result, truncated, or summarised.",
))
