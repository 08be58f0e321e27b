"""Which timers the running loop is asked for, and by whose code: what would wake an idle daemon.

`timers_set_from(folder)` records, while it is open, every `call_at` (so `call_later`, `asyncio.sleep`,
`asyncio.timeout` too) whose first caller outside asyncio's own modules lives under `folder`, as
`file:function`. `waits_on(task, chain)`: the task is suspended exactly there, its coroutines awaiting each
other in that order (by qualified name), so a test knows a loop has reached its wait between passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

_ASYNCIO = os.path.dirname(asyncio.__file__)


@contextlib.contextmanager
def timers_set_from(folder: str) -> Iterator[list[str]]:
    loop = asyncio.get_running_loop()
    made: list[str] = []
    ours = folder.rstrip(os.sep) + os.sep

    def call_at(when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_ASYNCIO):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(ours):
            made.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
        return original(when, callback, *args, context=context)

    original = loop.call_at
    loop.call_at = call_at  # type: ignore[method-assign]
    try:
        yield made
    finally:
        del loop.call_at  # the class's own again


def waits_on(task: asyncio.Task[Any], *chain: str) -> bool:
    names, awaited = [], task.get_coro()
    while awaited is not None and hasattr(awaited, "cr_await"):
        names.append(awaited.__qualname__)
        awaited = awaited.cr_await
    return names == list(chain)
