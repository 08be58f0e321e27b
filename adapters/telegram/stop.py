"""The Stop control on a streaming reply: one inline button, and the data a press brings back. Pure.

editMessageText without `reply_markup` drops a message's inline keyboard, so every edit of a reply
that carries the button passes it again; once the reply is final the keyboard is taken away. A
private chat's message draft (sendMessageDraft, `telegram.drafts`) is not a message and takes no
keyboard: there a reply shows its button only from the moment it is posted (and `/stop` works).

The keyboard is the Bot API's JSON, not PTB's `InlineKeyboardMarkup`: it goes only through
`TelegramBot.call` (one JSON body), and with every edit of a group's streaming reply; building the
PTB objects (each attribute set through their frozen `__setattr__`) and turning them back into this
dict cost ~120 µs a call, a quarter of a whole Bot API call's CPU.
"""

from __future__ import annotations

from typing import Any

from .cards import MAX_CALLBACK_BYTES

_PREFIX = "stop:"


def stop_keyboard(run_id: str) -> dict[str, Any]:
    """The reply markup (an InlineKeyboardMarkup on the wire) with the one ⏹ Stop button."""
    data = f"{_PREFIX}{run_id}"
    if len(data.encode()) > MAX_CALLBACK_BYTES:
        raise ValueError(f"stop callback data is {len(data.encode())} bytes; Telegram allows {MAX_CALLBACK_BYTES}")
    return {"inline_keyboard": [[{"text": "⏹ Stop", "callback_data": data}]]}


def parse_stop(data: str | None) -> str | None:
    """The run id a Stop press names; None for any other button."""
    if not data or not data.startswith(_PREFIX) or len(data) == len(_PREFIX):
        return None
    return data[len(_PREFIX):]
