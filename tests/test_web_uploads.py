"""Files uploaded with a web chat message (multipart on the messages endpoint) reach the model,
are held in memory for the run only, and bad uploads are refused with nothing stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from pydantic_ai.messages import BinaryContent, ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs.llm import register_model
from tests.support.files_model import CSV, PNG, Recorder

from .conftest import run_finished, running_gateway, wait_for, write_config


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
    """A restart drops what was held: the run that comes to the file says so and goes on."""
    recorder, gate = Recorder(), asyncio.Event()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        recorder.requests.append(messages)
        await gate.wait()  # the first run holds the conversation: the next message waits, its file held
        yield "Got it."

    register_model("web-files-dropped", lambda: FunctionModel(stream_function=stream))
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "web-files-dropped"}},
                          gateway={"limits": {"shutdown_grace_seconds": 0}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "first"})
        await wait_for(lambda: recorder.requests, what="the first run")
        r = await s.post(f"/api/v1/conversations/{conv}/messages", data=_form("see", ("a.csv", "text/csv", CSV)))
        assert r.status == 202 and gw.uploads.bytes_in_memory == len(CSV)
    gate.set()
    async with running_gateway(config):

        def told() -> bool:
            return any("[a.csv was not read: the upload is no longer held" in str(part)
                       for call in range(len(recorder.requests)) for part in recorder.last_prompt(call))

        await wait_for(told, what="the run to name the file it could not read")


async def test_a_file_the_run_does_not_read_is_dropped_at_once(tmp_path: Path) -> None:
    recorder = Recorder()
    register_model("web-files-unread", recorder.model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "web-files-unread"}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages",
                         data=_form("see", ("blob.bin", "application/octet-stream", b"\x00" * 5000)))
        run_id = (await r.json())["run_id"]
        await wait_for(lambda: run_finished(gw, run_id), what="the run")
        assert "blob.bin was not read: files of type application/octet-stream are not read" in str(recorder.last_prompt())
        assert gw.uploads.bytes_in_memory == 0, "a file no run reads stayed in memory"


def _multipart(boundary: str, name: str, data: bytes) -> tuple[bytes, bytes]:
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nhere\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: text/csv\r\n\r\n").encode() + data
    return head, f"\r\n--{boundary}--\r\n".encode()


async def test_concurrent_uploads_stay_within_the_budget(tmp_path: Path) -> None:
    """Twenty uploads at once, each half-sent and then waiting: past the budget they are told to come
    back later (503, Retry-After), nothing of theirs is stored, and memory never passes the budget
    (docs/security.md, "The web chat and the HTTP API")."""
    size, budget = 100_000, 350_000  # room for three uploads and a half
    recorder = Recorder()
    register_model("web-files-budget", recorder.model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "web-files-budget"}},
                          gateway={"limits": {"attachment_max_bytes": size, "uploads_max_bytes": budget}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        go, peak, halves = asyncio.Event(), [0], [0]

        async def upload(i: int) -> tuple[int, str | None, dict[str, object]]:
            head, tail = _multipart("b0undary", f"f{i}.csv", b"x" * size)

            async def body() -> AsyncIterator[bytes]:
                yield head[: len(head) - size // 2]
                halves[0] += 1  # asked for more: the first half is written
                await go.wait()
                yield head[len(head) - size // 2:] + tail

            async with s.post(f"/api/v1/conversations/{conv}/messages", data=body(),
                              headers={"Content-Type": "multipart/form-data; boundary=b0undary"}) as r:
                return r.status, r.headers.get("Retry-After"), await r.json()

        async def watch() -> None:
            while True:
                peak[0] = max(peak[0], gw.uploads.bytes_in_memory)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        uploads = [asyncio.create_task(upload(i)) for i in range(20)]
        await wait_for(lambda: halves[0] == 20, what="every upload to send its first half")
        go.set()
        results = await asyncio.gather(*uploads)
        watcher.cancel()
        statuses = sorted(status for status, _, _ in results)
        assert 202 in statuses and 503 in statuses and set(statuses) <= {202, 503}, statuses
        for status, retry_after, answer in results:
            if status == 503:
                assert retry_after is not None and int(retry_after) > 0 and answer["error"] == "uploads_busy"
        assert peak[0] <= budget
        accepted = statuses.count(202)
        await wait_for(lambda: len(recorder.requests) >= 1, what="a run")

        async def users() -> int:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return len([t for t in turns if t["role"] == "user"])
        assert await users() == accepted, "a refused upload was stored as a message"

        # One file over the per-file limit is 413, whatever the budget.
        head, tail = _multipart("b0undary", "big.csv", b"x" * (size + 1))
        r = await s.post(f"/api/v1/conversations/{conv}/messages", data=head + tail,
                         headers={"Content-Type": "multipart/form-data; boundary=b0undary"})
        assert r.status == 413 and (await r.json())["error"] == "file_too_large"
