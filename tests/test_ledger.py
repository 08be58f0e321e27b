"""The inbound ledger drops redeliveries, also after a restart; the pair of one message runs once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.messages import ChatKind, InboundMessage, Sender

from .conftest import running_gateway, wait_for


def _dm(event_id: str, text: str = "hi", dedupe: str | None = None) -> InboundMessage:
    return InboundMessage(platform="web", binding_id="web", workspace="local", channel="chan-1", chat_kind=ChatKind.DM,
                          sender=Sender("local", "local"), text=text, event_id=event_id, message_id=event_id,
                          dedupe_key=dedupe)


async def _assistant_count(gw, conversation_id: str) -> int:
    return sum(1 for m in await gw.store.messages(conversation_id) if m.role == "assistant")


async def test_redelivery_is_dropped_across_restart(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw:
        first = await gw.submit(_dm("ev-1"))
        assert first.accepted
        again = await gw.submit(_dm("ev-1"))
        assert again.duplicate and not again.accepted
        await wait_for(lambda: _assistant_count(gw, first.conversation_id))
    async with running_gateway(config_dir) as gw:
        after = await gw.submit(_dm("ev-1"))
        assert after.duplicate
        assert await _assistant_count(gw, first.conversation_id) == 1
        assert len([m for m in await gw.store.messages(first.conversation_id) if m.role == "user"]) == 1
        assert b'gateway_inbound_duplicates_total{platform="web"} 1.0' in gw.metrics.render()


async def test_two_events_of_one_message_run_once(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw:
        a = await gw.submit(_dm("message-event", dedupe="ts-1"))
        b = await gw.submit(_dm("app-mention-event", dedupe="ts-1"))
        assert a.accepted and b.duplicate


async def test_a_message_in_a_restarts_window_is_taken_or_handed_back_never_dropped(config_dir: Path) -> None:
    """A platform may deliver before the daemon has finished starting (one adapter connected while
    the next still starts) or while it stops. At start the message waits for the gate and runs;
    while stopping, the adapter is told nothing was stored (it does not ack, so it comes again)."""
    from bindings.loader import load_config
    from gateway import extensions
    from gateway.daemon import Gateway
    from gateway.store.availability import NotAccepting

    extensions.register_checks()
    gw = Gateway(load_config(config_dir))
    early = asyncio.create_task(gw.submit(_dm("ev-early", "early bird")))
    # One loop turn runs the task up to its first wait (the gate): a refusal before the start would
    # have ended it by then; no wall-clock window is needed to see that it waits.
    await asyncio.sleep(0)
    assert not early.done()  # waiting at the gate, not refused
    await gw.start()
    try:
        result = await early
        assert result.accepted
        assert result.conversation_id is not None
        conversation_id = result.conversation_id
        await wait_for(lambda: _assistant_count(gw, conversation_id), what="the early message's answer")
    finally:
        await gw.stop()
    with pytest.raises(NotAccepting):
        await gw.submit(_dm("ev-late", "too late"))
    async with running_gateway(config_dir) as gw:
        texts = [m.text for m in await gw.store.messages(conversation_id) if m.role == "user"]
        assert texts == ["early bird"]  # the refused one was not stored: its sender delivers it again
        again = await gw.submit(_dm("ev-late", "too late"))
        assert again.accepted and not again.duplicate
