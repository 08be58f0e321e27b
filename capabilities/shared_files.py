"""Files shared earlier in this conversation: found by name among the recorded attachments, and
fetched again from the platform with the bot's own credentials.

Three tools read a file someone shared on an earlier turn (`view_image`, `transcribe_audio`,
`fetch_file`): each finds it the same way and fetches it again the same way, so the model hears
the same sentences from each, and a file's bytes are never kept by the gateway (the record holds
the adapter's reference, not the contents: `gateway/inbound/attachments.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic_ai.tools import RunContext

from gateway.inbound.attachments import CAPABILITY as ATTACHMENTS
from gateway.messages import Attachment
from gateway.outbound.adapter import AttachmentTooLarge, PlatformError
from gateway.outbound.files import size_text
from gateway.runs.turn import Turn

from .failures import trouble

RUNS_LOOKED_AT = 200  # the conversation's latest runs searched for the file


async def shared_earlier(turn: Turn) -> list[dict[str, Any]]:
    """The files shared in this conversation, newest first, as recorded with their messages."""
    found: list[dict[str, Any]] = []
    for run_id in await turn.history.run_ids(RUNS_LOOKED_AT):
        for value in (await turn.state.items(ATTACHMENTS, f"run:{run_id}")).values():
            found.extend(reversed(json.loads(value)))
    return found


def media_type(entry: dict[str, Any]) -> str:
    """The recorded file's media type, without parameters, lower case ("" when none was said)."""
    return str(entry.get("type") or "").split(";")[0].strip().lower()


def find(ctx: RunContext[Turn], files: list[dict[str, Any]], name: str,
         matches: Callable[[dict[str, Any]], bool] | None = None,
         listed: Callable[[dict[str, Any]], bool] | None = None, what: str = "") -> dict[str, Any] | str:
    """The newest file called `name` (or that `matches`), or a retry naming the files shared here
    (those `listed`, e.g. only audio; `what` names them: "audio shared here")."""
    entry = next((f for f in files if f.get("name") == name or (matches is not None and matches(f))), None)
    if entry is not None:
        return entry
    known = ", ".join(sorted({str(f.get("name")) for f in files if listed is None or listed(f)})[:20]) or "none"
    return trouble(ctx, "mistake", f"no file named {name!r} was shared in this conversation "
                                   f"({what or 'shared here'}: {known})")


async def fetch_again(ctx: RunContext[Turn], entry: dict[str, Any], refused: str, after: str = "") -> bytes | str:
    """The recorded file's bytes from the platform again, or a sentence why not: `refused` opens it
    ("Not opened", "Not copied") and `after` ends it (" Nothing was written."); a platform that failed
    for now is a retry."""
    turn = ctx.deps
    name, size = str(entry.get("name")), entry.get("size")
    if turn.fetch_attachment is None:
        return f"{refused}: files cannot be fetched again on this platform; ask the person to share {name} again.{after}"
    try:
        data = await turn.fetch_attachment(Attachment(name, media_type(entry), size, ref=entry.get("ref")))
    except AttachmentTooLarge:
        shown = f" ({size_text(size)})" if isinstance(size, int) else ""
        return f"{refused}: {name}{shown} is larger than this gateway reads.{after}"
    except PlatformError as e:
        return trouble(ctx, "transient", f"the platform did not give {name} back ({e}){after and '; nothing was written'}")
    if data is None:
        return f"{refused}: {name} can no longer be fetched from the platform.{after}"
    return data
