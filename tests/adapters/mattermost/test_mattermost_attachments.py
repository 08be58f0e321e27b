"""Files posted on Mattermost reach the model: `GET /api/v4/files/{id}` with the bot token when
the run is prepared. The real daemon against the fake Mattermost server."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.messages import BinaryContent

from gateway.runs.llm import register_model
from tests.conftest import running_gateway, wait_for, write_config
from tests.support.files_model import CSV, PNG, Recorder

from .conftest import BOT_TOKEN, World


async def test_an_image_and_a_csv_reach_the_model_and_an_oversized_file_is_named(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MM_FILES_TOKEN", BOT_TOKEN)
    recorder = Recorder()
    register_model("mm-files", recorder.model)
    config = write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Files", "model": "mm-files"}},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_FILES_TOKEN"}}},
        gateway={"limits": {"attachment_max_bytes": 1000}},
    )
    async with running_gateway(config) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        alice, fake = world.alice["id"], world.fake
        files = [fake.add_file(alice, "chart.png", "image/png", PNG), fake.add_file(alice, "q3.csv", "text/csv", CSV),
                 fake.add_file(alice, "huge.csv", "text/csv", b"x" * 5000)]
        await fake.user_post(alice, world.dm["id"], "what do these show?", file_ids=files)
        (reply,) = await wait_for(lambda: [p for p in fake.posts_in(world.dm["id"])
                                           if p["user_id"] == world.bot["id"] and "Got it." in p["message"]],
                                  what="the answer")

        text, image, table, huge = recorder.last_prompt()
        assert text.startswith("what do these show?") and "q3.csv (text/csv" in text
        assert isinstance(image, BinaryContent) and image.data == PNG and image.identifier == "chart.png"
        assert table == f'<file name="q3.csv" type="text/csv">\n{CSV.decode()}\n</file>'
        assert huge == "[huge.csv was not read: it is larger than the 1000 bytes limit.]"
        assert "I could not read huge.csv: it is larger than the 1000 bytes limit." in reply["message"]
        assert fake.file_downloads == files[:2]  # the oversized file was never downloaded
