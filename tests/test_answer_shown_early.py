"""The answer shown when the model has written it (`ReplyStream.show_answer`), attacked where it meets
a draft under way: whatever the moment, the person ends with the final text, once, and a native stream
that was started is ended (a Slack stream left open keeps its "writing" look on the finished answer)."""

from __future__ import annotations

import asyncio

from gateway.clock import ManualClock
from gateway.outbound.native_stream import NativeReplyStream
from gateway.store.repo import Store

from .conftest import wait_for
from .test_delivery import TARGET, RecordingChat, store  # noqa: F401 (the store fixture)


class SlowLive:
    """A native stream's platform side whose start takes its time (Slack's chat.startStream on a slow
    network): the stream's first draft is under way while the model finishes its answer."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[tuple[str, str]] = []

    async def start(self, markdown: str) -> str | None:
        self.calls.append(("start", markdown))
        await self.release.wait()
        return "s1"

    async def append(self, markdown: str) -> None:
        self.calls.append(("append", markdown))

    async def stop(self, markdown: str = "") -> str | None:
        self.calls.append(("stop", markdown))
        return "s1"


async def test_an_answer_written_while_the_native_stream_starts_ends_that_stream(store: Store) -> None:
    live, clock, chat = SlowLive(), ManualClock(), RecordingChat(hold=1.0)
    stream = NativeReplyStream(live, chat, TARGET, store, "run1", clock, fresh=True)  # type: ignore[arg-type]
    await stream.append("Hello ")
    clock.advance(1.0)  # the hold is over: the timer's draft starts the live message
    await wait_for(lambda: live.calls, what="the live message being started")
    await stream.append("world.")
    await stream.show_answer()  # the model's answer is written while the start is in flight
    live.release.set()
    await stream.finish("Hello world.")
    stream.close()
    assert [name for name, _ in live.calls][-1] == "stop", f"the live message was never ended: {live.calls}"
    assert "".join(text for _, text in live.calls) == "Hello world."
    assert chat.messages == {}, "the answer was posted again beside the live message"
    [row] = await store.deliveries("run1")
    assert row.final and row.platform_message_id == "s1"
