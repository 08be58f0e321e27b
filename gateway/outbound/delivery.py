"""One reply, streamed into a chat: a draft edited in place at a paced interval, then final.

Every platform gets the same rules from here: the first text posts one message, later text
edits it no more often than the platform allows, a reply longer than the platform's limit
continues in a new message split at a paragraph boundary, and the final text is an edit of
the same message(s) — so a draft and a final message never both post. Each posted message is
a delivery row, so a run resumed after a restart edits what it already posted.

Messages the gateway itself sends (notices, command answers, pairing codes, "busy") take the
same path through `Outbound`, so the same rules apply to every message the gateway posts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.outbound.budget import OverBudget, impatient
from gateway.clock import Clock, Timer, new_id
from gateway.outbound.orphans import shown_now, unrecorded_posts
from gateway.store.orphans import rows_above_card
from gateway.store.repo import FinalRow, Store
from gateway.outbound.adapter import Adapter, PlatformError, RateLimited, ReplyTarget, SpeaksAs, offered
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.outbound.delivery")

FINAL_ATTEMPTS = 5
MAX_WAIT = 120.0


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def split_paragraphs(text: str, limit: int) -> list[str]:
    """Split `text` into pieces of at most `limit` characters, preferring paragraph breaks,
    then line breaks, then spaces; a single unbroken run is cut hard.

    Markdown's fenced code survives the cut: a piece that ends inside a fence is closed there
    and the next piece reopens it with the same fence and language, so every part of a long
    block shows as code and the text after the block never does."""
    pieces: list[str] = []
    rest = text
    fence: tuple[str, str] | None = None  # (marker, info) open at the start of `rest`
    while len(rest) > limit:
        piece, after = _cut(rest, limit)
        still_open = _open_fence(piece, fence)
        if still_open is not None:
            closer = "\n" + still_open[0]
            opener = still_open[0] + still_open[1] + "\n"
            if len(closer) + len(opener) < limit // 2:  # else too small a limit to carry a fence
                piece, after = _cut(rest, limit - len(closer))
                still_open = _open_fence(piece, fence)
                if still_open is not None:  # the next piece's opener line opens it again
                    piece, after, still_open = piece + closer, opener + after, None
        pieces.append(piece)
        rest, fence = after, still_open
    if rest or not pieces:
        pieces.append(rest)
    return pieces


def _cut(text: str, limit: int) -> tuple[str, str]:
    """The first piece of `text` within `limit` and what follows it."""
    window = text[:limit]
    cut = -1
    for sep in ("\n\n", "\n", " "):
        cut = window.rfind(sep)
        if cut > limit // 4:
            break
    if cut <= 0:
        return text[:limit], text[limit:]
    return text[:cut].rstrip(), text[cut:].lstrip("\n ")


def _open_fence(text: str, fence: tuple[str, str] | None) -> tuple[str, str] | None:
    """The code fence still open at the end of `text`, given the one open at its start."""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m is None:
            continue
        marker, info = m.group(1), m.group(2).strip()
        if fence is None:
            if not (marker[0] == "`" and "`" in info):  # a backtick fence's info has no backtick
                fence = (marker, info)
        elif marker[0] == fence[0][0] and len(marker) >= len(fence[0]) and not info:
            fence = None
    return fence


@dataclass
class _Posted:
    message_id: str | None
    shown: str  # the rendered text the platform currently shows


class ReplyStream:
    """Streams one run's answer into one conversation through an adapter.

    A stream that carries its drafts another way (`gateway.outbound.native_stream`) extends it
    through the hooks named below, under "hooks", and never touches its state: it overrides
    `_shows_drafts` and `_show_draft`, and tells the base what it did with `_adopt_first_message`,
    `_hand_back_first_message`, `_hold_drafts` and `_platform_error`.
    """

    def __init__(
        self,
        adapter: Adapter,
        target: ReplyTarget,
        store: Store,
        run_id: str,
        clock: Clock,
        *,
        segment: bool = False,
        fresh: bool = False,
        private_to: str | None = None,
        on_platform_error: Callable[[str], None] = lambda kind: None,
    ) -> None:
        """`segment`: this run already posted messages (before an approval card); continue in
        new ones below instead of editing those. `private_to`: an account that alone sees the
        text (one message per piece, as the platform's private channel takes it: never edited)."""
        self.adapter, self.target, self.store, self.run_id, self.clock = adapter, target, store, run_id, clock
        self._private_to = private_to
        self._segment = segment
        self._loaded = fresh  # a run that never started has no delivery rows to look up
        self._on_platform_error = on_platform_error
        self._base = 0
        self.text = ""
        self._posted: list[_Posted] = []
        self._saved: set[int] = set()  # seqs that have a delivery row from this stream
        self._last_flush = float("-inf")
        self._blocked_until = float("-inf")
        self._row: asyncio.Task[None] | None = None  # a draft's first delivery row, being written
        self._final_rows: list[FinalRow] | None = None  # during `finish(rows=...)`: final rows the caller writes
        self._hold_until = clock.monotonic() + adapter.limits.first_draft_after
        self._due: Timer | None = None  # a draft waiting for its time (on the clock: a test moves it)
        self._drafting: asyncio.Task[None] | None = None  # a draft its timer started, being shown
        self._settled = False  # the final is under way: no more drafts
        self._answering = False  # `show_answer` is showing the text: a new post gets no draft row
        self._showing = False  # a draft is being shown (inline or by its timer): one at a time
        self._failed: BaseException | None = None  # what a draft its timer sent raised (the store's trouble)
        self._reported: asyncio.Task[None] | None = None  # the last draft task whose end `_drafted` took
        # Called once the reply's first message is posted as a draft (where the runner puts Stop).
        self.on_first_post: Callable[[], Awaitable[None]] | None = None

    async def _load(self) -> None:
        if not self._loaded:
            rows = await self.store.deliveries(self.run_id)
            if self._segment:
                # Below the card: the posts above it stay as they are; what an interrupted try of
                # this resume posted below it is continued, not posted a second time.
                above = await rows_above_card(self.store, self.run_id)
                self._base = len(rows) if above is None else above
                rows = rows[self._base:]
            self._posted = [_Posted(row.platform_message_id, row.text) for row in rows]
            if self._private_to is None:  # a run that started before: posts its process never recorded
                orphans = await unrecorded_posts(self.adapter, self.target, self.store, self.run_id)
                self._posted += [_Posted(mid, text) for mid, text in orphans]
            self._loaded = True  # only once all of it was read: a read that failed is tried again

    def _render_pieces(self, text: str) -> list[str]:
        limit = self.adapter.limits.max_message_chars
        if self.target.speaker and offered(self.adapter, SpeaksAs) is None:
            text = f"**{self.target.speaker}:**\n\n{text}"  # who is speaking, where the platform cannot say it
        if self._private_to is not None:  # private channels take plain text (an alert, an ephemeral)
            return split_paragraphs(text, limit)
        rendered: list[str] = []
        # Rendering can lengthen text (escapes, markup); leave headroom and re-split if needed.
        for piece in split_paragraphs(text, max(limit - limit // 10, 1)):
            out = self.adapter.render(piece)
            rendered.extend(split_paragraphs(out, limit) if len(out) > limit else [out])
        return rendered

    async def append(self, delta: str) -> None:
        """Add streamed text; it is shown as a draft now if its time has come, else when it does."""
        if not delta:
            return
        self._raise_failed()
        self.text += delta
        if self._settled or not self._shows_drafts():
            return
        now = self.clock.monotonic()
        due = self._draft_due()
        if now >= due and not self._busy():
            self._cancel_due()
            await self._draft()
        elif self._due is None and not self._busy():
            # Text that came before its time is shown when the time comes, not only when the model
            # says more: a model that pauses (a tool call, a slow step) does not hide what it said.
            # (Text that comes during a draft is seen to when that draft is done.)
            self._due = self.clock.call_later(max(due - now, 0.0), self._draft_in_time)

    # --- hooks: what a subclass may override, and what it tells the base ----------------------

    def _shows_drafts(self) -> bool:
        """Hook: whether this stream shows drafts at all (a platform that cannot edit gets the final only)."""
        return self.adapter.limits.supports_edit

    async def _show_draft(self) -> None:
        """Hook: show `self.text` as the current draft (the pacing around it is the base's). Here:
        post the first message, then edit it in place, continuing in new messages past the limit."""
        await self._flush(final=False)

    async def _adopt_first_message(self, message_id: str | None, shown: str, *, final: bool,
                                   rows: list[FinalRow] | None = None) -> None:
        """A message the subclass brought about (a native stream's) is the reply's first, showing
        `shown`. Its delivery row is written (so a restart edits it rather than posting again), or
        added to `rows` when the caller writes the final rows with the run's end; a draft that is no
        message yet (no id) is recorded only as final. The typing indicator ends either way."""
        self._posted = [_Posted(message_id, shown)]
        if message_id is None and not final:
            return
        if final and rows is not None:
            rows.append(FinalRow(self._base, message_id, shown))
        else:
            await self.store.save_delivery(self.run_id, self._base, message_id, shown, final)
        self._saved.add(0)

    def _hand_back_first_message(self) -> None:
        """The subclass stopped carrying the reply: from now on the base posts and edits it. A first
        message that exists is edited into the rendered text at the next flush; a draft that never
        became a message is posted."""
        if self._posted and self._posted[0].message_id is not None:
            self._posted[0].shown = ""
        else:
            self._posted = []

    def _hold_drafts(self, seconds: float) -> None:
        """No draft before `seconds` from now (a budget's or the platform's wait, capped at MAX_WAIT)."""
        self._blocked_until = self.clock.monotonic() + min(seconds, MAX_WAIT)

    def _platform_error(self, kind: str) -> None:
        """Count a platform's refusal ("rate_limited", "error") where the stream's owner counts them."""
        self._on_platform_error(kind)

    # --- pacing ----------------------------------------------------------------------------

    def _busy(self) -> bool:
        """A draft is being shown, or its timer has started one that has not begun yet."""
        return self._showing or self._drafting is not None

    def _draft_due(self) -> float:
        """When the next draft may go: after the hold, the edit interval, and a budget's wait."""
        return max(self._hold_until, self._last_flush + self.adapter.limits.min_edit_interval, self._blocked_until)

    def _draft_in_time(self) -> None:
        self._due = None
        # The moment may have moved on since the timer was set (a budget's wait, a 429): the next
        # piece of text tries again.
        if self._settled or self._busy() or self.clock.monotonic() < self._draft_due():
            return
        self._drafting = asyncio.create_task(self._draft(), name=f"draft:{self.run_id}")
        self._drafting.add_done_callback(self._drafted)

    def _drafted(self, task: asyncio.Task[None]) -> None:
        """A draft task ended: its done-callback, and `settle` itself (a task that has just ended may
        not have had its callback run yet, and its failure must not be missed); once per task."""
        if task is self._reported:
            return
        self._reported = task
        if self._drafting is task:
            self._drafting = None
        if not task.cancelled() and task.exception() is not None:
            # A platform's refusal never gets here (a draft is skipped); the store's trouble does, and
            # is the run's, as it would be from an inline draft: raised at its next step.
            self._failed = self._failed or task.exception()

    def _raise_failed(self) -> None:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed

    async def _draft(self) -> None:
        if self._settled:  # the final is under way: a timer that fired just before it shows nothing
            return
        posted = self.posted

        async def show() -> None:
            self._last_flush = self.clock.monotonic()  # the edit interval runs from here, however it is shown
            await self._show_draft()
            if not posted and self.posted and self.on_first_post is not None:
                await self.on_first_post()  # part of the draft: no other goes out meanwhile

        await self._alone(show)

    async def show_answer(self) -> None:
        """The model's answer is written (its text part ended in the response that is the run's
        output): show it now, as the final will read, not after pydantic-ai's end of the run (the
        output's checks, the result's assembly: 2-4 ms of the bench's answer). The final then finds it
        shown and only records it; text that comes after all (a tool call after the text, a retry) is
        drafted and finished as usual. Shown like a draft, past the hold and the edit interval (it is
        what the hold waits for), never past a budget or a 429: then the final shows it. A new post
        gets no row of its own: its row goes with the final's, in the run's end, as a quick answer's
        always did; a kill between the two leaves a post `unrecorded_posts` finds. No Stop control
        either: the runner puts one on only if the run goes on."""
        if self._settled or self._busy() or not self._shows_drafts() or self.clock.monotonic() < self._blocked_until:
            return
        self._cancel_due()
        self._answering = True
        try:
            await self._alone(self._show_draft)
        finally:
            self._answering = False

    async def between_drafts(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run `action` (the Stop control put on again, which shows the reply's text on Slack) with no
        draft going out meanwhile; nothing while one is (the caller asks again at its next step)."""
        if not (self._busy() or self._settled):
            await self._alone(action)

    async def _alone(self, action: Callable[[], Awaitable[None]]) -> None:
        """`action` with no draft going out meanwhile; then what came meanwhile is due in its time."""
        drafted, self._showing = self.text, True
        try:
            await action()
        finally:
            self._showing = False
        if self._drafting is asyncio.current_task():
            self._drafting = None  # done but for this: a draft may be due again
        if self.text != drafted and not self._settled and self._due is None:
            self._due = self.clock.call_later(max(self._draft_due() - self.clock.monotonic(), 0.0),
                                              self._draft_in_time)

    def _cancel_due(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None

    async def settle(self) -> None:
        """No more drafts: a draft being shown is let finish (its post is recorded), none starts."""
        self._settled = True
        self._cancel_due()
        drafting = self._drafting
        if drafting is not None:
            with contextlib.suppress(Exception):  # kept by `_drafted`, raised below
                await asyncio.shield(drafting)
            if drafting.done():
                self._drafted(drafting)
        self._raise_failed()

    def close(self) -> None:
        """The run is over however it ended: nothing of this stream may go out later."""
        self._settled = True
        self._cancel_due()
        if self._drafting is not None:
            self._drafting.cancel()

    async def finish(self, text: str | None = None, *, rows: list[FinalRow] | None = None) -> None:
        """Show the final text (this is an edit of the draft, never a second post).

        `rows`: the final delivery rows are added to it, not written, for the caller to write
        with the run's end in one transaction (`Store.end_run`); rows still go in order."""
        await self.settle()
        if text is not None:
            self.text = text
        if not self.text.strip():
            return
        self._final_rows = rows
        try:
            await self._flush(final=True)
        finally:
            self._final_rows = None
            await self.rows_written()
        # An adapter that remembers what it showed (the web chat, to send deltas) lets go of a
        # finished reply; otherwise it would keep every reply's text for the life of the process.
        self.adapter.forget([p.message_id for p in self._posted if p.message_id])

    async def close_with(self, line: str) -> bool:
        """End a reply that will not go on (its run was stopped while back in the queue): what it shows stays, its
        last message gets `line` below it, final. The model's text is not kept apart from its rendering, so the
        line is rendered alone and joined to what the platform shows; nothing posted yet: `line` is the reply.
        False when the platform would not take it."""
        await self._load()
        if not self._posted:
            await self.finish(line)
            return self.posted
        seq, added = len(self._posted) - 1, self.adapter.render(line)
        last = self._posted[seq]
        if last.message_id is not None and self._private_to is None:  # a row may hold an earlier draft's text
            last.shown = (await shown_now(self.adapter, self.target, self.store, self.run_id)).get(last.message_id,
                                                                                                   last.shown)
        shown = f"{last.shown}\n\n{added}"
        if len(shown) > self.adapter.limits.max_message_chars:
            seq, shown = seq + 1, added  # no room in the last message: the line is one of its own below it
        done = await self._show(seq, shown, must=True)
        if done:
            await self.store.save_delivery(self.run_id, self._base + seq, self._posted[seq].message_id, shown, True)
        self.adapter.forget([p.message_id for p in self._posted if p.message_id])
        return done

    @property
    def draft_text(self) -> str:
        """What a draft shows: the text so far, trimmed as the runner trims the final answer. A draft
        caught at "... 20 " would otherwise lose its space when the final lands; trimmed, every draft
        is a prefix of the final, and the space between two words comes back with the word after it."""
        return self.text.strip()

    async def _flush(self, *, final: bool) -> None:
        self._last_flush = self.clock.monotonic()
        text = self.text if final else self.draft_text
        if not text:
            return  # nothing but whitespace yet: nothing to show
        await self._load()
        pieces = self._render_pieces(text)
        for seq, piece in enumerate(pieces):
            is_last = seq == len(pieces) - 1
            piece_final = final or not is_last
            if seq < len(self._posted) and self._posted[seq].shown == piece and not (final and is_last):
                continue
            known = seq < len(self._posted) and self._posted[seq].message_id is not None
            # A draft never waits for the adapter's budget: it is skipped, and a later draft or the
            # final carries its text (fewer, larger edits when the budget is tight). The final waits.
            with contextlib.nullcontext() if final else impatient():
                ok = await self._show(seq, piece, must=final)
            if not ok:
                return  # rate limited during a draft: skip, the next flush or the final catches up
            # Recorded when a message is first posted (so a restart edits it rather than posting
            # again) and when its text is final; intermediate edits need no row.
            if not known or piece_final:
                if self._answering and not piece_final:
                    continue  # the answer's post: its row goes with the final's (`show_answer`)
                new = not known and seq not in self._saved
                await self.rows_written()  # rows are written in order
                self._saved.add(seq)
                if piece_final and self._final_rows is not None:
                    self._final_rows.append(FinalRow(self._base + seq, self._posted[seq].message_id, piece))
                    continue
                save = self.store.save_delivery(self.run_id, self._base + seq, self._posted[seq].message_id, piece,
                                                piece_final)
                if new and not piece_final:
                    # A draft's first row is written while the stream goes on: the next edit (the
                    # final, for a quick answer) does not wait for it, the next row does. A crash
                    # meanwhile leaves a post no row names, which `unrecorded_posts` finds.
                    self._row = asyncio.create_task(save)
                else:
                    # Let the adapter's own I/O (the web chat's event stream) go out first: the
                    # person sees the text now, the row follows a moment later.
                    await asyncio.sleep(0)
                    await save

    async def rows_written(self) -> None:
        """Wait for the draft row being written, if any (its error is raised here)."""
        row, self._row = self._row, None
        if row is not None:
            await row

    async def _show(self, seq: int, text: str, *, must: bool) -> bool:
        for attempt in range(FINAL_ATTEMPTS if must else 1):
            try:
                if self._private_to is not None:
                    await self.adapter.tell_privately(self.target, self._private_to, text)
                    self._posted.append(_Posted(None, text))
                elif seq < len(self._posted) and self._posted[seq].message_id:
                    if self._posted[seq].shown != text:
                        await self.adapter.edit_message(self.target, self._posted[seq].message_id or "", text)
                    self._posted[seq].shown = text
                else:
                    message_id = await self.adapter.post_message(self.target, text)
                    if seq < len(self._posted):
                        self._posted[seq] = _Posted(message_id, text)
                    else:
                        self._posted.append(_Posted(message_id, text))
                return True
            except OverBudget as e:  # nothing was sent: no platform said no
                self._hold_drafts(e.retry_after)
                return False
            except RateLimited as e:
                self._on_platform_error("rate_limited")
                wait = min(e.retry_after, MAX_WAIT)
                self._blocked_until = self.clock.monotonic() + wait
                if not must:
                    return False
                log.info("rate limited posting a final reply; waiting %.1fs", wait)
                await self.clock.sleep(wait)
            except PlatformError as e:
                self._on_platform_error("error")
                if not must or attempt == FINAL_ATTEMPTS - 1:
                    log.warning("reply delivery failed: %s", e)
                    return False
                await self.clock.sleep(min(2**attempt, 10))
        return False

    @property
    def posted(self) -> bool:
        return bool(self._posted)

    @property
    def first_message_id(self) -> str | None:
        """The reply's first posted message (where a Stop control sits), once posted."""
        return self._posted[0].message_id if self._posted else None


class Outbound:
    """Every message the gateway posts on its own: notices, command answers, pairing codes, "busy".

    Each goes through a `ReplyStream` (rendering, splitting, waiting out 429s, retrying a failed
    post, a delivery row under an id of its own), in the background so that the inbound event
    that caused it is acknowledged at once, in order per conversation, and drained at stop.
    """

    def __init__(self, adapter_for: Callable[[str], Adapter | None], store: Store, clock: Clock,
                 on_platform_error: Callable[[str, str], None] = lambda platform, kind: None) -> None:
        self._adapter_for, self._store, self._clock = adapter_for, store, clock
        self._on_platform_error = on_platform_error
        self._tails: dict[tuple[str, str, str | None], asyncio.Task[bool]] = {}

    def send(self, target: ReplyTarget, markdown: str, *, private_to: str | None = None) -> asyncio.Task[bool]:
        """Queue `markdown` for `target` (only `private_to` sees it, when given); returns the task (True once
        posted, False when it was given up)."""
        key = (target.binding_id, target.channel, target.thread)
        previous = self._tails.get(key)
        task = asyncio.create_task(self._send(previous, target, markdown, private_to), name=f"outbound:{key}")
        self._tails[key] = task
        task.add_done_callback(lambda t: self._tails.pop(key, None) if self._tails.get(key) is t else None)
        return task

    async def _send(self, previous: asyncio.Task[bool] | None, target: ReplyTarget, markdown: str,
                    private_to: str | None) -> bool:
        if previous is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(previous)
        adapter = self._adapter_for(target.binding_id)  # looked up when sent: a reload may have swapped it
        if adapter is None:
            log.warning("not sent (binding %s is gone): a %s message", target.binding_id,
                        "private" if private_to else "public")
            return False
        stream = ReplyStream(adapter, target, self._store, f"out-{new_id()}", self._clock, fresh=True,
                             private_to=private_to,
                             on_platform_error=lambda kind: self._on_platform_error(target.platform, kind))
        try:
            await stream.finish(markdown)
        except Exception as e:  # a message the gateway sends on its own never takes anything down with it
            log.warning("could not send a message to %s: %s", target.platform, e)
            return False
        return stream.posted

    def pending(self) -> int:
        """Messages queued or being sent now."""
        return sum(1 for task in self._tails.values() if not task.done())

    async def drain(self, timeout: float) -> None:
        """Wait for queued messages (at most `timeout` seconds), then cancel what is left."""
        pending = list(self._tails.values())
        if not pending:
            return
        _, left = await asyncio.wait(pending, timeout=timeout)
        await cancel_and_wait(*left)
