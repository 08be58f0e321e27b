"""Files shared with a message: fetched for the run that answers it, handed to the model as parts.

Where things are kept, and why there:
- The message's stored text carries "[Files shared with this message: name (type, size)]"
  (`gateway/inbound/pipeline.py`): that is what history shows on later turns. Files are never fetched
  again for history.
- What the adapter needs to fetch a file (its `ref`, a URL or a file id the model must not see)
  and, once the run has read it, its sha256 and what became of it, are kept as capability state
  ("attachments", scope "run:<run id>", key the message id), written in the same transaction as
  the message. The `messages` table has no column for this, and no query needs one: only the
  run that answers the message reads it.
- The bytes live only in the run's prompt, in memory. Whatever stores a run's messages (a parked
  run's state, compaction's snapshot of a conversation) stores them through `without_contents`: each
  file becomes a reference (name, type, size, id), so a file reaches the model on its own turn only.

Images go as images where the model's profile says it takes them (refused with a line in the chat
where it does not), text-like files as text with their name, PDFs as documents where the model
takes them, anything else is named with a note that it was not read (and not fetched).

Audio (a voice note, an audio clip) is heard where a capability listens (`Listens`: the `audio`
capability with `transcribe_voice_messages`): fetched like any file, transcribed before the run, and
the transcript, marked as one with its duration, is what the model reads. It becomes the message's
stored text too (`keep_transcript`), so later turns read what was said, never the bytes; the entry
keeps it as well, so a run resumed after a restart does not pay for the same transcription twice.
Without a listener audio is named and not fetched, like any other file the model cannot take.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, UserContent, UserPromptPart

from gateway.messages import Attachment, InboundMessage
from gateway.store.capability_state import CapabilityState
from gateway.outbound.adapter import Adapter, AttachmentTooLarge, FetchesAttachments, PlatformError, offered
from gateway.inbound.uploads import Uploads

log = logging.getLogger("gateway.inbound.attachments")

CAPABILITY = "attachments"
FETCH_SECONDS = 60.0  # one file's download; the run's own time limit starts only after
TEXT_CHARS = 100_000  # of one text file, shown to the model; past it the text is cut with a visible marker
FILE_TAG = "<file "  # how a text file's part starts; `without_contents` recognises it by this

_AUDIO_SUFFIXES = frozenset({"ogg", "oga", "opus", "mp3", "m4a", "wav", "flac", "aac", "weba"})
_TEXT_TYPES = frozenset({
    "application/json", "application/xml", "application/x-yaml", "application/yaml", "application/csv",
    "application/javascript", "application/x-python", "application/x-sh", "application/sql", "application/toml",
    "application/x-ndjson", "application/ld+json",
})
_TEXT_SUFFIXES = frozenset({
    "txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "ini", "cfg", "xml", "html",
    "css", "js", "ts", "tsx", "jsx", "py", "rb", "go", "rs", "java", "kt", "c", "h", "cpp", "hpp", "cs", "sh",
    "sql", "log", "diff", "patch", "rst", "tex", "swift", "php", "lua", "r", "scala",
})


def recorded(message: InboundMessage) -> str | None:
    """What is stored with the message about its files (never their bytes); None when it has none."""
    if not message.attachments:
        return None
    return json.dumps([{"name": a.name, "type": a.mime_type, "size": a.size, "ref": a.ref}
                       for a in message.attachments])


def kind(name: str, mime_type: str) -> str:
    """image, pdf, text, audio or other: how a file is handed to the model."""
    mime = mime_type.split(";")[0].strip().lower()
    if mime.startswith("image/"):
        return "image"
    if mime == "application/pdf":
        return "pdf"
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if mime.startswith("audio/") or (mime in ("", "application/octet-stream") and suffix in _AUDIO_SUFFIXES):
        return "audio"
    if mime.startswith("text/") or mime in _TEXT_TYPES or suffix in _TEXT_SUFFIXES:
        return "text"
    return "other"


@dataclass(frozen=True, slots=True)
class Heard:
    """A voice message as the model reads it: what was said, how long it lasted, what heard it."""

    text: str
    duration_seconds: float
    language: str | None = None
    by: str = ""  # the transcription model


class NotHeard(Exception):
    """A voice message that was not transcribed (over a limit, not audio, the service failed): `str()`
    says why, in words for the person and the model."""


class Listens(Protocol):
    """What transcribes a voice message before its run; a capability offers one for a turn (the core
    has no speech recognition of its own and imports none)."""

    max_bytes: int  # the largest voice message it takes (beside the gateway's attachment cap)

    async def hear(self, name: str, mime_type: str, data: bytes) -> Heard:
        """The transcript, or NotHeard saying why not."""
        ...


# The message's stored text gets the transcript (message id, the line): later turns read it.
KeepTranscript = Callable[[int, str], Awaitable[None]]


def clock_text(seconds: float) -> str:
    """A duration as people read it: 0:07, 12:30, 1:02:03."""
    s = max(0, round(seconds))
    h, m = divmod(s, 3600)
    return f"{h}:{m // 60:02d}:{m % 60:02d}" if h else f"{m // 60}:{m % 60:02d}"


def transcript_line(name: str, heard: Heard) -> str:
    """How a transcript reaches the model (and the stored message): marked as one, with its duration."""
    text = heard.text.strip() or "(no words were heard)"
    if len(text) > TEXT_CHARS:
        text = f"{text[:TEXT_CHARS]}\n[… cut: the transcript has {len(text):,} characters; the first {TEXT_CHARS:,} are shown]"
    language = f", in {heard.language}" if heard.language else ""
    return (f"[Transcript of a voice message ({name}, {clock_text(heard.duration_seconds)} long{language}), "
            f"made by speech recognition: words may be misheard]\n{text}")


@dataclass
class Files:
    """What a run's prompt gets from its messages' files, and the lines the person is told."""

    parts: list[UserContent] = dataclasses.field(default_factory=list)
    notices: list[str] = dataclasses.field(default_factory=list)


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MB" if n >= 1024 * 1024 else f"{n} bytes"


async def for_run(run_id: str, adapter: Adapter, state: CapabilityState, *, max_bytes: int,
                  profile: Mapping[str, Any], uploads: Uploads | None = None, listener: Listens | None = None,
                  keep_transcript: KeepTranscript | None = None) -> Files:
    """Fetch the files of the run's messages (concurrently) and turn them into prompt parts.
    Files uploaded through the API are taken from `uploads`; the others are fetched by the adapter.
    Audio is transcribed by `listener` where the run has one, and its transcript kept with the message."""
    scope = f"run:{run_id}"
    stored = await state.items(CAPABILITY, scope)
    if not stored:
        return Files()
    out = Files()
    for key, value in stored.items():
        entries = [dict(e) for e in json.loads(value)]
        try:
            results = await asyncio.gather(*(_one(e, adapter, max_bytes, profile, uploads, listener) for e in entries))
        finally:
            if uploads is not None:  # read or refused (a type not read, too large): not kept a moment longer
                uploads.drop([str(e["ref"]) for e in entries if Uploads.holds(e.get("ref"))])
        for entry, (parts, notice) in zip(entries, results, strict=True):
            out.parts.extend(parts)
            if notice:
                out.notices.append(notice)
        for line in (str(e["transcript"]) for e in entries if e.get("transcript")):
            if keep_transcript is not None:
                await keep_transcript(int(key), line)
        await state.put(CAPABILITY, scope, key, json.dumps(entries))  # with each file's hash and outcome
    return out


async def _one(entry: dict[str, Any], adapter: Adapter, max_bytes: int, profile: Mapping[str, Any],
               uploads: Uploads | None, listener: Listens | None = None) -> tuple[list[UserContent], str]:
    """One file: (the parts for the model, a line for the person or ""). Records the outcome in `entry`."""
    name, mime, size = str(entry.get("name") or "file"), str(entry.get("type") or ""), entry.get("size")
    what = kind(name, mime)
    if what == "audio":
        if listener is None:
            what = "other"  # named, not fetched: nothing here can hear it
        elif entry.get("transcript"):  # heard on an earlier try of this run (a restart): not paid for twice
            return [str(entry["transcript"])], ""
        elif isinstance(size, int) and size > listener.max_bytes:
            return _skipped(entry, name, f"it is larger than the {_mb(listener.max_bytes)} limit for voice messages")
        else:
            max_bytes = min(max_bytes, listener.max_bytes)
    refused = ""
    if what == "other":
        refused = f"files of type {mime or 'unknown'} are not read"
    elif what == "image" and not profile.get("supports_image_input", True):
        refused = "this model does not take images"
    elif what == "pdf" and not (profile.get("supports_document_input", True)
                                and "application/pdf" in profile.get("supported_document_media_types",
                                                                     {"application/pdf"})):
        refused = "this model does not take PDF documents"
    elif max_bytes == 0:
        refused = "reading files is switched off here"
    elif isinstance(size, int) and size > max_bytes:
        refused = f"it is larger than the {_mb(max_bytes)} limit"
    if refused:
        return _skipped(entry, name, refused, tell=what != "other")
    attachment = Attachment(name, mime or "application/octet-stream", size if isinstance(size, int) else None,
                            ref=entry.get("ref"))
    try:
        if Uploads.holds(attachment.ref):
            data = uploads.take(attachment.ref) if uploads is not None and attachment.ref else None
            if data is None:
                return _skipped(entry, name, "the upload is no longer held (the gateway restarted, or held too many); send it again")
        elif (fetcher := offered(adapter, FetchesAttachments)) is not None:
            data = await asyncio.wait_for(fetcher.fetch_attachment(attachment, max_bytes), FETCH_SECONDS)
        else:
            data = None
    except AttachmentTooLarge:
        return _skipped(entry, name, f"it is larger than the {_mb(max_bytes)} limit")
    except TimeoutError:
        return _skipped(entry, name, f"fetching it took longer than {FETCH_SECONDS:g} s")
    except PlatformError as e:
        log.warning("attachment not fetched: %s", e)
        return _skipped(entry, name, "it could not be fetched from the platform")
    except Exception as e:  # an adapter's own mistake must not cost the person their answer
        log.warning("attachment not fetched", exc_info=e)
        return _skipped(entry, name, "it could not be fetched from the platform")
    if data is None:
        return _skipped(entry, name, "files are not fetched on this platform", tell=False)
    entry.update(sha256=await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest()), bytes=len(data),
                 outcome="read")
    if what == "audio" and listener is not None:
        return await _hear(entry, name, mime, data, listener)
    if what == "text":
        return [await asyncio.to_thread(text_part, name, mime, data)], ""
    return [BinaryContent(data=data, media_type=mime, identifier=name)], ""


async def _hear(entry: dict[str, Any], name: str, mime: str, data: bytes,
                listener: Listens) -> tuple[list[UserContent], str]:
    try:
        heard = await listener.hear(name, mime or "application/octet-stream", data)
    except NotHeard as e:
        entry["outcome"] = f"not transcribed: {e}"
        return [f"[{name} is a voice message that was not transcribed: {e}.]"], f"I could not transcribe {name}: {e}."
    except Exception as e:  # a listener's own mistake must not cost the person their answer either
        log.warning("voice message not transcribed", exc_info=e)
        entry["outcome"] = "not transcribed: the transcription failed"
        return ([f"[{name} is a voice message that was not transcribed: the transcription failed.]"],
                f"I could not transcribe {name}: the transcription failed.")
    line = transcript_line(name, heard)
    entry.update(outcome="transcribed", transcript=line, duration_seconds=round(heard.duration_seconds, 2))
    return [line], ""


def text_part(name: str, mime: str, data: bytes) -> str:
    """A text-like file as the model reads it: tagged with its name and type, cut past TEXT_CHARS."""
    text = data.decode("utf-8", "replace")
    if len(text) > TEXT_CHARS:
        text = f"{text[:TEXT_CHARS]}\n[… cut: the file has {len(text):,} characters; the first {TEXT_CHARS:,} are shown]"
    return f'{FILE_TAG}name="{name}" type="{mime}">\n{text}\n</file>'


def _skipped(entry: dict[str, Any], name: str, why: str, *, tell: bool = True) -> tuple[list[UserContent], str]:
    entry["outcome"] = f"not read: {why}"
    return [f"[{name} was not read: {why}.]"], (f"I could not read {name}: {why}." if tell else "")


NOT_KEPT = "its contents reached the model on the turn it was shared, and are not kept"


def without_contents(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The messages with every file's contents replaced by a reference (name, type, size, id): what is
    stored of a run's messages anywhere — a parked run's state, a compacted conversation's snapshot — so
    a file reaches the model once, on its turn, and never the database. Hashes every file: call it in a
    thread for a run that may carry large ones."""
    out: list[ModelMessage] = []
    for m in messages:
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) and not isinstance(p.content, str)
                                               for p in m.parts):
            m = dataclasses.replace(m, parts=[_strip(p) if isinstance(p, UserPromptPart) else p for p in m.parts])
        out.append(m)
    return out


def _id(data: bytes) -> str:
    """A file's id in a reference: its content hash, as recorded beside its message (`sha256`)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def _strip(part: UserPromptPart) -> UserPromptPart:
    if isinstance(part.content, str):
        return part
    kept: list[UserContent] = []
    for item in part.content:
        if isinstance(item, BinaryContent):
            kept.append(f"[file {item.identifier} ({item.media_type}, {len(item.data)} bytes, id {_id(item.data)}): "
                        f"{NOT_KEPT}]")
        elif isinstance(item, str) and item.startswith(FILE_TAG) and ">" in item \
                and not item.endswith(f"[{NOT_KEPT}]</file>"):  # a reference already (a snapshot stored again)
            head, body = item.split(">", 1)
            body = body.removeprefix("\n").removesuffix("</file>").removesuffix("\n").encode()
            kept.append(f'{head} bytes="{len(body)}" id="{_id(body)}">[{NOT_KEPT}]</file>')
        else:
            kept.append(item)
    return dataclasses.replace(part, content=kept)
