"""Files shared on Slack reach the model: fetched from `url_private` with the bot token when the
run is prepared, an image as an image part, a CSV as text; a file over the cap is named in the
chat and the run goes on without it. The real daemon against the fake Slack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.messages import BinaryContent, ModelRequest, UserPromptPart
from pydantic_ai.profiles import ModelProfile

from adapters.slack.adapter import SlackAdapter
from gateway.runs.llm import register_model
from gateway.messages import Attachment
from gateway.outbound.adapter import PlatformError
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.support.files_model import CSV, PNG, Recorder

from .conftest import eventually


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def config(tmp_path: Path, fake: FakeSlack, model: str, **limits: int) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake.api_url}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Files", "model": model, "instructions": "Be brief."}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
        gateway={"limits": limits} if limits else None,
    )


async def test_an_image_arrives_as_an_image_and_a_csv_as_text(tmp_path: Path, fake_slack: FakeSlack, recorder: Recorder) -> None:
    register_model("slack-files", recorder.model)
    async with running_gateway(config(tmp_path, fake_slack, "slack-files")) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        files = [fake_slack.add_file("chart.png", "image/png", PNG), fake_slack.add_file("q3.csv", "text/csv", CSV)]
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> what do these show?", files=files)
        await fake_slack.wait_for(lambda: any(m.text == "Got it." for m in fake_slack.bot_messages("C0GEN")))

        text, image, table = recorder.last_prompt()
        assert text.startswith("Ada: what do these show?") and "chart.png (image/png" in text
        assert isinstance(image, BinaryContent) and image.is_image and image.data == PNG and image.identifier == "chart.png"
        assert table == f'<file name="q3.csv" type="text/csv">\n{CSV.decode()}\n</file>'
        assert fake_slack.file_fetches == [f"Bearer {BOT_TOKEN}"] * 2  # with the bot token, once each

        # The files are recorded with the message (name, type, size, hash), never their bytes.
        conversation = await gw.store.conversation_by_key(f"slack:T0TEAM:C0GEN:{root.ts}")
        assert conversation is not None
        message = (await gw.store.messages(conversation.id))[0]
        (recorded,) = (await gw.store.capability_state.items("attachments", f"run:{message.run_id}")).values()
        png, csv = json.loads(recorded)
        assert (png["name"], png["type"], png["size"], png["outcome"]) == ("chart.png", "image/png", len(PNG), "read")
        assert len(png["sha256"]) == 64 and csv["outcome"] == "read" and "PNG" not in recorded

        # The next turn's history names the files; they are not fetched again.
        await fake_slack.say("C0GEN", "U0ADA", "and the south?", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: len([m for m in fake_slack.bot_messages("C0GEN") if m.text == "Got it."]) == 2)
        earlier = [p for m in recorder.requests[-1][:-1] if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
        assert isinstance(earlier[0].content, str) and "[Files shared with this message: chart.png" in earlier[0].content
        assert recorder.last_prompt() == ["Ada: and the south?"]
        assert len(fake_slack.file_fetches) == 2


async def test_an_oversized_file_is_named_in_the_chat_and_the_run_goes_on(tmp_path: Path, fake_slack: FakeSlack, recorder: Recorder) -> None:
    register_model("slack-files-small", recorder.model)
    async with running_gateway(config(tmp_path, fake_slack, "slack-files-small", attachment_max_bytes=1000)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        big = fake_slack.add_file("big.csv", "text/csv", b"x" * 5000)
        lying = fake_slack.add_file("small.csv", "text/csv", b"y" * 5000, size=10)  # says 10 bytes, is 5,000
        fine = fake_slack.add_file("ok.csv", "text/csv", CSV)
        await fake_slack.say("D0ADA", "U0ADA", "look", files=[big, lying, fine])
        (reply,) = await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("D0ADA") if "Got it." in m.text])

        assert "I could not read big.csv: it is larger than the 1000 bytes limit." in reply.text
        assert "I could not read small.csv: it is larger than the 1000 bytes limit." in reply.text
        text, big_note, lying_note, table = recorder.last_prompt()
        assert big_note == "[big.csv was not read: it is larger than the 1000 bytes limit.]"
        assert lying_note.startswith("[small.csv was not read") and table.startswith('<file name="ok.csv"')
        assert len(fake_slack.file_fetches) == 2  # the declared-too-big file was never downloaded


async def test_a_model_without_image_input_refuses_the_image_with_a_line(tmp_path: Path, fake_slack: FakeSlack, recorder: Recorder) -> None:
    register_model("slack-files-text-only", lambda: recorder.model(ModelProfile(supports_image_input=False)))
    async with running_gateway(config(tmp_path, fake_slack, "slack-files-text-only")) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        files = [fake_slack.add_file("photo.jpg", "image/jpeg", PNG), fake_slack.add_file("blob.bin", "application/zip", b"PK")]
        await fake_slack.say("D0ADA", "U0ADA", "see", files=files)
        (reply,) = await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("D0ADA") if "Got it." in m.text])

        assert "I could not read photo.jpg: this model does not take images." in reply.text
        _, image_note, other_note = recorder.last_prompt()
        assert image_note == "[photo.jpg was not read: this model does not take images.]"
        assert other_note == "[blob.bin was not read: files of type application/zip are not read.]"
        assert fake_slack.file_fetches == []  # nothing the model cannot take is downloaded


async def test_the_bot_token_goes_only_to_slack_and_a_sign_in_page_is_not_a_file(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    gone = fake_slack.add_file("gone.csv", "text/csv", CSV)
    del fake_slack.files[gone["id"]]  # Slack answers a file it will not serve with its sign-in page, and 200
    with pytest.raises(PlatformError, match="gone.csv: HTTP 200 text/html"):
        await adapter.fetch_attachment(Attachment("gone.csv", "text/csv", ref=gone["url_private"]), 1000)
    with pytest.raises(PlatformError, match="not a Slack file URL"):
        await adapter.fetch_attachment(Attachment("x.csv", "text/csv", ref="https://evil.example/x.csv"), 1000)
    assert fake_slack.file_fetches == [f"Bearer {BOT_TOKEN}"]  # the foreign host never saw the token
