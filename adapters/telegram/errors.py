"""python-telegram-bot's errors translated into the core's at the adapter's edge.

`RetryAfter` (429) becomes `RateLimited` so the core waits as told; every other refusal is a
`PlatformError` naming the method. Some refusals are facts, not failures, and are recognised
here by their text because the Bot API has no codes for them: "message is not modified"
(an edit to identical content), "can't parse entities" (HTML Telegram would not accept), and a
file over the Bot API's size limit: HTTP 413 "Request Entity Too Large" on a send (JSON from
api.telegram.org today, an nginx HTML page once: python-telegram-bot raises `NetworkError` for
both, its text starting with the phrase) or 400 "file is too big" (getFile past 20 MB). That one
is `FileTooLarge`, which the core tells the model in words and never tries again: the same bytes
would be refused the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from gateway.outbound.adapter import FileTooLarge, PlatformError, RateLimited


def is_not_modified(e: TelegramError) -> bool:
    return isinstance(e, BadRequest) and "message is not modified" in e.message.lower()


def is_parse_error(e: TelegramError) -> bool:
    return isinstance(e, BadRequest) and "can't parse entities" in e.message.lower()


def is_too_large(e: TelegramError) -> bool:
    text = e.message.lower()
    return ((isinstance(e, NetworkError) and text.startswith("request entity too large"))
            or (isinstance(e, BadRequest) and "file is too big" in text))


def retry_after_seconds(e: RetryAfter) -> float:
    # PTB 22 keeps the value as a timedelta; its public property still returns an int with a
    # deprecation warning unless PTB_TIMEDELTA is set, so read the stored value when present.
    value = getattr(e, "_retry_after", None)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(e.retry_after)  # type: ignore[arg-type]


@contextmanager
def translated(method: str) -> Iterator[None]:
    """Run a Bot API call; raise the core's exception types for what Telegram refused."""
    try:
        yield
    except RetryAfter as e:
        raise RateLimited(retry_after_seconds(e), method) from e
    except TelegramError as e:
        if is_too_large(e):  # the phrase alone: an nginx page's HTML is no text for the model
            raise FileTooLarge(f"telegram {method}: {e.message.split('. Parsing')[0]}") from e
        raise PlatformError(f"telegram {method}: {e.message}") from e
