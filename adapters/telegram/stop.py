"""The Stop control on a streaming reply: one inline button, and the data a press brings back. Pure.

editMessageText without `reply_markup` drops a message's inline keyboard, so every edit of a reply
that carries the button passes it again; once the reply is final the keyboard is taken away. A
private chat's message draft (sendMessageDraft, `telegram.drafts`) is not a message and takes no
keyboard: there a reply shows its button only from the moment it is posted (and `/stop` works).
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from .cards import MAX_CALLBACK_BYTES

_PREFIX = "stop:"


def stop_keyboard(run_id: str) -> InlineKeyboardMarkup:
    data = f"{_PREFIX}{run_id}"
    if len(data.encode()) > MAX_CALLBACK_BYTES:
        raise ValueError(f"stop callback data is {len(data.encode())} bytes; Telegram allows {MAX_CALLBACK_BYTES}")
    return InlineKeyboardMarkup([[InlineKeyboardButton("⏹ Stop", callback_data=data)]])


def parse_stop(data: str | None) -> str | None:
    """The run id a Stop press names; None for any other button."""
    if not data or not data.startswith(_PREFIX) or len(data) == len(_PREFIX):
        return None
    return data[len(_PREFIX):]
