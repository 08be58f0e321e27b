#!/usr/bin/env python3
"""What the audio capability's own work costs on the gateway: reading a clip's length (before a
transcription is paid for) and re-encoding speech as OGG/Opus (a Telegram voice note), with PyAV in
a worker thread, and how long the event loop waits meanwhile (it should not: the work is off it).
Printed, not judged: there is no target. The clips are tones made with PyAV.

    .venv/bin/python bench/audio.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capabilities.audio_codec import duration, off_loop, to_ogg_opus  # noqa: E402
from tests.support.audio import tone  # noqa: E402


async def lag_while(job: object, data: bytes) -> tuple[float, float]:
    """(seconds the job took, the event loop's longest wait for a 1 ms tick meanwhile)."""
    worst = 0.0
    done = asyncio.Event()

    async def ticks() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    ticker = asyncio.create_task(ticks())
    start = time.perf_counter()
    await off_loop(job, data)  # type: ignore[arg-type]
    took = time.perf_counter() - start
    done.set()
    await ticker
    return took, worst


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases = [("duration of a 60 s voice note (OGG/Opus)", duration, tone(60, "ogg")),
             ("duration of a 10 min voice note (OGG/Opus)", duration, tone(600, "ogg")),
             ("duration of a 10 min MP3", duration, tone(600, "mp3")),
             ("OGG/Opus from 30 s of MP3 speech", to_ogg_opus, tone(30, "mp3")),
             ("OGG/Opus from 5 min of MP3 speech", to_ogg_opus, tone(300, "mp3"))]
    for name, job, data in cases:
        took, lag = zip(*[await lag_while(job, data) for _ in range(args.repeat)], strict=True)
        print(f"{name:<44} {len(data) / 1024:8.0f} KB   median {statistics.median(took) * 1000:7.1f} ms   "
              f"worst loop lag {max(lag) * 1000:5.1f} ms   n={args.repeat}")


if __name__ == "__main__":
    asyncio.run(main())
