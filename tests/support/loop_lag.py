"""How long the event loop's own work delayed a timer, not counting the time the machine kept it waiting.

A loop stall is a bug of ours when the loop's thread was busy (code holding the loop) or blocked
(a synchronous wait on it, such as a database lock). On a loaded machine the thread also waits,
runnable, for a CPU: that is the machine's delay, not ours, and Linux counts it per thread in
/proc/self/task/<tid>/schedstat (the second field, nanoseconds spent on a run queue). The loop's
thread is not the only one that matters: a worker thread (aiosqlite's, the default executor's)
that holds the GIL and is then kept off the CPU keeps the loop waiting for the GIL too, asleep
rather than runnable, so its own wait never shows in the loop thread's figure (seen as a 145 ms
"stall" in a fresh-clone run of the whole lane, six workers on two cores). So the delay counted is
the timer's lateness minus what the process's threads spent waiting for a CPU meanwhile. That
never hides what these tests look for: a thread blocked on a lock or a synchronous wait sleeps,
it is not on a run queue. Where the files are absent the whole lateness counts (the stricter reading).

Nor is the collector's pass over the test process's own heap ours: the daemon these tests run in
process shares it with pytest and every fixture, unfrozen, where `agent-gateway run` freezes what
start-up built and collects its young generation less often (`gateway.daemon.freeze_startup_objects`).
A full pass over that heap on a loaded machine took 0.3 s in a fresh-clone run of the hostile-input
test. So the time the collector ran meanwhile (`gc.callbacks`) is not counted either.
"""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

_TASKS = Path("/proc/self/task")


class _Collections:
    """The collector's running time in this process, summed (`gc.callbacks`: a start and a stop per pass)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._began = 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._began


_COLLECTIONS = _Collections()


def _waited_for_cpu() -> dict[str, float]:
    """Each live thread's total time spent runnable but off the CPU, by thread id."""
    waited: dict[str, float] = {}
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return waited
    for task in tasks:
        try:
            waited[task.name] = int((task / "schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between the listing and the read
    return waited


def _waited_since(before: dict[str, float]) -> float:
    after = _waited_for_cpu()
    return sum(total - before.get(tid, 0.0) for tid, total in after.items())


async def own_lag(seconds: float) -> float:
    """Sleep `seconds` on the running loop; return how late the wake-up came by the loop's own doing."""
    loop = asyncio.get_running_loop()
    started, waited, collecting = loop.time(), _waited_for_cpu(), _COLLECTIONS.total
    await asyncio.sleep(seconds)
    late = loop.time() - started - seconds
    return max(0.0, late - _waited_since(waited) - (_COLLECTIONS.total - collecting))
