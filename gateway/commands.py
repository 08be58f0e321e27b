"""Commands a person types in the chat, answered by the gateway itself (no model run).

`/approvals` shows this conversation's approval modes; `/approvals auto on|off` switches
"approve all in this conversation"; `/approvals ask on|off` switches "ask for every tool".
`/memory` lists what agents wrote about the sender, answered privately (gateway.memory).
`!` works as well as `/` for platforms that swallow unknown slash commands (Slack).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import memory
from .messages import ChatKind, InboundMessage, reply_thread
from .store import repo
from .surface import SubmitResult, target_for

if TYPE_CHECKING:
    from .daemon import Gateway

log = logging.getLogger("gateway.commands")

_COMMAND = re.compile(r"^\s*[/!](?P<name>approvals|memory)(?:@\w+)?\b\s*(?P<args>.*)$", re.S | re.I)


@dataclass(frozen=True)
class Command:
    name: str
    args: list[str]  # lower-cased, for keywords
    raw_args: tuple[str, ...] = ()  # as typed, for names (`/memory stop Diet.md`)


def parse_command(text: str) -> Command | None:
    match = _COMMAND.match(text)
    if not match:
        return None
    return Command(match["name"].lower(), match["args"].lower().split(), tuple(match["args"].split()))


APPROVALS_HELP = (
    "Approval modes for this conversation: `/approvals auto on|off` (approve every gated tool here "
    "without asking) and `/approvals ask on|off` (ask before every tool, MCP tools included)."
)


async def approvals_command(
gw: Gateway, message: InboundMessage, args: list[str], key: str, existing: repo.ConversationRef | None
) -> SubmitResult:
    assert gw.approvals is not None
    if await gw.store.seen(message.binding_id, [f"{message.platform}:{message.event_id}"]):
        return SubmitResult(False, duplicate=True, reason="duplicate")
    conv = existing or await gw.store.create_conversation(
        repo.ConversationRef("", key, message.platform, message.binding_id, message.workspace, message.channel,
                             reply_thread(message), message.chat_kind.value)
    )
    who = message.sender.display_name or message.sender.account_id
    switch = {"on": True, "off": False}.get(args[1]) if len(args) == 2 else None
    if len(args) == 2 and args[0] in ("auto", "all") and switch is not None:
        await gw.approvals.set_mode(conv.id, who=who, approve_all=switch)
    elif len(args) == 2 and args[0] in ("ask", "every") and switch is not None:
        await gw.approvals.set_mode(conv.id, who=who, ask_every_tool=switch)
    else:
        modes = await gw.approvals.modes(conv.id)
        state = (
            "approve all is on" if modes.approve_all else "ask for every tool is on" if modes.ask_every_tool
            else "the agent's normal policy applies"
        )
        await gw.approvals.notice(conv.id, f"Here, {state}. {APPROVALS_HELP}")
    return SubmitResult(False, reason="command", conversation_id=conv.id)

async def memory_command(
gw: Gateway, message: InboundMessage, args: tuple[str, ...], person_id: str, agent_id: str
) -> SubmitResult:
    """`/memory`: the sender's own notes, answered privately; nothing enters the conversation."""
    if await gw.store.seen(message.binding_id, [f"{message.platform}:{message.event_id}"]):
        return SubmitResult(False, duplicate=True, reason="duplicate")
    action = args[0].lower() if args else ""
    text = await memory.self_service(
        memory.NoteStore(gw.store), person_id, action, args[1] if len(args) > 1 else None,
        default_agent=agent_id, one_to_one=message.chat_kind is ChatKind.DM,
    )
    adapter = gw.adapters.get(message.binding_id)
    if adapter is not None:
        try:
            await adapter.tell_privately(target_for(message), message.sender.account_id, text)
        except Exception as e:  # the platform refused; the person can ask again
            log.warning("could not answer /memory privately: %s", e)
    return SubmitResult(False, reason="command")
