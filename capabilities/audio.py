"""audio: voice messages heard before the run, and two tools: `transcribe_audio` and `generate_speech`.

Our own, because pydantic-ai and its harness have no audio tools: the requests are the openai SDK's
(`audio.transcriptions`, `audio.speech`) on the provider's pooled client (`capabilities/audio_clients.py`),
the audio is read and written by PyAV (`capabilities/audio_codec.py`), files go out through the one
outbound file path (`Turn.share_files`), and a voice message becomes the message's text through the
core's one attachment path (`gateway.inbound.attachments.Listens`).

- Voice messages (`transcribe_voice_messages`, on by default): an audio file sent with a message is
  transcribed before the run; the model reads the transcript, marked as one, with its duration.
- Limits: `max_seconds` and `max_bytes` for every clip, checked before the provider is paid (the
  duration is measured here, never taken from the platform or the model).
- What each request made and cost (seconds transcribed, characters spoken; dollars where the provider
  reports tokens genai-prices can price) is recorded with the run the way an image is
  (`Turn.record_media`: the run's row, `runs list`, the media metrics), and in a log line.
- Neither tool asks for approval by default (the seed: "on by default with permission allow"); a
  binding gates or denies them like any tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from openai import APIConnectionError, APIStatusError, APITimeoutError
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from gateway.inbound.attachments import Heard, NotHeard, clock_text, kind
from gateway.outbound.adapter import OutboundFile, PlatformError
from gateway.outbound.files import FileRefused, size_text
from gateway.runs.turn import Turn
from gateway.store.run_costs import MediaKind, MediaSpend

from .audio_clients import CAPABILITY, AudioClients, AudioUnavailable, provider_name
from .audio_codec import NotAudio, duration, off_loop, to_ogg_opus
from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple
from .shared_files import fetch_again, find, shared_earlier

log = logging.getLogger("capabilities.audio")

SPEECH_CHARS = 4096  # OpenAI's own ceiling for one speech request
REQUEST_SECONDS = 120.0  # one transcription or speech request
MAX_SEGMENTS = 500
_NAME = re.compile(r"^[A-Za-z0-9._:/-]{1,100}$")  # a voice or model name as providers spell them
# Tests serve audio on loopback; this lets the url download reach them (cloud-metadata addresses stay
# refused even then). No config field, environment variable or API sets it: only a test does.
_test_allow_local: bool = False


class AudioConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str | None = Field(default=None, description="A provider of gateway.yaml (OpenAI-compatible; a local "
                                 "server by its base_url) or openai; default: the agent's own model's provider")
    transcription_model: str = Field(default="gpt-4o-mini-transcribe", min_length=1, max_length=100)
    speech_model: str = Field(default="gpt-4o-mini-tts", min_length=1, max_length=100)
    voice: str = Field(default="alloy", min_length=1, max_length=100, description="generate_speech's default voice")
    transcribe_voice_messages: bool = Field(default=True, description="Transcribe audio sent with a message "
                                            "before the run, so the model reads what was said")
    max_seconds: int = Field(default=600, ge=1, le=4 * 3600, description="Longest audio transcribed")
    max_bytes: int = Field(default=25 * 1024 * 1024, ge=1, le=200 * 1024 * 1024,
                           description="Largest audio file transcribed, and largest speech answer taken")


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None
    duration_seconds: float
    segments: list[dict[str, Any]]


class Refused(Exception):
    """The audio is not transcribed or spoken: over a limit, not audio, the service failed. `str()` is
    for the person and the model; `transient` says whether trying again later may help."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass
class Audio:
    """One run's audio requests: the config, the provider's client, where usage is recorded."""

    cfg: AudioConfig
    clients: AudioClients
    turn: Turn

    @property
    def provider(self) -> str:
        return provider_name(self.cfg.provider, self.turn.agent.model, self.clients.providers())

    async def measure(self, name: str, data: bytes) -> float:
        """The clip's seconds, or Refused naming the limit it passes."""
        if len(data) > self.cfg.max_bytes:
            raise Refused(f"{name} is {size_text(len(data))}, over the {size_text(self.cfg.max_bytes)} limit for audio")
        try:
            seconds = await off_loop(duration, data)
        except NotAudio as e:
            raise Refused(f"{name} {e}") from None
        if seconds > self.cfg.max_seconds:
            raise Refused(f"{name} is {clock_text(seconds)} long, over the {clock_text(self.cfg.max_seconds)} "
                          "limit for audio here")
        return seconds

    @contextlib.contextmanager
    def _service(self, what: str) -> Iterator[None]:
        """A call to the audio API, its failures as Refused: a server error, a 429 or no answer is transient."""
        try:
            yield
        except AudioUnavailable as e:
            log.warning("audio is not available: %s", e, extra=self.turn.log_fields)
            raise Refused(f"{what} is not set up here ({e})") from None
        except APIStatusError as e:
            raise Refused(f"the {what} service answered with an error (HTTP {e.status_code})",
                          transient=e.status_code >= 500 or e.status_code == 429) from None
        except (APIConnectionError, APITimeoutError):
            raise Refused(f"the {what} service could not be reached", transient=True) from None

    async def transcribe(self, name: str, mime: str, data: bytes, language: str | None = None) -> Transcript:
        seconds = await self.measure(name, data)
        model = self.cfg.transcription_model
        # OpenAI's gpt-4o transcription models answer only `json` (text and usage); whisper-1 and the
        # OpenAI-compatible servers (faster-whisper) answer `verbose_json` with language and segments.
        verbose = not model.startswith("gpt-4o")
        with self._service("transcription"):
            async with self.clients.client(self.provider) as client:
                result = await client.audio.transcriptions.create(
                    model=model, file=(name, data, mime), response_format="verbose_json" if verbose else "json",
                    **({"language": language} if language else {}), timeout=REQUEST_SECONDS)
        text = str(getattr(result, "text", "") or "")
        segments = [{"start_seconds": round(float(s.start), 2), "end_seconds": round(float(s.end), 2),
                     "text": str(s.text).strip()} for s in (getattr(result, "segments", None) or [])[:MAX_SEGMENTS]]
        heard_language = getattr(result, "language", None) or language
        await self.record("transcription", model, seconds=seconds, usage=getattr(result, "usage", None))
        return Transcript(text, heard_language, round(seconds, 2), segments)

    async def speak(self, text: str, voice: str, model: str) -> tuple[bytes, float]:
        """Speech for `text` as OGG/Opus bytes (mono, 48 kHz) and its seconds, or Refused."""
        with self._service("speech"):
            # MP3: what every OpenAI-compatible speech server answers; re-encoded here for voice notes.
            async with self.clients.client(self.provider) as client:
                response = await client.audio.speech.create(model=model, voice=voice, input=text,
                                                            response_format="mp3", timeout=REQUEST_SECONDS)
            data = response.content
        if len(data) > self.cfg.max_bytes:
            raise Refused(f"the speech service answered {size_text(len(data))}, over the "
                          f"{size_text(self.cfg.max_bytes)} limit for audio")
        try:
            ogg = await off_loop(to_ogg_opus, data)
            seconds = await off_loop(duration, ogg)
        except NotAudio as e:
            raise Refused(f"the speech service's answer {e}", transient=True) from None
        await self.record("speech", model, seconds=seconds, characters=len(text))
        return ogg, seconds

    async def record(self, what: MediaKind, model: str, *, seconds: float, characters: int = 0,
                     usage: Any = None) -> None:
        """One request's spend with the run (`Turn.record_media`, as images are) and a log line with its detail."""
        row: dict[str, Any] = {"what": what, "provider": self.provider, "model": model, "seconds": round(seconds, 2)}
        cost: float | None = None
        if characters:
            row["characters"] = characters
        if getattr(usage, "type", None) == "tokens":
            row.update(input_tokens=int(usage.input_tokens or 0), output_tokens=int(usage.output_tokens or 0))
            details = getattr(usage, "input_token_details", None)
            audio_tokens = int(getattr(details, "audio_tokens", 0) or 0) if details is not None else 0
            cost = _price(model, row["input_tokens"], row["output_tokens"], audio_tokens)
        elif getattr(usage, "type", None) == "duration":
            row["billed_seconds"] = float(usage.seconds)
        row["cost_usd"] = cost
        turn = self.turn
        # Transcription is counted in the seconds heard (measured here), speech in the characters spoken.
        await turn.record_media(MediaSpend(what, model, round(seconds, 2) if what == "transcription" else characters,
                                           cost))
        log.info("audio %s", what, extra={**turn.log_fields, **{k: v for k, v in row.items() if v is not None}})


def _price(model: str, input_tokens: int, output_tokens: int, audio_tokens: int) -> float | None:
    """What the request cost in US dollars where pydantic-ai's prices (genai-prices) know the model, else None."""
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.usage import RequestUsage

    usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens, input_audio_tokens=audio_tokens)
    try:
        return round(float(ModelResponse(parts=[], usage=usage, model_name=model, provider_name="openai")
                           .cost().total_price), 6)
    except Exception:  # an unpriced model (a local server's): the tokens are still recorded
        return None


@dataclass
class VoiceListener:
    """`gateway.inbound.attachments.Listens` for one turn: a voice message transcribed before the run."""

    audio: Audio

    @property
    def max_bytes(self) -> int:
        return self.audio.cfg.max_bytes

    async def hear(self, name: str, mime_type: str, data: bytes) -> Heard:
        try:
            t = await self.audio.transcribe(name, mime_type, data)
        except Refused as e:
            said = str(e)  # "voice.ogg is 12:30 long, …" reads "I could not transcribe voice.ogg: it is 12:30 long, …"
            raise NotHeard(f"it {said[len(name) + 1:]}" if said.startswith(f"{name} ") else said) from None
        return Heard(t.text, t.duration_seconds, t.language, self.audio.cfg.transcription_model)


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40] or "speech"


def _toolset(cfg: AudioConfig, clients: AudioClients) -> FunctionToolset[Turn]:
    """The tools, made once for the config: each call's requests are the calling run's (`Audio` of its deps)."""

    async def transcribe_audio(ctx: RunContext[Turn], file_id: str | None = None, url: str | None = None,
                               language: str | None = None) -> dict[str, Any] | str:
        """Turn speech in an audio file into text: a voice note or recording shared in this conversation, or a
        public audio URL.

        Use it when someone asks what was said in a recording, or for a transcript with timings. A voice
        message sent to you is already transcribed before you see it: do not transcribe it again unless
        asked for timings or another language.

        Args:
            file_id: An audio file shared in this conversation, by its name as the conversation shows it
                ("voice.ogg") or its id ("sha256:…"); the newest of that name. Give this or `url`, not both.
            url: A public http(s) URL of an audio file (private and internal addresses are refused).
            language: The spoken language as an ISO-639-1 code ("en", "de"), if known; default: detected.

        Returns:
            The transcript as {text, language, duration_seconds, segments}, that is the words heard, the
            language (where the service says), the clip's length, and up to 500 segments {start_seconds,
            end_seconds, text} where the service gives timings (else []). Audio longer than the gateway's limit (max_seconds) or larger than
            its max_bytes is refused in words naming the limit.
        """
        if (file_id is None) == (url is None):
            return trouble(ctx, "mistake", "give exactly one of `file_id` (a file shared here) or `url`")
        if language is not None and not re.fullmatch(r"[a-z]{2,3}", language):
            return trouble(ctx, "mistake", f"`language` {language!r} is not an ISO-639-1 code such as 'en'")
        try:
            if file_id is not None:
                got = await _shared_audio(ctx, file_id)
                if isinstance(got, str):
                    return got
                name, mime, data = got
            else:
                got_url = await _download(ctx, str(url), cfg.max_bytes)
                if isinstance(got_url, str):
                    return got_url
                name, mime, data = got_url
            t = await Audio(cfg, clients, ctx.deps).transcribe(name, mime, data, language)
        except Refused as e:
            if e.transient:
                return trouble(ctx, "transient", str(e))
            return f"Not transcribed: {e}."
        return {"text": t.text, "language": t.language, "duration_seconds": t.duration_seconds,
                "segments": t.segments}

    async def generate_speech(ctx: RunContext[Turn], text: str, voice: str | None = None,
                              model: str | None = None) -> dict[str, Any] | str:
        """Say something aloud: speech made from your text, posted in this conversation as a voice message.

        Use it when someone asks you to say or read something aloud, or to answer by voice. The person
        hears it; keep your written reply short (what you said aloud need not be repeated as text).

        Args:
            text: The words to speak, at most 4,096 characters.
            voice: One of the speech model's voices (e.g. alloy, ash, coral, echo, nova, sage, shimmer);
                default: this agent's configured voice.
            model: The speech model; default: this agent's configured one.

        Returns:
            What was posted as {shared, name, size_bytes, duration_seconds, sha256} (on Telegram a voice
            note, elsewhere an OGG/Opus audio file), or a sentence saying why not (this conversation takes
            no files, the speech service failed).
        """
        if not text.strip():
            return trouble(ctx, "mistake", "`text` is empty: give the words to speak")
        if len(text) > SPEECH_CHARS:
            return trouble(ctx, "mistake", f"`text` has {len(text):,} characters; speech takes at most "
                                           f"{SPEECH_CHARS:,}: shorten it or split it into several calls")
        voice, model = voice or cfg.voice, model or cfg.speech_model
        for label, value in (("voice", voice), ("model", model)):
            if not _NAME.match(value):
                return trouble(ctx, "mistake", f"`{label}` {value!r} is not a name the speech service knows")
        try:
            ogg, seconds = await Audio(cfg, clients, ctx.deps).speak(text, voice, model)
        except Refused as e:
            if e.transient:
                return trouble(ctx, "transient", str(e))
            return f"No speech was made: {e}."
        file = OutboundFile(f"{_stem(text)}.ogg", ogg, "audio/ogg")
        try:
            shared = await ctx.deps.share_files([file], "", f"generate_speech:{model}:{voice}:{text}")
        except FileRefused as e:
            return f"The speech was made but not posted: {e}."
        except PlatformError as e:
            return trouble(ctx, "transient", f"the platform did not take the voice message ({e})")
        return {"shared": shared.note, "name": file.name, "size_bytes": len(ogg),
                "duration_seconds": round(seconds, 2), "sha256": hashlib.sha256(ogg).hexdigest()}

    return FunctionToolset([transcribe_audio, generate_speech])


async def _shared_audio(ctx: RunContext[Turn], file_id: str) -> tuple[str, str, bytes] | str:
    """An audio file shared in this conversation, fetched again from the platform; or a sentence why not."""
    def is_audio(f: dict[str, Any]) -> bool:
        return kind(str(f.get("name")), str(f.get("type"))) == "audio"

    digest = file_id[7:] if file_id.startswith("sha256:") else None
    entry = find(ctx, await shared_earlier(ctx.deps), file_id, listed=is_audio, what="audio shared here",
                 matches=(lambda f: str(f.get("sha256", "")).startswith(digest)) if digest else None)
    if isinstance(entry, str):
        return entry
    name, mime = str(entry.get("name")), str(entry.get("type") or "")
    if not is_audio(entry):
        return f"Not transcribed: {name} is {mime or 'of an unknown type'}, not audio."
    data = await fetch_again(ctx, entry, "Not transcribed")
    if isinstance(data, str):
        return data
    return name, mime or "application/octet-stream", data


async def _download(ctx: RunContext[Turn], url: str, max_bytes: int) -> tuple[str, str, bytes] | str:
    """A public audio URL, through pydantic-ai's SSRF-guarded download (the address pinned, every redirect
    checked, the body capped while it streams): never a private, loopback or metadata address."""
    from pydantic_ai._ssrf import DownloadTooLargeError, safe_download

    try:
        response = await safe_download(url, allow_local=_test_allow_local, timeout=30, max_bytes=max_bytes)
    except DownloadTooLargeError:
        return f"Not transcribed: the file at that URL is larger than the {size_text(max_bytes)} limit for audio."
    except ValueError as e:
        return trouble(ctx, "mistake", f"that URL cannot be fetched ({e}); give a public http(s) address")
    except Exception as e:
        return trouble(ctx, "transient", f"the URL could not be fetched ({type(e).__name__})")
    if response.status_code >= 400:
        return trouble(ctx, "transient", f"the URL answered HTTP {response.status_code}")
    name = url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0][:100] or "audio"
    mime = response.headers.get("content-type", "application/octet-stream").split(";")[0].strip()
    return name, mime, response.content


def _audio(ctx: BuildContext) -> Audio:
    cfg = ctx.config
    assert isinstance(cfg, AudioConfig)
    return Audio(cfg, ctx.part(CAPABILITY, AudioClients), ctx.turn)


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    cfg = ctx.config
    assert isinstance(cfg, AudioConfig)
    return simple(toolsets=[_toolset(cfg, ctx.part(CAPABILITY, AudioClients))])


def listens(ctx: BuildContext) -> VoiceListener | None:
    cfg = ctx.config
    assert isinstance(cfg, AudioConfig)
    return VoiceListener(_audio(ctx)) if cfg.transcribe_voice_messages else None


register(CapabilityDecl(
    id=CAPABILITY, name="Audio", category="media",
    tools=(ToolDecl("transcribe_audio", summary="Transcribe an audio file shared here, or at a public URL."),
           ToolDecl("generate_speech", summary="Speak text aloud: posted as a voice message.")),
    build=build, config_model=AudioConfig, listens=listens,
    # The tools are the config's and the clients the daemon's; each call's provider (the run's agent's model),
    # spend and posting are the calling run's (`Audio` of its deps). The listener is still made per turn.
    shared=True,
    description="Voice messages transcribed before the agent reads them; transcribe_audio and generate_speech over "
                "the provider's OpenAI-compatible audio API.",
))
