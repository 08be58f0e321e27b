"""Slow tool calls (native-tools "Slow calls"), for every run and delegate the runner builds.

A call that takes at least `limits.slow_tool_seconds` (default 30 s) is one warning with the
tool's stable id, its duration and whether it failed, never its arguments or output, and one
count in `/metrics`. A call cut short by Stop is not reported: its duration is the Stop's.
Built on pydantic-ai's `wrap_tool_execute` hook, so it sees every toolset's calls (capabilities,
MCP, channel tools) without wrapping any of them. The shared Agents carry it as `ToolCalls`
(gateway/runs/tool_calls.py), one capability with the extensions' tool wrappers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from gateway.clock import Clock
from gateway.runs.turn import Turn

Report = Callable[[Turn, str, float, bool], None]  # (turn, stable tool id, seconds, failed)


@dataclass
class SlowCalls(AbstractCapability[Turn]):
    threshold: float
    clock: Clock
    report: Report

    async def wrap_tool_execute(self, ctx: RunContext[Turn], *, call: ToolCallPart, tool_def: ToolDefinition,
                                args: dict[str, Any], handler: Callable[[dict[str, Any]], Any]) -> Any:
        started = self.clock.monotonic()
        try:
            result = await handler(args)
        except asyncio.CancelledError:
            raise  # Stop (or shutdown): not the tool's own time
        except Exception:
            self._seen(ctx, tool_def.name, started, failed=True)
            raise
        self._seen(ctx, tool_def.name, started, failed=False)
        return result

    def _seen(self, ctx: RunContext[Turn], name: str, started: float, *, failed: bool) -> None:
        took = self.clock.monotonic() - started
        if took >= self.threshold:
            info = ctx.deps.tools.get(name)
            self.report(ctx.deps, info.stable_id if info is not None else name, took, failed)
