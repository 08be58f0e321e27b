"""Socket Mode frames checked before slack_sdk reads them: a malformed one is logged once and dropped.

slack_sdk logs a traceback at error level for a frame that is not JSON, or whose payload is not
an object, and Bolt answers a frame of no known type with two more lines. Slack does not send
such frames; a broken proxy or a fuzzer does, and the log should say so once, plainly.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.socket_mode.aiohttp import SocketModeClient

# Frames Slack sends: the first two are about the connection, the rest carry a request to ack.
CONTROL = frozenset({"hello", "disconnect"})
REQUESTS = frozenset({"events_api", "interactive", "slash_commands"})


def frame_problem(raw: str) -> str | None:
    """Why a frame cannot be a Slack frame, or None when it can."""
    try:
        frame: Any = json.loads(raw)
    except ValueError:
        return "not JSON"
    if not isinstance(frame, dict):
        return f"a JSON {type(frame).__name__}, not an object"
    kind = frame.get("type")
    if kind in CONTROL:
        return None
    if kind not in REQUESTS:
        return f"unknown type {str(kind)[:40]!r}"
    if not isinstance(frame.get("envelope_id"), str) or not isinstance(frame.get("payload"), dict):
        return f"{kind} frame without an envelope id and an object payload"
    return None


class CheckedSocketModeClient(SocketModeClient):
    """slack_sdk's aiohttp Socket Mode client, which drops malformed frames with one warning."""

    async def enqueue_message(self, message: str) -> None:
        problem = frame_problem(message) if isinstance(message, str) else "not text"
        if problem is not None:
            self.logger.warning("dropped a malformed Socket Mode frame (%s)", problem)
            return
        await super().enqueue_message(message)
