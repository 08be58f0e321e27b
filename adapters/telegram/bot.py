"""python-telegram-bot's `Bot`, with the calls whose answers the adapter reads raw.

`Bot.get_updates` parses a whole batch at once: one malformed update would fail (and endlessly
refetch) it. Here getUpdates returns raw JSON and each update is parsed on its own; its parameters go
as one JSON body, as a reply's do (below): the next poll is written between a message's store and its
run's first step, so its form's cost was on the way to the model request (bench/README.md, Round 15).

The text sends and edits of a reply (`call`): `Bot.send_message` and `edit_message_text` parse
the returned message into a `Message` (about 0.3 ms of CPU a call on the 2-core machine) that the
adapter never reads beyond its id, and pass ~20 parameters, most of them None, through the
defaults machinery. Here the parameters given go as one JSON body (`request.JsonCall`) through
the transport's `post`, as PTB's `_post` would send its form: the same errors (`RetryAfter`,
`BadRequest`, ...) from the same transport. `do_api_request` is the documented door for this but
warns for methods `Bot` knows and builds the form; `post` is what it uses underneath
(python-telegram-bot is pinned to 22.8). File sends keep `Bot`'s own methods (multipart, captions).
"""

from __future__ import annotations

from typing import Any

from telegram import Bot

from gateway.outbound.adapter import PlatformError

from .request import JsonCall

POLL_TIMEOUT = 30  # seconds a getUpdates long poll waits on Telegram's side
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")


class TelegramBot(Bot):
    """One binding's bot: PTB's `Bot` plus the two raw doors above."""

    async def get_updates_raw(self, offset: int | None) -> list[Any]:
        params: dict[str, Any] = {"timeout": POLL_TIMEOUT, "allowed_updates": list(ALLOWED_UPDATES)}
        if offset is not None:
            params["offset"] = offset
        # PTB's own transport for getUpdates (`_request[0]`, its long read timeout), as `Bot._do_post` picks it.
        result = await self._request[0].post(f"{self.base_url}/getUpdates", JsonCall(params),
                                              read_timeout=POLL_TIMEOUT + 10.0)
        return result if isinstance(result, list) else []

    async def call(self, method: str, **params: Any) -> Any:
        """A Bot API method with these parameters (None ones left out), its answer as JSON."""
        body = JsonCall({k: v for k, v in params.items() if v is not None})
        return await self._request[1].post(f"{self.base_url}/{method}", body)


def sent_id(result: Any, method: str) -> str:
    """The id of the message a send returned (its JSON), the only part of it the adapter keeps."""
    if isinstance(result, dict) and isinstance(result.get("message_id"), int):
        return str(result["message_id"])
    raise PlatformError(f"telegram {method}: the answer names no message")
