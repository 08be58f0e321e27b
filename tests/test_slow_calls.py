"""Slow tool calls (native-tools "Slow calls"): one warning with the stable id, the duration and
whether it failed, never the arguments or output, and a count in /metrics; fast calls and a call
cut short by Stop are not reported. The tools move the gateway's clock, so no test waits."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from capabilities.registry import REGISTRY, BuildContext, CapabilityDecl, ToolDecl, register, simple
from gateway.clock import ManualClock
from gateway.messages import ChatKind

from .capabilities.scripted import say_calls
from .capabilities.support import Account, Place, World, agent, slack_binding
from .conftest import running_gateway, write_config
from .fakes.chat import fake_platforms

CLOCK = ManualClock()
SECRET_ARG = "argument-that-must-not-be-logged"
SECRET_OUT = "output-that-must-not-be-logged"
ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)


def _slow_tools(ctx: BuildContext) -> Any:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def crunch(data: str) -> str:
        """Crunch numbers for a long time.

        Returns:
            The result.
        """
        CLOCK.advance(45)
        return SECRET_OUT

    @toolset.tool_plain
    def flaky(data: str) -> str:
        """Fail after a long time.

        Returns:
            Nothing: it fails.
        """
        CLOCK.advance(31)
        raise ModelRetry("the backend timed out")

    @toolset.tool_plain
    def quick(data: str) -> str:
        """Answer at once.

        Returns:
            The answer.
        """
        CLOCK.advance(2)
        return "ok"

    return simple(toolsets=[toolset])


if "test_slow" not in REGISTRY:
    register(CapabilityDecl(id="test_slow", name="Slow tools", category="test", build=_slow_tools,
                            tools=(ToolDecl("crunch"), ToolDecl("flaky"), ToolDecl("quick"))))


async def test_a_slow_call_is_one_warning_with_its_id_and_a_count_never_its_arguments(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = write_config(tmp_path, agents={"assistant": agent({"id": "test_slow"}, model="scripted")},
                       bindings={"slack": slack_binding()})
    caplog.set_level(logging.DEBUG)
    with fake_platforms("slack"):
        async with running_gateway(cfg, clock=CLOCK) as gw:
            w = World(gw)
            await w.say(ALICE, DM, say_calls(("crunch", {"data": SECRET_ARG}), ("quick", {"data": "x"}),
                                             ("flaky", {"data": SECRET_ARG})))
            metrics = gw.metrics.render().decode()
    slow = [r for r in caplog.records if r.getMessage().startswith("slow tool call")]
    assert [r.getMessage() for r in slow] == ["slow tool call: crunch took 45.0 s",
                                               "slow tool call: flaky took 31.0 s and failed"]
    assert slow[0].tool == "crunch" and slow[0].agent == "assistant" and slow[0].failed is False  # type: ignore[attr-defined]
    everything = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert SECRET_ARG not in everything and SECRET_OUT not in everything
    assert 'gateway_slow_tool_calls_total{failed="false",tool="crunch"} 1.0' in metrics
    assert 'gateway_slow_tool_calls_total{failed="true",tool="flaky"} 1.0' in metrics
    assert 'tool="quick"' not in metrics


async def test_a_call_cut_short_is_not_reported() -> None:
    from gateway.runs.slow_calls import SlowCalls

    reported: list[Any] = []
    slow = SlowCalls(1.0, CLOCK, lambda *a: reported.append(a))

    async def handler(args: dict[str, Any]) -> Any:
        CLOCK.advance(60)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await slow.wrap_tool_execute(None, call=None, tool_def=None, args={}, handler=handler)  # type: ignore[arg-type]
    assert reported == []
