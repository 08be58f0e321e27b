"""The first sign of work: Slack's assistant status ("is thinking…") goes out as soon as a message
is stored and admitted, not when its run gets to start, and once per message, not twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.clock import Clock
from gateway.runs.llm import REGISTERED, register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack

from .conftest import eventually

MODEL = "slack-first-sign"


class _Held:
    """A model whose answers wait for `release`; `asked` counts the runs that reached it."""

    def __init__(self) -> None:
        self.release, self.asked = asyncio.Event(), 0

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.asked += 1
        await self.release.wait()
        yield "Done."


def _config(tmp_path: Path, fake_slack: FakeSlack, held: _Held) -> Path:
    """A Slack binding on the held model, one run at a time (a second message's run must wait)."""
    register_model(MODEL, lambda: FunctionModel(stream_function=held.stream, model_name=MODEL))
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": fake_slack.api_url}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "A", "model": MODEL}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
        gateway={"limits": {"concurrent_runs": 1}},
    )


async def test_status_shows_before_the_run_can_start_and_once(tmp_path: Path, fake_slack: FakeSlack) -> None:
    held = _Held()
    cfg = _config(tmp_path, fake_slack, held)  # one run at a time: the second message's run must wait
    try:
        async with running_gateway(cfg) as gw:
            await eventually(lambda: gw.adapters["acme"].health().connected)
            first, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> first")
            await eventually(lambda: held.asked == 1)
            second, _ = await fake_slack.say("C0GEN", "U0BOB", "<@U0BOT> second")

            def status_for(root_ts: str) -> list[object]:
                return [c for c in fake_slack.calls_to("assistant.threads.setStatus") if c.args["thread_ts"] == root_ts]

            # The second thread shows the status while its run cannot start (the first holds the only slot).
            await eventually(lambda: status_for(second.ts))
            assert held.asked == 1 and not fake_slack.bot_messages()
            held.release.set()
            await eventually(lambda: len(fake_slack.bot_messages()) == 2 and held.asked == 2)
            # One status call per message: the run's own typing loop did not repeat the first sign.
            assert len(status_for(first.ts)) == 1 and len(status_for(second.ts)) == 1
    finally:
        REGISTERED.pop(MODEL, None)


class _Ahead(Clock):
    """The real clock, `later` seconds ahead on the monotonic side once a test says so."""

    later = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.later


async def test_a_message_that_waited_long_in_the_queue_gets_no_second_status(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    """Slack keeps a thread's status for two minutes: a run that starts long after its message
    arrived (a backlog) does not send the status again (Telegram's typing, 5 s, is renewed)."""
    clock = _Ahead()  # the gateway's clock: the wait in the queue, without waiting it out
    held = _Held()
    cfg = _config(tmp_path, fake_slack, held)
    try:
        async with running_gateway(cfg, clock=clock) as gw:
            await eventually(lambda: gw.adapters["acme"].health().connected)
            await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> first")
            await eventually(lambda: held.asked == 1)
            second, _ = await fake_slack.say("C0GEN", "U0BOB", "<@U0BOT> second")
            calls = lambda: [c for c in fake_slack.calls_to("assistant.threads.setStatus")  # noqa: E731
                             if c.args["thread_ts"] == second.ts]
            await eventually(calls)
            clock.later = 30.0  # the second message has waited 30 s behind the first when its run starts
            held.release.set()
            await eventually(lambda: len(fake_slack.bot_messages()) == 2 and held.asked == 2)
            assert len(calls()) == 1, "the status shown on arrival still showed: not sent again"
    finally:
        REGISTERED.pop(MODEL, None)
