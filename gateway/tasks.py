"""Stopping a task of our own: cancel it, wait for it to end, and never swallow our own cancellation.

`task.cancel()` then `with suppress(CancelledError): await task` was the stop path's idiom, and it
is wrong in one case: when the task doing the stopping is itself cancelled while it waits (a
shutdown that gives up, a caller's timeout), the CancelledError it receives is its own, and the
suppress ate it; the stop then carried on as if nothing had asked it to end.

`cancel_and_wait` waits with `asyncio.wait`, which returns when the tasks are done and raises only
when the waiting task is cancelled during the wait. That, rather than checking
`asyncio.current_task().cancelling()`, is the test: in a `finally` that cleans up after a
cancellation already delivered, `cancelling()` stays above zero, and raising there again would cut
the cleanup short; a cancellation that arrives while waiting is always the caller's and always
goes on. What the stopped tasks raised is retrieved (no "exception was never retrieved") and logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.clock import Clock, Timer

log = logging.getLogger("gateway.tasks")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None, what: str | None = None,
                          level: int = logging.WARNING) -> None:
    """Cancel `tasks` (None is skipped) and wait until every one has ended.

    Their own CancelledError is expected and kept quiet; an exception one of them ended with is
    logged at `level` under `what` (default: the task's name), not raised: a stop goes on. A
    cancellation of the caller while it waits propagates.
    """
    live = [t for t in tasks if t is not None]
    if not live:
        return
    for task in live:
        task.cancel()
    await asyncio.wait(live)
    for task in live:
        if not task.cancelled() and (error := task.exception()) is not None:
            name = what or (task.get_name() if isinstance(task, asyncio.Task) else repr(task))
            log.log(level, "%s ended with %s while being stopped: %s", name, type(error).__name__, error)


class Later:
    """A task started only once `delay` seconds of `clock` have passed, or at once for a delay of 0.

    Until then it is one timer: work that usually ends sooner (a run's typing renewals, due 4 s in,
    where most runs have finished) costs no task, no task steps and no cancellation round trip.
    `start` may return None when, by then, there is nothing left to do (no task is made).
    `cancel` stops the timer or the task; `close` also waits for a started task to end.
    """

    def __init__(self, clock: Clock, delay: float, start: Callable[[], Coroutine[Any, Any, None] | None],
                 *, name: str | None = None) -> None:
        self._start, self._name = start, name
        self._task: asyncio.Task[None] | None = None
        self._timer: Timer | None = None
        if delay > 0:
            self._timer = clock.call_later(delay, self._begin)
        else:
            self._begin()

    def _begin(self) -> None:
        self._timer = None
        work = self._start()
        if work is not None:
            self._task = asyncio.create_task(work, name=self._name)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        self.cancel()
        await cancel_and_wait(self._task)
