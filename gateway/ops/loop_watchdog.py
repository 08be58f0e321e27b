"""The event-loop watchdog: a stall of the loop is a bug, and this names the task that caused it.

The lag histogram (metrics.py) sees a stall only after it ends, and cannot say whose it was: while
the loop is stuck, nothing on the loop runs. So the watchdog is a thread. The loop beats every
BEAT seconds (a timer callback); each beat also tells `on_beat` how late it ran, which is the loop's
lag (the histogram's observation: one timer serves both, so an idle loop wakes 20 times a second,
not 40). The thread looks just after the last beat would be a stall, and when the last beat is older
than the threshold it reads what the loop's thread is doing right now (`sys._current_frames()`)
and which task the loop is running (`asyncio.current_task(loop)`). When the beats resume it logs
one warning with the stall's length, the task's name and coroutine, and where it was stuck; a
stall that goes on is logged every STILL_STALLED seconds, so a loop frozen for good is told too.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gateway.loop")

BEAT = 0.05
STALL_THRESHOLD = 0.25  # seconds: a stall longer than this is logged
STILL_STALLED = 10.0
FRAMES = 4  # the innermost frames named in the log line
LOOK_PAST = 0.002  # seconds past the threshold the thread looks while the loop beats (a thread's wake-up is late, never early)


@dataclass
class _Stall:
    since: float  # the last beat before it
    task: str
    where: str
    told: float  # when it was last logged as going on


class LoopWatchdog:
    def __init__(self, *, threshold: float = STALL_THRESHOLD, on_stall: Callable[[float], None] | None = None,
                 on_beat: Callable[[float], None] | None = None) -> None:
        """`on_stall(seconds)` after each stall; `on_beat(seconds)` at each beat, with how late it ran."""
        self.threshold = threshold
        self._on_stall = on_stall
        self._on_beat = on_beat
        self._beat = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start beating in the running loop, and the thread that watches the beats."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop.clear()
        self._beat = time.monotonic()
        self._timer = self._loop.call_later(BEAT, self._tick)
        self._thread = threading.Thread(target=self._watch, name="gateway:loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def _tick(self) -> None:
        self._beat = time.monotonic()
        assert self._loop is not None and self._timer is not None
        if self._on_beat is not None:
            # How much later than it was due the loop ran this timer: what every callback due meanwhile waited.
            self._on_beat(max(0.0, self._loop.time() - self._timer.when()))
        self._timer = self._loop.call_later(BEAT, self._tick)

    def _watch(self) -> None:
        stall: _Stall | None = None
        wait = BEAT / 2
        while not self._stop.wait(wait):
            now, beat = time.monotonic(), self._beat
            if stall is not None and beat > stall.since:
                self._ended(stall, beat - stall.since - BEAT)
                stall = None
            elif stall is None and now - beat - BEAT > self.threshold:
                stall = self._caught(beat, now)
            elif stall is not None and now - stall.told >= STILL_STALLED:
                stall.told = now
                log.error("event loop still stalled", extra={"stalled_seconds": round(now - stall.since - BEAT, 3),
                                                              "task": stall.task, "where": stall.where})
            # While the loop beats, look next just past the moment the last beat would be a stall (~3 looks a
            # second instead of 40: each took the GIL from the loop); in a stall, every BEAT/2, to tell its end.
            # Just past, not BEAT/2 past: a stall that ends within BEAT/2 of the threshold (a loop blocked
            # 0.3 s) was over by then, one in two went untold.
            wait = BEAT / 2 if stall is not None else max(beat + BEAT + self.threshold - now, 0.0) + LOOK_PAST

    def _caught(self, beat: float, now: float) -> _Stall:
        """What the loop's thread is doing now, in the middle of the stall."""
        task = asyncio.current_task(self._loop) if self._loop is not None else None
        if task is None:
            name = "no task (a callback)"
        else:
            coro = task.get_coro()
            name = f"{task.get_name()} ({getattr(coro, '__qualname__', type(coro).__name__)})"
        frame = sys._current_frames().get(self._loop_thread)
        where = "unknown"
        if frame is not None:
            stack = traceback.extract_stack(frame)[-FRAMES:]
            where = " < ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(stack))
        return _Stall(beat, name, where, now)

    def _ended(self, stall: _Stall, seconds: float) -> None:
        log.warning("event loop stalled %.3f s in task %s", seconds, stall.task,
                    extra={"stalled_seconds": round(seconds, 3), "task": stall.task, "where": stall.where})
        if self._on_stall is not None:
            self._on_stall(seconds)
