"""The inbound ledger drops redeliveries, also after a restart; the pair of one message runs once."""

from __future__ import annotations

from pathlib import Path

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
