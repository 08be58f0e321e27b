"""A fake OpenAI-compatible Chat Completions server (what Ollama, vLLM and LM Studio speak).

It also answers the Images API and the Audio API: `/v1/audio/transcriptions` (multipart, as the
openai SDK sends it) with the text a test scripts, the clip's real duration (decoded with PyAV) and
segments in `verbose_json`, and, as OpenAI does, only `json` or `text` for the gpt-4o transcription
models; `/v1/audio/speech` with real audio (an MP3 tone, longer for longer text).

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
        self.media_peers: list[tuple[str, int]] = []  # the same for image and transcription requests
        self._transports: list[asyncio.Transport] = []  # the connections requests came on, to close as a server may
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
        # Audio API: what a transcription hears (or an HTTP status to fail with), and what each endpoint was asked.
        self.transcript: str = "Hello from a voice message."
        self.transcription_status: int = 200
        self.transcriptions: list[dict[str, Any]] = []  # form fields, plus file_name / file_bytes / file_type
        self.speech_requests: list[dict[str, Any]] = []

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
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_post("/v1/audio/speech", self._speech)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    def close_idle_connections(self) -> None:
        """Close every connection a request came on, as a server's idle timeout does (call it between runs)."""
        for transport in self._transports:
            transport.close()
        self._transports.clear()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _peer(self, request: web.Request) -> tuple[str, int]:
        """The client's end of the request's connection (kept, to close as a server may)."""
        if request.transport is None:
            return ("?", 0)
        self._transports.append(request.transport)  # type: ignore[arg-type]
        peer = request.transport.get_extra_info("peername")
        return tuple(peer[:2]) if peer else ("?", 0)

    async def _images(self, request: web.Request) -> web.Response:
        """OpenAI's images.generate: the image as `b64_json` (GPT Image models answer only so), and usage."""
        body = await request.json()
        self.image_requests.append((body, request.headers.get("Authorization")))
        self.media_peers.append(self._peer(request))
        if not body.get("prompt"):
            return web.json_response({"error": {"message": "prompt is required", "type": "invalid_request_error"}},
                                     status=400)
        return web.json_response({
            "created": int(time.time()), "data": [{"b64_json": base64.b64encode(self.image).decode()}],
            "output_format": "png", "size": "1024x1024", "quality": "low",
            "usage": {"input_tokens": 12, "output_tokens": 272, "total_tokens": 284,
                      "input_tokens_details": {"text_tokens": 12, "image_tokens": 0}},
        })

    async def _transcriptions(self, request: web.Request) -> web.Response:
        """OpenAI's audio.transcriptions: multipart `file`, `model`, `response_format`, `language`."""
        from tests.support.audio import decode

        fields: dict[str, Any] = {}
        async for part in await request.multipart():
            if part.name == "file":
                fields.update(file_name=part.filename, file_type=part.headers.get("Content-Type"),
                              file_bytes=bytes(await part.read()))
            elif part.name:
                fields[part.name] = await part.text()
        self.transcriptions.append(fields)
        self.media_peers.append(self._peer(request))
        fmt = fields.get("response_format", "json")
        model = str(fields.get("model", ""))
        if self.transcription_status != 200:
            return web.json_response({"error": {"message": "scripted failure", "type": "server_error"}},
                                     status=self.transcription_status)
        if model.startswith("gpt-4o") and fmt not in ("json", "text"):
            return web.json_response({"error": {"message": f"response_format '{fmt}' is not compatible with model "
                                                f"'{model}'. Use 'json' or 'text' instead.",
                                                "type": "invalid_request_error", "param": "response_format"}}, status=400)
        try:
            seconds = decode(fields.get("file_bytes", b"")).seconds
        except Exception:
            return web.json_response({"error": {"message": "Audio file might be corrupted or unsupported",
                                                "type": "invalid_request_error", "param": "file"}}, status=400)
        if fmt == "text":
            return web.Response(text=self.transcript)
        if fmt == "verbose_json":
            words = self.transcript.split()
            half = max(1, len(words) // 2)
            segments = [{"id": i, "seek": 0, "start": start, "end": end, "text": " " + " ".join(chunk), "tokens": [],
                         "temperature": 0.0, "avg_logprob": -0.2, "compression_ratio": 1.1, "no_speech_prob": 0.01}
                        for i, (start, end, chunk) in enumerate(((0.0, seconds / 2, words[:half]),
                                                                 (seconds / 2, seconds, words[half:]))) if chunk]
            return web.json_response({"task": "transcribe", "language": fields.get("language") or "english",
                                      "duration": seconds, "text": self.transcript, "segments": segments,
                                      "usage": {"type": "duration", "seconds": int(seconds) + 1}})
        audio_tokens = int(seconds * 10) + 1
        out = len(self.transcript.split()) + 1
        return web.json_response({"text": self.transcript, "usage": {
            "type": "tokens", "input_tokens": audio_tokens, "output_tokens": out, "total_tokens": audio_tokens + out,
            "input_token_details": {"text_tokens": 0, "audio_tokens": audio_tokens}}})

    async def _speech(self, request: web.Request) -> web.Response:
        """OpenAI's audio.speech: JSON {model, input, voice, response_format}; the audio as the body."""
        from tests.support.audio import tone

        body = await request.json()
        self.speech_requests.append(body)
        if not body.get("input") or not body.get("voice"):
            return web.json_response({"error": {"message": "input and voice are required",
                                                "type": "invalid_request_error"}}, status=400)
        fmt = body.get("response_format", "mp3")
        if fmt not in ("mp3", "wav"):
            return web.json_response({"error": {"message": f"this fake makes mp3 or wav, not {fmt}",
                                                "type": "invalid_request_error"}}, status=400)
        seconds = min(5.0, 0.5 + len(body["input"]) / 40)
        return web.Response(body=tone(seconds, fmt, hz=330.0),
                            content_type="audio/mpeg" if fmt == "mp3" else "audio/wav")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.peers.append(self._peer(request))
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
