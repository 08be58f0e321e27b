"""Slack shows what a run is doing: the assistant thread's status names the tool while it runs.

The real daemon with a Slack binding against the fake Slack; the model calls a tool (not
gated here), then answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.clock import ManualClock
from gateway.llm import register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support.gated_git import CAPABILITY, RAN

from .conftest import eventually

MODEL = "slack-e2e-status"


def _model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if not any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            yield {0: DeltaToolCall(name="delete_branch", json_args=json.dumps({"branch": "old"}), tool_call_id="c1")}
            return
        yield "Deleted."

    return FunctionModel(stream_function=stream)


def config(tmp_path: Path, fake: FakeSlack) -> Path:
    register_model(MODEL, _model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    agent = {"name": "Tools", "model": MODEL, "capabilities": [{"id": CAPABILITY, "approval": "never"}]}
    return write_config(tmp_path / "config", agents={"assistant": agent},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


async def test_the_thread_status_names_the_tool_while_it_runs(tmp_path: Path, fake_slack: FakeSlack) -> None:
    RAN.clear()
    async with running_gateway(config(tmp_path, fake_slack), clock=ManualClock()) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old")
        await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.text == "Deleted."])
        statuses = [(c.args["thread_ts"], c.args["status"]) for c in fake_slack.calls_to("assistant.threads.setStatus")]
        assert (root.ts, "using delete_branch…") in statuses
        assert statuses[0] == (root.ts, "is thinking…"), "the first sign comes before the tool's status"
        assert RAN == ["old"] and fake_slack.throttled == []
