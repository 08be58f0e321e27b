"""How long the event loop's own work delayed a timer, not counting the time the machine kept it waiting.

A loop stall is a bug of ours when the loop's thread was busy (code holding the loop) or blocked
(a synchronous wait on it, such as a database lock). On a loaded machine the thread also waits,
runnable, for a CPU: that is the machine's delay, not ours, and Linux counts it per thread in
/proc/thread-self/schedstat (the second field, nanoseconds spent on a run queue). So the delay
counted is the timer's lateness minus what the thread spent waiting for a CPU meanwhile. Where
the file is absent the whole lateness counts (the stricter reading).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _waited_for_cpu() -> float:
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def own_lag(seconds: float) -> float:
    """Sleep `seconds` on the running loop; return how late the wake-up came by the loop's own doing."""
    loop = asyncio.get_running_loop()
    started, waited = loop.time(), _waited_for_cpu()
    await asyncio.sleep(seconds)
    late = loop.time() - started - seconds
    return max(0.0, late - (_waited_for_cpu() - waited))
