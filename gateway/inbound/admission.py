"""Which messages a binding answers. Pure: the facts come in, a decision comes out.

The adapter reports what it can see (mentioned, a reply to the bot, the chat kind); the core
knows whether the bot is already part of the conversation (a stored conversation exists for
its key). Pairing codes for unknown DM senders are issued by the caller when the decision
says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from bindings.models import BindingSpec

from gateway.messages import ChatKind, InboundMessage


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    reason: str = ""
    needs_pairing: bool = False


def admit(
    binding: BindingSpec,
    msg: InboundMessage,
    *,
    in_conversation: bool,
    sender_allowed: bool = False,
) -> Admission:
    """Decide for one message.

    `in_conversation`: the bot already answers in this conversation (a thread it is part of).
    `sender_allowed`: the sender is on the binding's user allowlist or was paired.
    """
    if not binding.enabled:
        return Admission(False, "binding disabled")
    if msg.sender.is_bot and binding.admission.ignore_bots:
        return Admission(False, "sender is a bot")
    if msg.is_edit and binding.admission.ignore_edits:
        return Admission(False, "edits are ignored")
    if not msg.text.strip() and not msg.attachments:
        return Admission(False, "empty message")

    allowed_user = sender_allowed or msg.sender.account_id in binding.admission.users
    if msg.chat_kind is ChatKind.DM:
        policy = binding.dm_policy
        if policy == "off":
            return Admission(False, "direct messages are off")
        if policy == "open":
            return Admission(True)
        if allowed_user:
            return Admission(True)
        if policy == "pairing":
            return Admission(False, "sender not paired", needs_pairing=True)
        return Admission(False, "sender not on the allowlist")

    channels = binding.admission.channels
    if channels and msg.channel not in channels:
        return Admission(False, "channel not on the allowlist")
    override = binding.override_for(msg.channel)
    respond_to = (override.respond_to if override and override.respond_to else None) or binding.admission.respond_to
    if respond_to == "all" or msg.mentioned or msg.reply_to_bot or in_conversation:
        return Admission(True)
    return Admission(False, "mention required")
