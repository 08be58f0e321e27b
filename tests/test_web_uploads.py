"""Files uploaded with a web chat message (multipart on the messages endpoint) reach the model,
are held in memory for the run only, and bad uploads are refused with nothing stored."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from pydantic_ai.messages import BinaryContent

from gateway.runs.llm import register_model
from tests.support.files_model import CSV, PNG, Recorder

from .conftest import running_gateway, wait_for, write_config


def _form(text: str, *files: tuple[str, str, bytes]) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("text", text)
    for name, media_type, data in files:
        form.add_field("file", data, filename=name, content_type=media_type)
    return form


async def test_uploaded_files_reach_the_model_and_are_held_for_the_run_only(tmp_path: Path) -> None:
    recorder = Recorder()
    register_model("web-files", recorder.model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "web-files"}},
                          gateway={"limits": {"attachment_max_bytes": 1000}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages",
                         data=_form("what is this?", ("chart.png", "image/png", PNG), ("q3.csv", "text/csv", CSV)))
        assert r.status == 202, await r.text()

        async def turns() -> list[dict[str, str]]:
            return list((await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"])

        await wait_for(lambda: recorder.requests, what="the model to be asked")
        text, image, table = recorder.last_prompt()
        assert text.startswith("what is this?") and "[Files shared with this message: chart.png (image/png, " in text
        assert isinstance(image, BinaryContent) and image.data == PNG
        assert table == f'<file name="q3.csv" type="text/csv">\n{CSV.decode()}\n</file>'
        assert gw.uploads._held == {}  # taken by the run: nothing waits any more

        # Too big, or not a form the API knows: refused whole, nothing stored, nothing held.
        r = await s.post(f"/api/v1/conversations/{conv}/messages", data=_form("big", ("big.bin", "text/plain", b"x" * 2000)))
        assert r.status == 413 and (await r.json())["error"] == "file_too_large"
        only_files = aiohttp.FormData()
        only_files.add_field("file", CSV, filename="only.csv", content_type="text/csv")
        r = await s.post(f"/api/v1/conversations/{conv}/messages", data=only_files)
        assert r.status == 202  # files alone are a message
        await wait_for(lambda: len(recorder.requests) == 2, what="the second run")
        assert len([t for t in await turns() if t["role"] == "user"]) == 2
        assert gw.uploads._held == {}


async def test_an_upload_no_longer_held_is_named_to_the_model(tmp_path: Path) -> None:
    """Past the holding cap the oldest upload is dropped (a restart drops them all): the run goes on."""
    recorder = Recorder()
    register_model("web-files-dropped", recorder.model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "web-files-dropped"}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        gw.uploads.max_total_bytes = len(CSV)  # room for one file
        await s.post(f"/api/v1/conversations/{conv}/messages",
                     data=_form("see", ("a.csv", "text/csv", CSV), ("b.csv", "text/csv", CSV)))
        await wait_for(lambda: recorder.requests, what="the run")
        _, dropped, kept = recorder.last_prompt()
        assert dropped == "[a.csv was not read: the upload is no longer held (the gateway restarted, or held too many); send it again.]"
        assert kept.startswith('<file name="b.csv"')
