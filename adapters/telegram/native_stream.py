"""Telegram's native streaming in a private chat: the text so far as a message draft
(`sendMessageDraft`, animated between updates of one draft id), then the reply as one message.

A draft is a preview the person sees while the answer is written; it persists nothing, so the
final text is sent as an ordinary message (`sendMessage`), which replaces the draft. A bot or chat
that refuses drafts comes out as NativeUnavailable, and the adapter stops offering them.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from telegram.constants import ParseMode
from telegram.error import BadRequest

from gateway.outbound.budget import Pacer, Scope
from gateway.outbound.adapter import NativeUnavailable, ReplyTarget

from .bot import TelegramBot
from .errors import translated


class TelegramNativeStream:
    """One reply in one private chat, shown as a draft while it streams."""

    def __init__(self, bot: TelegramBot, target: ReplyTarget, *, render: Callable[[str], str], pacer: Pacer,
                 draft_scopes: list[Scope], post: Callable[[ReplyTarget, str], Awaitable[str]],
                 on_unavailable: Callable[[], None]) -> None:
        self._bot, self._target, self._render, self._pacer = bot, target, render, pacer
        self._scopes, self._post, self._off = draft_scopes, post, on_unavailable
        self._draft_id = secrets.randbelow(2**31 - 1) + 1  # non-zero
        self._markdown = ""

    async def start(self, markdown: str) -> str | None:
        await self.append(markdown)
        return None  # a draft is not a message

    async def append(self, markdown: str) -> None:
        # The text is ours only once the draft went out: a draft refused before it was sent (over
        # the budget, a 429) raises, and the stream offers the same text again with the next one.
        # Adding it here first showed it twice in the final message.
        text = self._markdown + markdown
        async with self._pacer.paced(self._scopes):
            with translated("sendMessageDraft"):
                try:
                    await self._bot.call("sendMessageDraft", chat_id=int(self._target.channel), draft_id=self._draft_id,
                                         text=self._render(text), parse_mode=ParseMode.HTML)
                except BadRequest as e:
                    if "parse entities" in str(e).lower():
                        self._markdown = text  # half a tag mid-stream: the next draft or the message carries it
                        return
                    self._off()
                    raise NativeUnavailable(f"telegram sendMessageDraft: {e}") from None
        self._markdown = text

    async def stop(self, markdown: str = "") -> str | None:
        text = self._markdown + markdown  # a post refused with a 429 is retried with the same text, not more
        # The last draft may have carried the whole answer and the space after its last word: the
        # message is the answer, as the runner trimmed it.
        message_id = await self._post(self._target, self._render(text.rstrip()))
        self._markdown = text
        return message_id
