"""Slack shows a run as it works: the assistant thread's status names a tool while it runs, and
an assistant thread streams natively (chat.startStream / appendStream / stopStream), falling back
to post + edit where the workspace answers unknown_method.

The real daemon with a Slack binding against the fake Slack.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.clock import ManualClock
from gateway.runs.llm import register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.support.gated_git import CAPABILITY, RAN

from .conftest import eventually
from .test_e2e import ScriptedModel, scripted  # noqa: F401 - the fixture
from .test_e2e import config as streaming_config

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


# --- native streaming ------------------------------------------------------------------------


async def _dm_thread_turns(tmp_path: Path, fake: FakeSlack, scripted: ScriptedModel, turns: int) -> list[PostedMessage]:
    """Ada asks `turns` times in one assistant thread of her DM; the bot's messages there."""
    async with running_gateway(streaming_config(tmp_path, fake), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = fake.user_posts("D0ADA", "U0ADA", "New assistant thread")  # the thread Slack opens
        for n in range(1, turns + 1):
            await fake.say("D0ADA", "U0ADA", f"question {n}", thread_ts=root.ts)
            await fake.wait_for(lambda n=n: len(fake.bot_messages("D0ADA")) >= n
                                and fake.bot_messages("D0ADA")[-1].text.endswith(f"turn {n}.")
                                and not fake.bot_messages("D0ADA")[-1].streaming)
        return fake.bot_messages("D0ADA")


async def test_an_assistant_thread_streams_natively(tmp_path: Path, fake_slack: FakeSlack,
                                                    scripted: ScriptedModel) -> None:
    (reply,) = await _dm_thread_turns(tmp_path, fake_slack, scripted, 1)
    assert reply.text == "**Hello** there, turn 1."  # Markdown, which Slack renders as it streams
    # The first piece is shown alone when the first draft's hold ends (the model took 2 s more).
    assert reply.appends[0] == "**Hello**" and "".join(reply.appends) == reply.text and len(reply.appends) >= 2
    assert not fake_slack.calls_to("chat.update")
    # The one post is the Stop control beside the stream (a stream takes no blocks), deleted once it ended.
    [control] = fake_slack.deleted
    assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["Stop"] and control.text == "Stop"
    assert [c.method for c in fake_slack.calls if c.method.endswith("Stream")][-1] == "chat.stopStream"
    assert fake_slack.throttled == []


async def test_without_native_streaming_replies_are_posted_and_edited_and_that_is_remembered(
        tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    fake_slack.native_streaming = False  # an older workspace: unknown_method
    first, second = await _dm_thread_turns(tmp_path, fake_slack, scripted, 2)
    assert (first.text, second.text) == ("*Hello* there, turn 1.", "*Hello* there, turn 2.")
    assert len(fake_slack.calls_to("chat.startStream")) == 1, "tried once for the binding, then remembered"
    assert fake_slack.calls_to("chat.update") and fake_slack.throttled == []
