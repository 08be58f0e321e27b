"""Audio bytes read and written with PyAV (FFmpeg's libraries, in-process): never a shell, never a file.

Both jobs are CPU work on bytes someone else chose (a voice message, a speech server's answer), so
they run in a worker thread under a deadline (`off_loop`), on input already capped in size by the
caller: the event loop never decodes audio.

- `duration`: how long a clip is, from its container (or by adding up its packets where the header does
  not say), so a limit on seconds is checked before a transcription is paid for. Anything FFmpeg cannot
  open as audio is `NotAudio`.
- `to_ogg_opus`: any audio to OGG/Opus, mono at 48 kHz: what Telegram plays as a voice note (sendVoice),
  and what browsers, Slack and Mattermost play as an audio file.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
CODEC_SECONDS = 60.0  # one decode or encode: 5 min of speech re-encodes in ~9 s on a loaded 2-core machine


class NotAudio(Exception):
    """The bytes are not audio FFmpeg can read (or took too long to read). `str()` completes a sentence
    about the file: "voice.ogg " + "is not audio that can be read"."""


def _av():  # type: ignore[no-untyped-def]
    try:
        import av
    except ImportError as e:  # a missing optional piece fails when used, with the install line
        raise NotAudio("cannot be read: PyAV is not installed (pip install av)") from e
    return av


async def off_loop(job: Callable[[bytes], T], data: bytes) -> T:
    """`job(data)` in a worker thread, within CODEC_SECONDS."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(job, data), CODEC_SECONDS)
    except TimeoutError:
        raise NotAudio(f"took longer than {CODEC_SECONDS:g} s to read") from None


def duration(data: bytes) -> float:
    """Seconds of audio in `data`; NotAudio when it has no audio stream FFmpeg can open."""
    av = _av()
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise NotAudio("has no audio in it")
            if container.duration:
                return float(container.duration / av.time_base)
            if stream.duration and stream.time_base:
                return float(stream.duration * stream.time_base)
            total = 0.0
            for packet in container.demux(stream):
                if packet.duration and packet.time_base:
                    total += float(packet.duration * packet.time_base)
            return total
    except av.FFmpegError as e:
        raise NotAudio("is not audio that can be read") from e


def to_ogg_opus(data: bytes) -> bytes:
    """`data` (MP3, WAV, OGG, ...) re-encoded as OGG/Opus, mono, 48 kHz; NotAudio when it cannot be read."""
    av = _av()
    out = io.BytesIO()
    try:
        with av.open(io.BytesIO(data), mode="r") as src, av.open(out, mode="w", format="ogg") as dst:
            audio = next((s for s in src.streams if s.type == "audio"), None)
            if audio is None:
                raise NotAudio("has no audio in it")
            opus = dst.add_stream("libopus", rate=48000, layout="mono")
            for frame in src.decode(audio):
                frame.pts = None  # the encoder re-times what its resampler regroups
                for packet in opus.encode(frame):
                    dst.mux(packet)
            for packet in opus.encode(None):
                dst.mux(packet)
    except av.FFmpegError as e:
        raise NotAudio("is not audio that can be read") from e
    return out.getvalue()
