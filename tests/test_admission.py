"""Which messages a binding answers, as a table."""

from __future__ import annotations

from typing import Any

import pytest

from bindings.models import BindingSpec
from gateway.inbound.admission import admit
from gateway.messages import ChatKind, InboundMessage, Sender


def binding(**admission: Any) -> BindingSpec:
    extra = {"channels": admission.pop("overrides")} if "overrides" in admission else {}
    return BindingSpec.model_validate({"id": "b", "platform": "web", "agent": "a", "admission": admission, **extra})


def msg(kind: ChatKind = ChatKind.CHANNEL, **kw: Any) -> InboundMessage:
    sender = kw.pop("sender", Sender("U1", "Ada"))
    return InboundMessage(platform="slack", binding_id="b", workspace="T", channel=kw.pop("channel", "C1"),
                          chat_kind=kind, sender=sender, text=kw.pop("text", "hello"), event_id="e", message_id="m",
                          **kw)


@pytest.mark.parametrize(
    ("spec", "message", "in_conversation", "admitted", "reason"),
    [
        (binding(), msg(), False, False, "mention required"),
        (binding(), msg(mentioned=True), False, True, ""),
        (binding(), msg(reply_to_bot=True), False, True, ""),
        (binding(), msg(thread="1.1"), True, True, ""),  # a thread the bot is part of
        (binding(respond_to="all"), msg(), False, True, ""),
        (binding(overrides={"C1": {"respond_to": "all"}}), msg(), False, True, ""),
        (binding(channels=["C2"]), msg(mentioned=True), False, False, "channel not on the allowlist"),
        (binding(), msg(mentioned=True, sender=Sender("B1", "bot", is_bot=True)), False, False, "sender is a bot"),
        (binding(ignore_bots=False), msg(mentioned=True, sender=Sender("B1", "bot", is_bot=True)), False, True, ""),
        (binding(), msg(mentioned=True, is_edit=True), False, False, "edits are ignored"),
        (binding(), msg(mentioned=True, text="   "), False, False, "empty message"),
        # DMs: the binding's policy (open by default outside Telegram)
        (binding(), msg(ChatKind.DM), False, True, ""),
        (binding(dm="off"), msg(ChatKind.DM), False, False, "direct messages are off"),
        (binding(dm="allowlist"), msg(ChatKind.DM), False, False, "sender not on the allowlist"),
        (binding(dm="allowlist", users=["U1"]), msg(ChatKind.DM), False, True, ""),
        (binding(dm="pairing"), msg(ChatKind.DM), False, False, "sender not paired"),
    ],
)
def test_admission(spec: BindingSpec, message: InboundMessage, in_conversation: bool, admitted: bool, reason: str) -> None:
    decision = admit(spec, message, in_conversation=in_conversation)
    assert (decision.admitted, decision.reason) == (admitted, reason)


def test_pairing_is_asked_for_and_a_paired_sender_is_admitted() -> None:
    spec = binding(dm="pairing")
    assert admit(spec, msg(ChatKind.DM), in_conversation=False).needs_pairing
    assert admit(spec, msg(ChatKind.DM), in_conversation=False, sender_allowed=True).admitted


def test_telegram_defaults_to_pairing() -> None:
    spec = BindingSpec.model_validate({"id": "t", "platform": "telegram", "agent": "a",
                                       "telegram": {"token": "env:TG"}})
    assert spec.dm_policy == "pairing"
