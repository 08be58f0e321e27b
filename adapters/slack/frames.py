"""Socket Mode frames checked before slack_sdk reads them: a malformed one is logged once and dropped.

slack_sdk logs a traceback at error level for a frame that is not JSON, or whose payload is not
an object, and Bolt answers a frame of no known type with two more lines. Slack does not send
such frames; a broken proxy or a fuzzer does, and the log should say so once, plainly.

The frame is parsed once, where slack_sdk takes it off its queue (`process_message`), and the parsed
frame is what its listeners get: checking it as it was queued parsed it a second time (13-17 us of a
mention's frame, 2 frames a channel mention: bench/README.md, Round 14).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from slack_sdk.socket_mode.aiohttp import SocketModeClient

# Frames Slack sends: the first two are about the connection, the rest carry a request to ack.
CONTROL = frozenset({"hello", "disconnect"})
REQUESTS = frozenset({"events_api", "interactive", "slash_commands"})


def parse_frame(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """The frame, or None and why it cannot be a Slack frame."""
    try:
        frame: Any = json.loads(raw)
    except ValueError:
        return None, "not JSON"
    problem = frame_problem(frame)
    return (frame, None) if problem is None else (None, problem)


def frame_problem(frame: Any) -> str | None:
    """Why a parsed frame cannot be a Slack frame, or None when it can."""
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


# Bolt reads ids out of a payload (user, team, channel, enterprise, the first action) and matches
# listeners on them before any listener of ours runs, and it fails with a TypeError or a
# KeyError, or inside its own error handler, on a field of another type. Slack always sends
# these shapes; only the fields Bolt reads are checked, everything else passes through.
_Ref = dict[str, Any] | str | None


class _Action(BaseModel):
    model_config = ConfigDict(extra="allow")
    action_id: str  # required: Bolt's matchers read action["action_id"] (a KeyError when absent)
    block_id: str | None = None
    value: str | None = None


class _Readable(BaseModel):
    """What Bolt reads out of an event or an interactive payload."""

    model_config = ConfigDict(extra="allow")
    type: str | None = None
    user: _Ref = None
    user_id: str | None = None
    team: _Ref = None
    team_id: str | None = None
    channel: _Ref = None
    channel_id: str | None = None
    enterprise: _Ref = None
    enterprise_id: str | None = None
    callback_id: str | None = None
    thread_ts: str | None = None
    actions: list[_Action] | None = Field(default=None, min_length=1)  # Bolt reads actions[0]
    container: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    view: dict[str, Any] | None = None


def payload_problem(payload: Any) -> str | None:
    """Why Bolt could not read a request's payload (an event callback or an interactive
    payload), or None when it can."""
    if not isinstance(payload, dict):
        return f"a JSON {type(payload).__name__}, not an object"
    if "event" in payload and not isinstance(payload["event"], dict):
        return "event is not an object"
    for where, part in (("", payload), ("event.", payload.get("event"))):
        if part is None:
            continue
        try:
            _Readable.model_validate(part)
        except ValidationError as e:
            first = e.errors()[0]
            return f"{where}{'.'.join(str(x) for x in first['loc'])}: {first['msg']}"
    return None


class CheckedSocketModeClient(SocketModeClient):
    """slack_sdk's aiohttp Socket Mode client, which drops malformed frames with one warning."""

    async def enqueue_message(self, message: str) -> None:
        if not isinstance(message, str):
            self.logger.warning("dropped a malformed Socket Mode frame (not text)")
            return
        await super().enqueue_message(message)

    async def process_message(self) -> None:
        """slack_sdk's own (the next frame to its listeners, each frame in a task of its own), the
        frame parsed once and checked."""
        raw = await self.message_queue.get()
        if raw is None:
            return
        frame, problem = parse_frame(raw)
        if frame is None:
            self.logger.warning("dropped a malformed Socket Mode frame (%s)", problem)
            return
        # Kept as slack_sdk keeps it: the task is not awaited, its listeners log their own errors.
        _ = asyncio.ensure_future(self.run_message_listeners(frame, raw))
