"""The Stop control on a streaming reply, as Block Kit, and the value a click brings back. Pure.

A posted-and-edited reply carries the button in its own blocks. Once a message has blocks Slack
shows them instead of its `text`, so the reply's text goes in section blocks above the button, and
every edit sends both again (chat.update with `text` alone drops the blocks, and the button with
them). When the reply is final an update with `text` alone takes the button away.

A natively streamed reply (chat.startStream / appendStream) cannot carry it: those methods take
markdown and append-only chunks — a block appended there stays in the message for good — and only
chat.stopStream, which ends the stream, takes `blocks`. So there the control is a small message of
its own in the thread, posted when the reply starts and deleted when it is final.
"""

from __future__ import annotations

from typing import Any

STOP_ACTION = STOP_BLOCK = "gw_stop"
CONTROL_BLOCK = "gw_writing"  # marks the control message beside a native stream
_VALUE = "stop:"
SECTION_CHARS = 3_000  # Slack's cap on a section's text
WRITING = "Writing a reply…"


def stop_button(run_id: str) -> dict[str, Any]:
    return {"type": "actions", "block_id": STOP_BLOCK, "elements": [
        {"type": "button", "action_id": STOP_ACTION, "text": {"type": "plain_text", "text": "Stop"},
         "style": "danger", "value": f"{_VALUE}{run_id}"}]}


def reply_blocks(text: str, run_id: str) -> list[dict[str, Any]]:
    """The reply's text as sections (each within Slack's cap), then the Stop button."""
    sections = [{"type": "section", "block_id": f"gw_reply_{n}", "text": {"type": "mrkdwn", "text": text[i:i + SECTION_CHARS]}}
                for n, i in enumerate(range(0, len(text), SECTION_CHARS)) if text[i:i + SECTION_CHARS].strip()]
    return [*sections, stop_button(run_id)]


def control_blocks(run_id: str) -> list[dict[str, Any]]:
    """The separate control beside a natively streamed reply."""
    return [{"type": "context", "block_id": CONTROL_BLOCK, "elements": [{"type": "mrkdwn", "text": WRITING}]},
            stop_button(run_id)]


def is_reply(blocks: list[dict[str, Any]] | None) -> bool:
    """Whether a message of ours with these blocks is (part of) a reply: not an approval card (its
    buttons), not the control beside a native stream; a reply carrying its own Stop button is one."""
    return not any((b.get("type") == "actions" and b.get("block_id") != STOP_BLOCK) or b.get("block_id") == CONTROL_BLOCK
                   for b in blocks or [])


def parse_stop(action_id: str, value: str) -> str | None:
    """The run id a Stop click names; None for any other action."""
    if action_id != STOP_ACTION or not value.startswith(_VALUE) or len(value) == len(_VALUE):
        return None
    return value[len(_VALUE):]
