"""Commands a person types in the chat, answered by the gateway itself (no model run).

`/approvals` shows this conversation's approval modes; `/approvals auto on|off` switches
"approve all in this conversation"; `/approvals ask on|off` switches "ask for every tool" —
only for the people the binding lets decide (`gateway.approvals` asks, on every door).
`/memory` lists what agents wrote about the sender, answered privately (gateway.memory).
`!` works as well as `/` for platforms that swallow unknown slash commands (Slack).

Commands reach this module only through `gateway.inbound`, after the ledger, admission and
identity; every answer goes out through `gateway.delivery.Outbound`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from . import memory
from .approvals import Approvals
from .delivery import Outbound
from .messages import ChatKind, InboundMessage
from .policy import Modes
from .store import repo
from .store.notes import NoteStore
from .surface import target_for

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


@dataclass(frozen=True)
class Asked:
    """One command as the inbound path hands it over: admitted, recorded, its sender identified."""

    command: Command
    message: InboundMessage
    person_id: str
    agent_id: str
    conversation: Callable[[], Awaitable[repo.ConversationRef]]  # the message's conversation, created if new


class Commands:
    def __init__(self, store: repo.Store, approvals: Approvals, outbound: Outbound) -> None:
        self._store, self._approvals, self._outbound = store, approvals, outbound

    async def run(self, asked: Asked) -> str | None:
        """Answer the command; returns the conversation it touched, if any."""
        if asked.command.name == "approvals":
            return await self._approvals_command(asked)
        await self._memory_command(asked)
        return None

    def _tell(self, message: InboundMessage, text: str) -> None:
        self._outbound.send(target_for(message), text, private_to=message.sender.account_id)

    async def _approvals_command(self, asked: Asked) -> str:
        conv = await asked.conversation()
        args = asked.command.args
        switch = {"on": True, "off": False}.get(args[1]) if len(args) == 2 else None
        result: Modes | str | None = None
        if switch is not None and args[0] in ("auto", "all"):
            result = await self._approvals.switch(conv, asked.message.sender, surface="command", approve_all=switch)
        elif switch is not None and args[0] in ("ask", "every"):
            result = await self._approvals.switch(conv, asked.message.sender, surface="command",
                                                  ask_every_tool=switch)
        else:
            modes = await self._approvals.modes(conv.id)
            state = (
                "approve all is on" if modes.approve_all else "ask for every tool is on" if modes.ask_every_tool
                else "the agent's normal policy applies"
            )
            await self._approvals.notice(conv, f"Here, {state}. {APPROVALS_HELP}")
        if isinstance(result, str):  # refused: only the sender hears why, and nothing changed
            self._tell(asked.message, result)
        return conv.id

    async def _memory_command(self, asked: Asked) -> None:
        """`/memory`: the sender's own notes, answered privately; nothing enters the conversation."""
        args = asked.command.raw_args
        text = await memory.self_service(
            NoteStore(self._store), asked.person_id, args[0].lower() if args else "",
            args[1] if len(args) > 1 else None, default_agent=asked.agent_id,
            one_to_one=asked.message.chat_kind is ChatKind.DM,
        )
        self._tell(asked.message, text)
