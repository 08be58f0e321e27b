"""Stopping a task (gateway/tasks.py): the stopped task's cancellation is quiet, the stopper's own is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.messages import ChatKind
from gateway.outbound.adapter import ReplyTarget
from gateway.outbound.typing_indicator import TypingIndicator
from gateway.tasks import cancel_and_wait


async def _slow_to_stop(stopping: asyncio.Event, release: asyncio.Event) -> None:
    """A task that, cancelled, takes until `release` to end (a worker finishing its cleanup)."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        stopping.set()
        await release.wait()
        raise


async def test_a_stopped_task_ends_and_the_stop_returns() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    await cancel_and_wait(task, None)
    assert task.cancelled()


async def test_a_stop_cancelled_while_it_waits_raises_its_own_cancellation() -> None:
    stopping, release = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(_slow_to_stop(stopping, release))
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(worker))
    await stopping.wait()  # the stop is in progress: the worker is cleaning up
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert stopper.cancelled(), "the stopper's cancellation was swallowed"
    release.set()
    await asyncio.wait([worker])
    assert worker.cancelled()


async def test_cleanup_after_a_delivered_cancellation_is_not_cut_short() -> None:
    """In a `finally` running because the task was cancelled, stopping a helper still completes."""
    cleaned: list[str] = []

    async def run() -> None:
        helper = asyncio.create_task(asyncio.Event().wait())
        try:
            await asyncio.Event().wait()
        finally:
            await cancel_and_wait(helper)
            cleaned.append("after the helper")

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["after the helper"]


async def test_what_a_stopped_task_raised_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("closing the socket failed") from None

    task = asyncio.create_task(fails_on_cancel(), name="worker:1")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="gateway.tasks"):
        await cancel_and_wait(task)
    assert "worker:1 ended with RuntimeError while being stopped: closing the socket failed" in caplog.text


class _TypingStuckOnStop:
    """An adapter whose typing call, once cancelled, takes until `release` to give up."""

    def __init__(self) -> None:
        self.stopping, self.release = asyncio.Event(), asyncio.Event()

    async def show_typing(self, target: ReplyTarget) -> None:
        await _slow_to_stop(self.stopping, self.release)


async def test_closing_the_typing_indicator_cancelled_in_progress_propagates() -> None:
    """A real stop path: the gateway's typing indicator closing while a sign is still on its way."""
    adapter, typing = _TypingStuckOnStop(), TypingIndicator()
    target = ReplyTarget("slack", "b1", "T1", "C1", None, ChatKind.CHANNEL)
    await typing.show(adapter, target, "conv-1")  # type: ignore[arg-type]
    close = asyncio.create_task(typing.close())
    await adapter.stopping.wait()
    close.cancel()
    with pytest.raises(asyncio.CancelledError):
        await close
    assert close.cancelled()
    adapter.release.set()
    await typing.close()  # a second close, not cancelled, ends what is left
