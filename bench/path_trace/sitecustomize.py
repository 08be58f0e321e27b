"""Marks along one message's path in a bench's daemon (bench/path_steps.py puts this folder on its PYTHONPATH).

With $PATH_TRACE set (a file name), named functions of the gateway, pydantic-ai and httpcore are wrapped
as their modules are imported: each call leaves a mark at its start (and an async one at its end, "name>"),
stamped with CLOCK_MONOTONIC (one clock for every process of the bench) and the loop thread's CPU
(`time.thread_time_ns`). Marks are kept on the loop thread only, in memory, and written to $PATH_TRACE on
SIGUSR2. A wrapper costs ~1 µs a call: the figures are the steps between marks, not the marks.
"""

from __future__ import annotations

import cProfile
import functools
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import signal
import sys
import threading
import time
from typing import Any

_OUT = os.environ.get("PATH_TRACE")
_marks: list[tuple[str, int, int]] = []
_loop_thread = threading.main_thread().ident

# module -> [(attribute path, mark name)]: what the path goes through, in its order.
TARGETS: dict[str, list[tuple[str, str]]] = {
    "gateway.inbound.pipeline": [("Inbound.submit", "submit"), ("Inbound._submit", "_submit")],
    "gateway.store.repo": [("Store.identify", "identify"), ("Store.ingest", "ingest"),
                           ("Store.end_run", "end_run"), ("Store.claim_next_run", "claim_next_run")],
    "gateway.outbound.typing_indicator": [("TypingIndicator.show", "sign"), ("show_typing", "sign task")],
    "gateway.runs.queue": [("Scheduler.start", "scheduler.start"), ("Scheduler.reserve", "reserve")],
    "gateway.runs.runner": [("Runner.execute", "execute"), ("Runner.prepare", "prepare"),
                            ("Runner.drive", "drive"), ("Runner.build_agent", "build_agent"),
                            ("run_agent", "run_agent"), ("AnswerEnd.written", "written")],
    "gateway.outbound.delivery": [("ReplyStream.show_answer", "show_answer"), ("ReplyStream.finish", "finish")],
    "adapters.slack.adapter": [("SlackAdapter.post_message", "post")],
    "adapters.telegram.adapter": [("TelegramAdapter.post_message", "post")],
    "adapters.mattermost.adapter": [("MattermostAdapter.post_message", "post")],
    "pydantic_ai.models.openai._chat_model": [("OpenAIChatModel.request_stream", "request_stream")],
    "httpcore2._backends.anyio": [("AnyIOStream.write", "model write")],  # the OpenAI SDK through pydantic-ai
}


# $PATH_PROFILE: the loop thread under cProfile (on its CPU clock) from each mark named first in a pair
# to the next of the second, summed over the messages; written beside the marks as <PATH_TRACE>.<from>.pstats.
_SPANS = (("submit", "run_agent"), ("answer written", "post>"))
_profiles = {a: cProfile.Profile(time.thread_time_ns, 1e-9) for a, _ in _SPANS} if os.environ.get("PATH_PROFILE") else {}
_ends = {b: a for a, b in _SPANS}
_on: list[str] = []


def mark(name: str) -> None:
    if threading.get_ident() != _loop_thread:
        return
    if _profiles:
        if _on and _ends.get(name) == _on[0]:
            _profiles[_on.pop()].disable()
        elif not _on and name in _profiles:
            _on.append(name)
            _profiles[name].enable()
            return
    _marks.append((name, time.monotonic_ns(), time.thread_time_ns()))


def _wrap(fn: Any, name: str) -> Any:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            mark(name)
            try:
                return await fn(*args, **kwargs)
            finally:
                mark(name + ">")
        return traced
    # A plain call (request_stream is an asynccontextmanager: marked when pydantic-ai asks for it).
    @functools.wraps(fn)
    def traced_sync(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if name == "written":
            if result:
                mark("answer written")
            return result
        mark(name)
        return result
    return traced_sync


def _patch(module: Any) -> None:
    for path, name in TARGETS.get(module.__name__, []):
        owner_path, _, attr = path.rpartition(".")
        owner = module
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is None or not hasattr(owner, attr):
            continue
        raw = inspect.getattr_static(owner, attr)
        wrapped = _wrap(getattr(owner, attr) if not isinstance(raw, (staticmethod, classmethod)) else raw.__func__, name)
        setattr(owner, attr, wrapped)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _dump(*_: object) -> None:
    for name, profile in _profiles.items():
        profile.dump_stats(f"{_OUT}.{name.replace(' ', '_')}.pstats")
    with open(str(_OUT), "w") as f:
        json.dump(_marks, f)


if _OUT:
    sys.meta_path.insert(0, _Finder())
    signal.signal(signal.SIGUSR2, _dump)


# $PATH_HANDLES: every loop handle's CPU, by what it ran (a task's name, its digits dropped, or the callback),
# summed apart for the handles run between a message's `submit` and its model request's bytes ("before the
# request") and the rest; written to <PATH_TRACE>.handles.json.
_handles: dict[str, list[float]] = {}
_before = [False]


def _what(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if owner is not None and hasattr(owner, "get_name") and hasattr(owner, "get_coro"):
        coro = owner.get_coro()
        name = owner.get_name()
        name = name.split(":")[0] if not name.startswith("Task-") else "Task"
        return f"task {name} ({getattr(coro, '__qualname__', '?')})"
    return f"callback {getattr(callback, '__qualname__', repr(callback))}"


def _install_handles() -> None:
    import asyncio.events

    run = asyncio.events.Handle._run

    def timed(self: Any) -> None:
        t0 = time.thread_time_ns()
        run(self)
        spent = time.thread_time_ns() - t0
        entry = _handles.setdefault(("before the request: " if _before[0] else "other: ") + _what(self), [0, 0])
        entry[0] += 1
        entry[1] += spent

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


if _OUT and os.environ.get("PATH_HANDLES"):
    _install_handles()
    _plain_mark = mark

    def mark(name: str) -> None:  # type: ignore[no-redef]
        if name == "submit":
            _before[0] = True
        elif name == "model write" and _before[0]:
            _before[0] = False
        _plain_mark(name)

    _plain_dump = _dump

    def _dump(*_: object) -> None:  # type: ignore[no-redef]
        with open(f"{_OUT}.handles.json", "w") as f:
            json.dump(_handles, f)
        _plain_dump()

    signal.signal(signal.SIGUSR2, _dump)
