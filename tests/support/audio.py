"""Real audio for tests, made with PyAV: a tone of a given length, as a voice note (OGG/Opus), MP3 or WAV,
and what a file holds when decoded (its container, codec, channels, rate and length)."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import av
import numpy as np

_CODECS = {"ogg": ("ogg", "libopus", 48000), "mp3": ("mp3", "libmp3lame", 24000), "wav": ("wav", "pcm_s16le", 16000)}


def tone(seconds: float, fmt: str = "ogg", hz: float = 440.0) -> bytes:
    """`seconds` of a sine tone, mono, encoded as `fmt` (ogg: Opus, as a Telegram voice note is)."""
    container, codec, rate = _CODECS[fmt]
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as c:
        stream = c.add_stream(codec, rate=rate, layout="mono")
        t = np.arange(int(seconds * rate)) / rate
        samples = (0.3 * np.sin(2 * math.pi * hz * t) * 32767).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    return out.getvalue()


@dataclass(frozen=True)
class Decoded:
    container: str
    codec: str
    channels: int
    rate: int
    seconds: float
    samples: int  # decoded, across the whole file


def decode(data: bytes) -> Decoded:
    """Open and decode every frame of `data` (raises if it is not audio FFmpeg can read)."""
    with av.open(io.BytesIO(data)) as c:
        stream = next(s for s in c.streams if s.type == "audio")
        samples = sum(frame.samples for frame in c.decode(stream))
        return Decoded(c.format.name, stream.codec_context.name, stream.codec_context.channels,
                       stream.codec_context.sample_rate, float(c.duration / av.time_base) if c.duration else 0.0,
                       samples)
