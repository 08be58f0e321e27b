"""A fake OpenAI-compatible Chat Completions server (what Ollama, vLLM and LM Studio speak).

Streams a scripted answer as server-sent `chat.completion.chunk` events, optionally slowly,
so a test can hold a run in flight. Records every request it received, and the client end
(address, port) of the TCP connection each came on, so a test can tell a reused connection.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.inflight import InFlight


class FakeOpenAI:
    def __init__(self, chunks: list[str] | None = None, delay: float = 0.0) -> None:
        self.chunks = chunks or ["Hello ", "from ", "the ", "fake ", "model."]
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.peers: list[tuple[str, int]] = []  # per request: the client's end of its connection
        self.status: int = 200
        # Optional: given a request whose last message is the user's, a tool to call instead of
        # answering, as (name, arguments); None answers with `chunks`. After the tool's result
        # (a last message from the tool) the answer is `chunks` as usual.
        self.tool_call: Callable[[dict[str, Any]], tuple[str, dict[str, Any]] | None] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.in_flight = InFlight()
        # Images API (`POST /v1/images/generations`): what it draws (PNG bytes) and what it was asked.
        self.image: bytes = b""
        self.image_requests: list[tuple[dict[str, Any], str | None]] = []  # (body, Authorization header)

    def busy(self) -> list[str]:
        """What the fake is still doing (`tests.support.settled`)."""
        return [f"model: {self.in_flight.calls} completions in flight"] if self.in_flight.calls else []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> FakeOpenAI:
        app = web.Application(middlewares=[self.in_flight.middleware])
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/images/generations", self._images)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _images(self, request: web.Request) -> web.Response:
        """OpenAI's images.generate: the image as `b64_json` (GPT Image models answer only so), and usage."""
        body = await request.json()
        self.image_requests.append((body, request.headers.get("Authorization")))
        if not body.get("prompt"):
            return web.json_response({"error": {"message": "prompt is required", "type": "invalid_request_error"}},
                                     status=400)
        return web.json_response({
            "created": int(time.time()), "data": [{"b64_json": base64.b64encode(self.image).decode()}],
            "output_format": "png", "size": "1024x1024", "quality": "low",
            "usage": {"input_tokens": 12, "output_tokens": 272, "total_tokens": 284,
                      "input_tokens_details": {"text_tokens": 12, "image_tokens": 0}},
        })

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        self.peers.append(tuple(peer[:2]) if peer else ("?", 0))
        if self.status != 200:
            return web.json_response({"error": {"message": "scripted failure", "type": "server_error"}},
                                     status=self.status)
        created = int(time.time())
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(self.chunks)}
            return web.json_response({**base, "object": "chat.completion", "choices": [
                {"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": len(self.chunks), "total_tokens": 5 + len(self.chunks)}})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(payload: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())

        call = self.tool_call(body) if self.tool_call and body["messages"][-1].get("role") == "user" else None
        if call is not None:
            name, arguments = call
            await send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}, "finish_reason": None}]})
            await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            await response.write(b"data: [DONE]\n\n")
            return response
        await send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        for chunk in self.chunks:
            if self.delay:
                await asyncio.sleep(self.delay)
            await send({**base, "choices": [{"index": 0, "delta": {"content": chunk}, "finish_reason": None}]})
        await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": len(self.chunks), "total_tokens": 5 + len(self.chunks)}})
        await response.write(b"data: [DONE]\n\n")
        return response
