"""Files sent on Telegram reach the model: `getFile`, then the file download URL with the bot's
token, when the run is prepared. The real daemon against the fake Bot API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai.messages import BinaryContent

from gateway.runs.llm import register_model
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import FakeTelegram
from tests.support.files_model import CSV, PNG, Recorder

ADA = FakeTelegram.user(42, "Ada", "ada")


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.private_chat(ADA)
        yield server


async def test_a_photo_arrives_as_an_image_a_csv_as_text_and_a_big_file_is_named(tmp_path: Path,
                                                                                   fake: FakeTelegram) -> None:
    recorder = Recorder()
    register_model("telegram-files", recorder.model)
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url}
    config = write_config(tmp_path / "config",
                          agents={"assistant": {"name": "Files", "model": "telegram-files", "instructions": "Brief."}},
                          bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram,
                                           "admission": {"dm": "open"}}},
                          gateway={"limits": {"attachment_max_bytes": 1000}})
    async with running_gateway(config) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")

        async def send(extra: dict[str, object], count: int) -> str:
            fake.push_message(ADA["id"], ADA, "look", caption=True, extra=extra)
            done = await fake.wait_for(lambda: len(m := [s for s in fake.sent(ADA["id"]) if "Got it." in s.text]) == count
                                       and m, what=f"{count} answers")
            return str(done[-1].text)

        photo = fake.add_file(PNG)
        await send({"document": None, "photo": [{"file_id": photo, "file_unique_id": "p1", "width": 8, "height": 8,
                                                 "file_size": len(PNG)}]}, 1)
        text, image = recorder.last_prompt()
        assert text.startswith("look") and "photo.jpg" in text
        assert isinstance(image, BinaryContent) and image.data == PNG and image.media_type == "image/jpeg"

        table = fake.add_file(CSV)
        await send({"document": {"file_id": table, "file_unique_id": "c1", "file_name": "q3.csv",
                                 "mime_type": "text/csv", "file_size": len(CSV)}}, 2)
        assert recorder.last_prompt()[1] == f'<file name="q3.csv" type="text/csv">\n{CSV.decode()}\n</file>'

        big = fake.add_file(b"z" * 5000)
        reply = await send({"document": {"file_id": big, "file_unique_id": "b1", "file_name": "big.txt",
                                         "mime_type": "text/plain", "file_size": 12}}, 3)  # says 12 bytes
        assert "I could not read big.txt: it is larger than the 1000 bytes limit." in reply
        assert fake.downloads == [f"documents/{photo}", f"documents/{table}"]  # getFile told the real size first
