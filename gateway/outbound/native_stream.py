"""A reply streamed natively where the platform offers it (Slack's chat.startStream and friends).

The same `ReplyStream` (pacing, delivery rows, the final that always lands), with its drafts
sent as appended Markdown instead of whole-text edits: fewer bytes, fewer calls, and the
platform's own streaming look. Whatever a native stream cannot carry falls back to the base
stream's post + edit: a platform that turns out not to have the methods (the adapter then
stops offering them for the binding), a reply longer than one message, a final text that is
not the streamed text continued (a notice after a failure): the streamed message is then
stopped and edited into the final text like any draft.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.outbound.budget import OverBudget, impatient
from gateway.outbound.delivery import FINAL_ATTEMPTS, MAX_WAIT, ReplyStream
from gateway.store.repo import FinalRow
from gateway.outbound.adapter import NativeStream, NativeUnavailable, PlatformError, RateLimited

log = logging.getLogger("gateway.outbound.delivery")


class NativeReplyStream(ReplyStream):
    """A `ReplyStream` whose drafts go out through `live` while the platform takes them.

    It extends the base through the hooks `ReplyStream` names (`_shows_drafts`, `_show_draft`, and
    what it tells the base: `_adopt_first_message`, `_hand_back_first_message`, `_hold_drafts`,
    `_platform_error`); the base's own state stays the base's."""

    def __init__(self, live: NativeStream, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._live: NativeStream | None = live
        self._sent = ""  # the Markdown the live message holds
        self._message_id: str | None = None
        self._started = False
        self._starting = False  # the live message's start is under way

    def _shows_drafts(self) -> bool:
        return self._live is not None or super()._shows_drafts()

    async def _show_draft(self) -> None:
        if self._live is None:
            await super()._show_draft()
        else:
            await self._stream()

    async def show_answer(self) -> None:
        if self._live is not None:
            if self._started or self._starting:
                # The live message ends with the final (its stop): an append now is one call more. One
                # being started (a draft its timer sent) is not let go: it would never be stopped.
                return
            # Never started: the answer is one message, posted now as the final would post it.
            self._live = None
        await super().show_answer()

    async def _stream(self) -> None:
        assert self._live is not None
        # What this draft sends: the model may go on while it is sent (a draft its timer started),
        # and what it adds meanwhile is for the next draft or the final, not taken as sent. Trimmed
        # like every draft: the space after the last word goes out with the word after it.
        text = self.draft_text
        if len(text) > self.adapter.limits.max_message_chars:  # longer than one message: post + edit
            await self._leave_native()
            await super()._show_draft()
            return
        pending = text[len(self._sent):]
        if not pending.strip():
            return
        try:
            with impatient():  # a draft never waits for the budget
                if not self._started:
                    self._starting = True
                    try:
                        self._message_id = await self._live.start(pending)
                    finally:
                        self._starting = False
                    self._started, self._sent = True, text  # sent, whatever befalls its row
                    # The typing loop ends; a message that exists is recorded, so a restart edits it.
                    await self._adopt_first_message(self._message_id, self.adapter.render(text), final=False)
                else:
                    await self._live.append(pending)
            self._sent = text
        except OverBudget as e:
            self._hold_drafts(e.retry_after)
        except NativeUnavailable:
            self._live = None  # the base stream carries on from here (posting, or editing what started)
        except RateLimited as e:
            self._platform_error("rate_limited")
            self._hold_drafts(e.retry_after)
        except PlatformError as e:
            self._platform_error("error")
            log.debug("a streamed draft was not sent: %s", e)

    async def finish(self, text: str | None = None, *, rows: list[FinalRow] | None = None) -> None:
        await self.settle()
        if text is not None:
            self.text = text
        if self._live is not None and self._started and self.text.strip():
            final = self.text
            if final == self._sent.rstrip():  # the final is the streamed text, trimmed: nothing to add
                self._sent = final
            if final.startswith(self._sent) and len(final) <= self.adapter.limits.max_message_chars:
                if await self._stop(final[len(self._sent):]):
                    self._live = None  # ended: anything after this (text below a card) edits or posts
                    # Written with the run's end when the caller collects the rows.
                    await self._adopt_first_message(self._message_id, self.adapter.render(final), final=True,
                                                    rows=rows)
                    if self._message_id:
                        self.adapter.forget([self._message_id])
                    return
            await self._leave_native()
        self._live = None
        await super().finish(text, rows=rows)

    async def _stop(self, markdown: str) -> bool:
        """End the live message with the rest of the text; False when the base stream must edit it instead."""
        assert self._live is not None
        for _ in range(FINAL_ATTEMPTS):
            try:
                message_id = await self._live.stop(markdown)
                self._message_id = self._message_id or message_id
                self._sent += markdown
                return True
            except RateLimited as e:
                self._platform_error("rate_limited")
                await self.clock.sleep(min(e.retry_after, MAX_WAIT))
            except PlatformError as e:
                if not isinstance(e, NativeUnavailable):
                    self._platform_error("error")
                log.info("a streamed reply could not be stopped (%s): editing it instead", e)
                return False
        return False

    async def _leave_native(self) -> None:
        """Stop the live message as it is; the base stream edits it from now on (or posts it, when
        only a draft was shown)."""
        live, self._live = self._live, None
        if live is not None and self._message_id is not None:
            try:
                await live.stop()
            except PlatformError as e:
                log.debug("stopping a streamed reply: %s", e)
        self._hand_back_first_message()
