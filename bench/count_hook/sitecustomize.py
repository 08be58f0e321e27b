"""Counts in a bench's daemon (bench/wakeups.py puts this folder on its PYTHONPATH): the loop's
passes, the handles it runs (by callback), the timers made and by whose line, and the LogRecords made and emitted
by logger. SIGWINCH writes what was counted so far to $WAKEUPS_COUNTS/<pid>-<n>.json; the bench
takes two and subtracts. Counts do not move with the machine's load; the patches slow the process,
so its CPU is read from a daemon without this hook.
"""

import asyncio
import asyncio.base_events
import asyncio.events
import json
import logging
import os
import signal
import sys
from collections import Counter

_directory = os.environ.get("WAKEUPS_COUNTS")
_counts: dict[str, Counter] = {name: Counter() for name in ("loop", "timers", "callbacks", "records", "emitted")}
_ASYNCIO = os.path.dirname(asyncio.__file__)
_CHECKOUT = os.getcwd() + os.sep


def _caller() -> str:
    """The first frame outside asyncio's own modules: who asked for the timer."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_ASYNCIO):
        frame = frame.f_back
    if frame is None:
        return "?"
    name = frame.f_code.co_filename
    # Named alike in either checkout: the daemon's own files from its directory (its cwd), a library's
    # from site-packages.
    name = name.removeprefix(_CHECKOUT).split("site-packages/", 1)[-1]
    return f"{name}:{frame.f_lineno} {frame.f_code.co_name}"


def _callback(callback: object) -> str:
    """A handle's callback by name: a task's step by its coroutine's."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {getattr(coro, '__qualname__', type(coro).__name__)}"
    return getattr(callback, "__qualname__", type(callback).__name__)


def _patch() -> None:
    loop_class = asyncio.base_events.BaseEventLoop
    run_once, call_at = loop_class._run_once, loop_class.call_at
    handle_run = asyncio.events.Handle._run

    def counted_run_once(self):  # type: ignore[no-untyped-def]
        _counts["loop"]["passes"] += 1
        # A pass that will wait: nothing ready, so the selector blocks until an event or a timer.
        if not self._ready:
            _counts["loop"]["waits"] += 1
        return run_once(self)

    def counted_call_at(self, when, callback, *args, context=None):  # type: ignore[no-untyped-def]
        _counts["timers"][_caller()] += 1
        return call_at(self, when, callback, *args, context=context)

    def counted_handle_run(self):  # type: ignore[no-untyped-def]
        _counts["loop"]["timer handles run" if isinstance(self, asyncio.TimerHandle) else "handles run"] += 1
        _counts["callbacks"][_callback(self._callback)] += 1
        return handle_run(self)

    loop_class._run_once = counted_run_once
    loop_class.call_at = counted_call_at
    asyncio.events.Handle._run = counted_handle_run

    make = logging.getLogRecordFactory()

    def counted_record(*args, **kwargs):  # type: ignore[no-untyped-def]
        record = make(*args, **kwargs)
        _counts["records"][f"{record.name} {record.levelname}"] += 1
        return record

    logging.setLogRecordFactory(counted_record)
    handle = logging.Handler.handle

    def counted_handle(self, record):  # type: ignore[no-untyped-def]
        emitted = handle(self, record)
        if emitted:
            _counts["emitted"][f"{record.name} {record.levelname}"] += 1
        return emitted

    logging.Handler.handle = counted_handle


_written = [0]


def _write(*_: object) -> None:
    base = os.path.join(str(_directory), f"{os.getpid()}-{_written[0]}")
    _written[0] += 1
    with open(base + ".tmp", "w") as f:
        json.dump({k: dict(v) for k, v in _counts.items()}, f)
    os.replace(base + ".tmp", base + ".json")


if _directory:
    _patch()
    signal.signal(signal.SIGWINCH, _write)
