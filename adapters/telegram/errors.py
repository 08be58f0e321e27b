"""python-telegram-bot's errors translated into the core's at the adapter's edge.

`RetryAfter` (429) becomes `RateLimited` so the core waits as told; every other refusal is a
`PlatformError` naming the method. Two refusals are facts, not failures, and are recognised
here by their text because the Bot API has no codes for them: "message is not modified"
(an edit to identical content) and "can't parse entities" (HTML Telegram would not accept).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from telegram.error import BadRequest, RetryAfter, TelegramError

from gateway.outbound.adapter import PlatformError, RateLimited


def is_not_modified(e: TelegramError) -> bool:
    return isinstance(e, BadRequest) and "message is not modified" in e.message.lower()


def is_parse_error(e: TelegramError) -> bool:
    return isinstance(e, BadRequest) and "can't parse entities" in e.message.lower()


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
        raise PlatformError(f"telegram {method}: {e.message}") from e
