"""Commands a person types in the chat, answered by the gateway itself (no model run).

`/approvals` shows this conversation's approval modes; `/approvals auto on|off` switches
"approve all in this conversation"; `/approvals ask on|off` switches "ask for every tool".
`/memory` lists what agents wrote about the sender, answered privately (gateway.memory).
`!` works as well as `/` for platforms that swallow unknown slash commands (Slack).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
