"""Files uploaded through the HTTP API, held in memory from the upload until the run reads them.

The web chat has no platform to fetch a file from later, so the API keeps the bytes here,
named by an unguessable ref that the message's attachment carries ("upload:<id>"). The run that
answers the message takes them (`gateway.inbound.attachments`), and drops at once the ones it
does not read; nothing reaches the database. A restart loses what was waiting: the message is
kept with its "[Files shared…]" note, and the run says the file could not be read.

One budget bounds the memory, `limits.uploads_max_bytes`: the bytes of uploads being received
plus the bytes held for runs. A chunk that would pass it refuses its upload with 503 and
Retry-After (nothing is stored; the client sends it again later); a file over the per-file
limit is 413. Past the budget the oldest held uploads are dropped, so a run that comes to them
says so.
"""

from __future__ import annotations

import mimetypes
from collections import OrderedDict
from dataclasses import dataclass

from aiohttp import BodyPartReader, web

from gateway.clock import new_id

PREFIX = "upload:"


RETRY_AFTER = 5  # seconds a client refused for the budget waits before sending again


class Uploads:
    def __init__(self, max_total_bytes: int = 128 * 1024 * 1024) -> None:
        self.max_total_bytes = max_total_bytes
        self._held: OrderedDict[str, bytes] = OrderedDict()
        self._total = 0  # held
        self._receiving = 0  # reserved by uploads still being read

    @property
    def bytes_in_memory(self) -> int:
        """Held for runs plus being received: what the budget bounds."""
        return self._total + self._receiving

    def reserve(self, n: int) -> bool:
        """Count `n` more bytes of an upload being read; False (nothing counted) past the budget."""
        if self._total + self._receiving + n > self.max_total_bytes:
            return False
        self._receiving += n
        return True

    def release(self, n: int) -> None:
        self._receiving -= n

    def put(self, data: bytes) -> str:
        """Hold `data` for a run; returns the ref the message's attachment carries."""
        ref = PREFIX + new_id()
        self._held[ref] = data
        self._total += len(data)
        while self._total > self.max_total_bytes and len(self._held) > 1:
            _, dropped = self._held.popitem(last=False)
            self._total -= len(dropped)
        return ref

    @staticmethod
    def holds(ref: str | None) -> bool:
        """Whether `ref` names an upload (held or not any more), rather than a platform's file."""
        return bool(ref and ref.startswith(PREFIX))

    def take(self, ref: str) -> bytes | None:
        """The bytes, once; None when they are gone (a restart, or dropped to stay within the cap)."""
        data = self._held.pop(ref, None)
        if data is not None:
            self._total -= len(data)
        return data

    def drop(self, refs: list[str]) -> None:
        for ref in refs:
            self.take(ref)


MAX_FILES = 10  # files in one message


class UploadRefused(Exception):
    """A multipart body the API turns away: `status` and a sentence for the client."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after

    def response(self) -> web.Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        body: dict[str, object] = {"error": self.code, "message": str(self)}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        return web.json_response(body, status=self.status, headers=headers)


@dataclass(frozen=True, slots=True)
class Form:
    text: str
    files: list[tuple[str, str, bytes]]  # (name, media type, contents)


async def read_form(request: web.Request, max_bytes: int, max_text: int, uploads: Uploads) -> Form:
    """A `multipart/form-data` message: a `text` field and `file` fields. Each file is read up to
    `max_bytes`; a bigger one refuses the whole message (413), so nothing is half-sent. Every
    chunk is counted against `uploads`' budget while it is read (503 past it)."""
    reserved = 0
    try:
        reader = await request.multipart()
        text, files = "", []
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise UploadRefused(400, "bad_request", "nested multipart bodies are not accepted")
            if part.name == "text":
                text = (await part.read(decode=True)).decode("utf-8", "replace")
                if len(text) > max_text:
                    raise UploadRefused(413, "too_long", f"text is {len(text)} characters; the limit is {max_text}")
            elif part.name == "file":
                if len(files) == MAX_FILES:
                    raise UploadRefused(413, "too_many_files", f"at most {MAX_FILES} files per message")
                name = part.filename or "file"
                data = bytearray()
                while chunk := await part.read_chunk(64 * 1024):
                    if len(data) + len(chunk) > max_bytes:
                        raise UploadRefused(413, "file_too_large", f"{name} is over the {max_bytes}-byte limit for a file")
                    if not uploads.reserve(len(chunk)):
                        raise UploadRefused(503, "uploads_busy", "the gateway is receiving as many files as it holds "
                                            "at once; send this again shortly", retry_after=RETRY_AFTER)
                    reserved += len(chunk)
                    data += chunk
                media_type = part.headers.get("Content-Type", "") or mimetypes.guess_type(name)[0] or "application/octet-stream"
                files.append((name, media_type, bytes(data)))
            else:
                raise UploadRefused(400, "bad_request", f"unknown form field {part.name!r}: send 'text' and 'file'")
        return Form(text, files)
    finally:
        # The caller holds what it keeps (`Uploads.put`) right after; a refused form is dropped.
        uploads.release(reserved)
