"""view_image: an image shared on an earlier turn is looked at again, fetched anew from Slack with the
bot token (never kept in the gateway's store); a file that is not one of the four image types is
refused by name. The real daemon and slack_sdk against the fake Slack."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.llm import register_model
from tests.adapters.slack.conftest import eventually, fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.support.files_model import CSV, PNG

SEEN: list[list[ModelMessage]] = []


async def _model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """Turn one: "Got it."; a prompt "look again at X" calls view_image(X) once, then answers."""
    SEEN.append(messages)
    last = messages[-1]
    prompt = next((p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)), "")
    if prompt.startswith("look again at "):
        name = prompt.removeprefix("look again at ")
        yield {0: DeltaToolCall(name="view_image", json_args=json.dumps({"names": [name]}))}
        return
    yield "Got it."


def config(tmp_path: Path, fake: FakeSlack) -> Path:
    register_model("view-image", lambda: FunctionModel(stream_function=_model, model_name="view-image"))
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake.api_url}
    return write_config(tmp_path / "config",
                        agents={"assistant": {"name": "Eyes", "model": "view-image", "capabilities": [{"id": "view_image"}]}},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


def _tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


async def test_an_image_shared_earlier_is_fetched_again_and_shown_to_the_model(tmp_path: Path,
                                                                              fake_slack: FakeSlack) -> None:
    SEEN.clear()
    async with running_gateway(config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        files = [fake_slack.add_file("chart.png", "image/png", PNG), fake_slack.add_file("q3.csv", "text/csv", CSV)]
        await fake_slack.say("D0ADA", "U0ADA", "here", files=files)
        await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("D0ADA") if m.text == "Got it."])
        assert len(fake_slack.file_fetches) == 2  # read once, for the turn it was shared on

        await fake_slack.say("D0ADA", "U0ADA", "look again at chart.png")
        await eventually(lambda: _tool_returns(SEEN[-1]) if SEEN else None)
        await fake_slack.say("D0ADA", "U0ADA", "look again at q3.csv")
        await eventually(lambda: len(_tool_returns(SEEN[-1])) == 1 and "q3.csv" in str(_tool_returns(SEEN[-1])[0].content))

    looked = [m for m in SEEN if any("chart.png" in str(p.content) for p in _tool_returns(m))][0]
    images = [c for m in looked if isinstance(m, ModelRequest) for p in m.parts
              for c in (p.content if isinstance(p.content, list) else [p.content])
              if isinstance(c, BinaryContent)]
    assert images and images[-1].data == PNG and images[-1].media_type == "image/png"
    assert fake_slack.file_fetches[2:] == [f"Bearer {BOT_TOKEN}"]  # fetched again, with the bot's token
    (refused,) = _tool_returns(SEEN[-1])
    assert "q3.csv is text/csv; only PNG, JPEG, GIF and WebP" in str(refused.content)
    assert len(fake_slack.file_fetches) == 3  # the CSV was not fetched for view_image
    # Never in the gateway's store: neither the bytes nor their base64 are in the database's files.
    database = b"".join(f.read_bytes() for f in (tmp_path / "config").glob("gateway.db*"))
    assert PNG not in database and b"iVBORw0KGgo" not in database
