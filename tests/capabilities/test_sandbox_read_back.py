"""fetch_file: a file shared earlier in the conversation is copied into the sandbox workspace, fetched
again from Slack with the bot token; its name cannot leave the workspace or overwrite a file; an
image, a file that is not text, one over the cap, a folder outside the workspace or a name not shared
here is refused, and then nothing is written. The real daemon and slack_sdk against the fake Slack."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, RetryPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from sqlalchemy import text

from capabilities.sandbox_read_back import landing_name
from gateway.clock import ManualClock
from gateway.runs.llm import register_model
from tests.adapters.slack.conftest import eventually, fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.support.files_model import CSV, PNG
from tests.support.patience import AUTOJUMP

SEEN: list[list[ModelMessage]] = []
NOTES = b"# ops notes\nrestart the worker\n"


async def _model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """A prompt "fetch {json}" calls fetch_file with those arguments once; anything else: "Got it."."""
    SEEN.append(messages)
    prompt = next((p.content for p in messages[-1].parts if isinstance(p, UserPromptPart)
                   and isinstance(p.content, str)), "")
    if prompt.startswith("fetch "):
        yield {0: DeltaToolCall(name="fetch_file", json_args=prompt.removeprefix("fetch "))}
        return
    yield "Got it."


def _results() -> list[str]:
    """What each fetch_file call answered (a tool return, or the retry prompt of a mistake), in order."""
    return [str(p.content) for m in SEEN for p in m[-1].parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]


async def _workspace(gw: Any) -> dict[str, str]:
    async with gw.store.sessions() as s:
        rows = await s.execute(text("SELECT key, value FROM capability_state WHERE capability = 'sandbox'"))
        return dict(rows.all())  # type: ignore[arg-type]


async def test_a_shared_file_is_copied_into_the_workspace_and_nothing_lands_where_it_should_not(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    SEEN.clear()
    register_model("read-back", lambda: FunctionModel(stream_function=_model, model_name="read-back"))
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "config", gateway={"limits": {"attachment_max_bytes": 4000}},
                       agents={"assistant": {"name": "Clerk", "model": "read-back",
                                             "capabilities": [{"id": "sandbox"}]}},
                       bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    asks: list[dict[str, Any]] = [
        {"names": ["q3.csv"], "dir": "data"},  # 0: copied
        {"names": ["q3.csv"], "dir": "/workspace/data"},  # 1: the same name again: lands under its own id
        {"names": ["../../etc/passwd", "..\\.ssh\\notes.md"]},  # 2: hostile names: their last part, at the top
        {"names": ["q3.csv", "chart.png"], "dir": "more"},  # 3: an image in the batch: nothing written
        {"names": ["q3.csv"], "dir": "../../outside"},  # 4: a folder that climbs out
        {"names": ["blob.bin"]},  # 5: not text
        {"names": ["big.csv"]},  # 6: over the gateway's attachment cap
        {"names": ["nope.csv"]},  # 7: not shared here: a retry naming what was
        {"names": [".env"]},  # 8: a credentials name loses its dot and lands as a plain file
    ]

    def answered() -> int:  # the first answer begins with a note that big.csv was not read
        return len([m for m in fake_slack.bot_messages("D0ADA") if m.text.endswith("Got it.")])

    # The gateway's and the fake's clock: the ten answers in one DM wait for Slack's posting budget on
    # it, not for ten real seconds.
    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)
    async with running_gateway(cfg, clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        files = [fake_slack.add_file("q3.csv", "text/csv", CSV), fake_slack.add_file("chart.png", "image/png", PNG),
                 fake_slack.add_file("../../etc/passwd", "text/plain", NOTES),
                 fake_slack.add_file("..\\.ssh\\notes.md", "text/markdown", NOTES),
                 fake_slack.add_file("blob.bin", "application/octet-stream", b"\xff\xfe\x00\x01"),
                 fake_slack.add_file("big.csv", "text/csv", b"n\n" * 2500),
                 fake_slack.add_file(".env", "text/plain", b"LEVEL=debug\n")]
        await fake_slack.say("D0ADA", "U0ADA", "here", files=files)
        answers = 1
        await fake_slack.wait_for(lambda: answered() == 1)
        fetches_before = len(fake_slack.file_fetches)
        written: list[dict[str, str]] = []
        for ask in asks:
            await fake_slack.say("D0ADA", "U0ADA", "fetch " + json.dumps(ask))
            answers += 1
            await fake_slack.wait_for(lambda: answered() == answers)
            written.append(await _workspace(gw))

    results = _results()
    assert len(results) == len(asks)
    first, again, hostile, with_image, climbing, binary, big, unknown, dotted = results
    assert first.startswith("q3.csv -> data/q3.csv") and json.loads(first.splitlines()[-1]) == {"files": [
        {"name": "q3.csv", "path": "data/q3.csv", "bytes": len(CSV), "content_type": "text/csv"}]}
    assert written[0] == {"data/q3.csv": CSV.decode()}
    assert fake_slack.file_fetches[fetches_before] == f"Bearer {BOT_TOKEN}"  # fetched again, with the bot's token
    # A name is never reused: the first copy stays, the second lands under its own id.
    (second,) = set(written[1]) - set(written[0])
    assert second.startswith("data/q3-") and second.endswith(".csv") and f"-> {second} " in again
    assert written[1]["data/q3.csv"] == CSV.decode() == written[1][second]
    # The sender's name is only a suggestion: its last part, inside the workspace.
    assert set(written[2]) - set(written[1]) == {"passwd", "notes.md"}
    assert "-> passwd " in hostile and "-> notes.md " in hostile
    # Each refusal names the file or folder, and nothing was written.
    assert "chart.png is an image (image/png); look at it with view_image. Nothing was written." in with_image
    assert "dir '../../outside' is not a folder inside the workspace" in climbing and "Nothing was written" in climbing
    assert "blob.bin (application/octet-stream) is not text" in binary
    assert "big.csv (4.9 KB) is larger than this gateway reads. Nothing was written." in big
    assert "no file named 'nope.csv' was shared in this conversation" in unknown and "q3.csv" in unknown
    assert written[3] == written[4] == written[5] == written[6] == written[7] == written[2]
    assert set(written[8]) - set(written[7]) == {"env"} and "-> env " in dotted


def test_a_landing_name_is_one_plain_file_name_whatever_the_sender_called_it() -> None:
    assert landing_name("../../etc/passwd") == "passwd"
    assert landing_name("C:\\Users\\x\\..\\report.csv") == "report.csv"
    assert landing_name("a\x00b\nc.csv") == "a_b_c.csv"
    assert landing_name("..") == landing_name("/") == landing_name("") == "attachment"
    assert landing_name("rm -rf $(x);.txt") == "rm -rf _(x)_.txt"
    long = landing_name("x" * 300 + ".csv")
    assert len(long) == 100 and long.endswith(".csv")
