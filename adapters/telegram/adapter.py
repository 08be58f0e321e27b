"""The Telegram adapter: python-telegram-bot's `Bot` on one side, the gateway core on the other.

Why `Bot` and our own poll loop rather than `Application` + `Updater`: the Updater confirms
a batch of updates (by asking for the next offset) before the application has handled it, and
keeps the offset in memory. Here an update is confirmed only after `dispatcher.submit`
returned, and the offset lives in the store (`dispatcher.get_state` / `set_state`), so a
restart neither replays nor drops. Concurrency comes from the gateway's own queue (no
`concurrent_updates`), and the HTTP pool is small on purpose (see POOL_SIZE). The `Bot`'s HTTP
transport is aiohttp (`request.AiohttpRequest`), a third of httpx's CPU per call.

Webhook mode serves `/telegram/webhook/<binding id>` on the daemon's HTTP server, calls
`setWebhook` with a secret token on start, and answers 401 to a request without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from telegram import (Bot, BotCommand, BotCommandScopeAllGroupChats, BotCommandScopeAllPrivateChats, InputFile,
                      InputMediaAudio, InputMediaDocument, InputMediaPhoto, ReplyParameters)
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError

from adapters.base import BaseAdapter, CannotStart
from adapters.read_position import ReadPosition
from adapters.stop_buttons import StopButtons
from gateway.adapter_registry import AdapterContext
from gateway.outbound.budget import Pacer, impatient, scaled
from gateway.outbound.files import size_text
from gateway.reconnect import Backoff
from bindings.models import BindingSpec, TelegramSection
from bindings.secrets import Secret
from gateway.inbound.commands import commands_for
from gateway.inbound.memory_card import MemoryCard, MemoryClick
from gateway.messages import Attachment, ChatKind, InboundMessage
from gateway.store.availability import StoreUnavailable
from gateway.outbound.adapter import (
    AdapterHealth,
    AnswersDirectory,
    ApprovalCard,
    AsksQuestions,
    QuestionCard,
    AttachmentTooLarge,
    FileKind,
    FileLimits,
    FileTooLarge,
    OutboundFile,
    SendsFiles,
    ConfirmsMembership,
    CHAT_FIRST_DRAFT_AFTER,
    FetchesAttachments,
    FinalEditTakesStop,
    PlatformError,
    PlatformLimits,
    PostsMemoryCards,
    ReplyTarget,
    ShowsStopControl,
    StreamsNatively,
    Trouble,
)

from .bot import ALLOWED_UPDATES, POLL_TIMEOUT, TelegramBot, sent_id
from .budget import RULES, TelegramBudget
from .native_stream import TelegramNativeStream
from .request import AiohttpRequest, trust_store
from .stop import stop_keyboard
from .cards import arguments_messages, card_html, card_keyboard, memory_html, memory_keyboard
from .questions import question_html, question_keyboard
from .directory import TelegramDirectory
from .errors import is_not_modified, is_parse_error, retry_after_seconds, translated
from .normalize import BotIdentity, ButtonClick, normalize_update
from .render import html_to_plain, markdown_to_html

POLL_RETRY_CAP = 10.0  # seconds at most between tries of a failing getUpdates
# Seconds at most between writes of the update offset (`ReadPosition`): the poll never waits for one.
OFFSET_SAVE_EVERY = 1.0
POLL_FAILURES_DOWN = 3  # failed polls in a row before /readyz reports the binding down
# Connections for sends and edits. Measured with tests/adapters/telegram/pool_bench.py against
# the fake (its budgets off) on the 2-core machine: with 32 or 200 concurrent senders, 8
# connections made about 4,300 sends/s, 16 about 4,500, 4 about 3,900 and 1 about 1,900. 8 is
# within noise of more and bounds what one binding opens. (On httpx, the transport before, in
# the same minutes: 920 / 560 sends/s with 8 at 32 / 200 senders, 64 with 1 at 200.)
POOL_SIZE = 8
POOL_TIMEOUT = 30.0  # a small pool means waiting for a connection is normal, not an error
SUBMIT_ATTEMPTS = 3
_SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


# Sending files (core.telegram.org/bots/api#sending-files): a photo up to 10 MB, anything else up to
# 50 MB through the Bot API; a caption up to 1,024 characters; an album (sendMediaGroup) of 2-10.
TELEGRAM_FILE_LIMITS = FileLimits(
    max_bytes={FileKind.IMAGE: 10 * 1024 * 1024, FileKind.DOCUMENT: 50 * 1024 * 1024, FileKind.AUDIO: 50 * 1024 * 1024},
    max_files=10, max_caption_chars=1024)
VOICE_NOTE = "audio/ogg"  # sent as a voice note (sendVoice); other audio as a music file (sendAudio)
_MEDIA = {FileKind.IMAGE: InputMediaPhoto, FileKind.DOCUMENT: InputMediaDocument, FileKind.AUDIO: InputMediaAudio}


class TelegramAdapter(BaseAdapter, StreamsNatively, ShowsStopControl, FinalEditTakesStop, PostsMemoryCards,
                      AnswersDirectory, FetchesAttachments, SendsFiles, ConfirmsMembership, AsksQuestions):
    """One bot token, one binding."""

    platform = "telegram"
    file_limits = TELEGRAM_FILE_LIMITS
    limits = PlatformLimits(max_message_chars=4096, min_edit_interval=1.0, supports_edit=True,
                            first_draft_after=CHAT_FIRST_DRAFT_AFTER)

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        if binding.telegram is None:
            raise ValueError(f"binding {binding.id!r} has no telegram: section")
        super().__init__(binding, context)
        self._section: TelegramSection = binding.telegram
        self._public_url = context.gateway.http.public_url
        self._bot: TelegramBot | None = None
        self._me: BotIdentity | None = None
        self._webhook_secret: Secret | None = None
        self._redactor: _Redact | None = None
        self.pacer = Pacer(clock=self._clock)  # every send, edit and chat action waits here for the budget
        self.budget = TelegramBudget(scaled(RULES, context.gateway.limits.platform_budget_scale))
        # sendMessageDraft in private chats when the binding asks, until Telegram refuses it for this bot
        self.drafts = self._section.drafts
        self._stops: StopButtons[tuple[int, str]] = StopButtons()  # by (chat, reply message)

    # --- lifecycle: the base's start/stop call these -------------------------------------

    async def _open(self) -> None:
        token = self._secret("token", self._section.token)
        if self._section.mode == "webhook" and self._section.webhook_secret is not None:
            self._webhook_secret = self._secret("webhook_secret", self._section.webhook_secret)
            if not _WEBHOOK_SECRET.fullmatch(self._webhook_secret.reveal()):
                raise CannotStart(f"webhook_secret ({self._section.webhook_secret.describe()}) must be 1-256 "
                                  "characters of A-Z a-z 0-9 _ - (Telegram's rule)")
        # Installed before the Bot exists: PTB logs its API URL (which holds the token) on init,
        # and setWebhook's parameters hold the webhook secret.
        self._redactor = _Redact([token.reveal()] + ([self._webhook_secret.reveal()] if self._webhook_secret else []))
        self._redactor.install(self._log)
        # One for both transports, loaded in a thread: the CA bundle is ~30 ms of CPU (OpenSSL's, without the
        # GIL), which on the loop held every other binding's start and every early message behind it.
        trust = await asyncio.to_thread(trust_store)
        self._bot = TelegramBot(
            token.reveal(),
            base_url=self._section.api_url,
            base_file_url=file_url(self._section.api_url),
            request=AiohttpRequest(connection_pool_size=POOL_SIZE, pool_timeout=POOL_TIMEOUT,
                                   connect_timeout=10.0, read_timeout=20.0, trust=trust),
            get_updates_request=AiohttpRequest(connection_pool_size=1, read_timeout=POLL_TIMEOUT + 10.0,
                                               connect_timeout=10.0, trust=trust),
        )

    async def _close(self) -> None:
        if self._bot is not None:
            await self._bot.shutdown()
        if self._redactor is not None:
            self._redactor.uninstall()
            self._redactor = None

    async def _verify(self) -> list[Trouble]:
        """getMe with the token (what `initialize` asks); never getUpdates or setWebhook."""
        try:
            with translated("getMe"):
                await self._require_bot().initialize()
        except PlatformError as e:
            scrub = self._redactor.scrub if self._redactor else str
            return [Trouble(f"token ({self._section.token.describe()}): Telegram refused it ({scrub(str(e))})",
                            "copy the bot's token from @BotFather (/token) again")]
        return []

    def health(self) -> AdapterHealth:
        state = self._health.get()
        state.extra.update(mode=self._section.mode, bot=self._me.username if self._me else None)
        return state

    async def _connect_once(self) -> None:
        """One connection; its failure reaches the log and /readyz, so secrets are scrubbed first
        (python-telegram-bot puts the token itself into its "token rejected" message)."""
        try:
            await self._connect()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            scrub = self._redactor.scrub if self._redactor else str
            text = str(e) if isinstance(e, PlatformError) else f"{type(e).__name__}: {e}"
            raise PlatformError(scrub(text)) from None

    async def _connect(self) -> None:
        bot = self._require_bot()
        with translated("getMe"):
            await bot.initialize()  # getMe, once: the bot's id and username see mentions
        self._me = BotIdentity(bot.id, bot.username)
        if self._section.mode == "webhook":
            await self._set_webhook(bot)
            self._health.up(f"webhook for @{bot.username}")
            # The "/" menu after connecting, not before: messages are answered without it, and its two
            # calls to the Bot API held the daemon's READY (a round trip to Telegram apiece).
            self._spawn(self._register_commands(bot))
            await asyncio.Event().wait()  # Telegram calls us now; nothing to do until stopped
        else:
            with translated("deleteWebhook"):
                await bot.delete_webhook()  # getUpdates is refused while a webhook is set
            self._health.up(f"polling as @{bot.username}")
            self._spawn(self._register_commands(bot))  # as above
            await self._poll(bot)

    async def _register_commands(self, bot: Bot) -> None:
        """The core's command table as Telegram's "/" menu, per chat type; a refusal is logged, never fatal."""
        scopes = ((BotCommandScopeAllPrivateChats(), ChatKind.DM), (BotCommandScopeAllGroupChats(), ChatKind.GROUP))
        try:
            for scope, kind in scopes:
                await bot.set_my_commands([BotCommand(c.name, _plain(c.summary)[:256]) for c in commands_for(kind)],
                                          scope=scope)
        except TelegramError as e:
            self._log.warning("could not register the command menu: %s", e)

    async def _set_webhook(self, bot: Bot) -> None:
        if not self._public_url:
            raise PlatformError("mode: webhook needs http.public_url in gateway.yaml (Telegram must reach us)")
        assert self._webhook_secret is not None  # the binding model requires it in webhook mode
        with translated("setWebhook"):
            await bot.set_webhook(self.webhook_url, secret_token=self._webhook_secret.reveal(),
                                  allowed_updates=list(ALLOWED_UPDATES))

    @property
    def webhook_url(self) -> str:
        return f"{(self._public_url or '').rstrip('/')}/telegram/webhook/{self.binding_id}"

    # --- receiving ---------------------------------------------------------------------

    async def _poll(self, bot: TelegramBot) -> None:
        """Long-poll getUpdates; the offset advances only past updates the core has taken."""
        dispatcher = self._require_dispatcher()
        assert self._me is not None
        # Keyed by the bot's id: a binding given another bot's token starts from that bot's queue.
        position = ReadPosition(dispatcher, self.binding_id, f"update_offset:{self._me.id}", clock=self._clock,
                                every=OFFSET_SAVE_EVERY, log=self._log)
        stored = await position.load()
        offset = int(stored) if stored else 0
        # A cut long poll (a 502 from a proxy, a connection closed unanswered) is routine: poll
        # again here, as PTB's Updater does, rather than tear down the connection (getMe, the
        # command menu, deleteWebhook) and climb the reconnect backoff towards a minute.
        cuts = Backoff(base=0.5, cap=POLL_RETRY_CAP)
        pending: list[tuple[int, dict[str, Any]]] = []  # this batch's updates, in order
        taken: set[int] = set()  # of those, the ones the core has taken (or that were dropped)
        try:
            while True:
                try:
                    batch = await bot.get_updates_raw(offset or None)
                except RetryAfter as e:  # honoured here, without tearing the connection down
                    self._log.warning("getUpdates rate limited: waiting %.0fs", retry_after_seconds(e))
                    await self._clock.sleep(retry_after_seconds(e))
                    continue
                except NetworkError as e:
                    if isinstance(e, BadRequest):
                        raise
                    self._poll_cut(bot, e, cuts.attempt + 1)
                    await self._clock.sleep(cuts.next_delay())
                    continue
                if cuts.attempt:
                    cuts.reset()
                    self._health.up(f"polling as @{bot.username}")
                pending.clear()
                for raw in batch:
                    update_id = raw.get("update_id") if isinstance(raw, dict) else None
                    if not isinstance(update_id, int):
                        self._log.warning("dropping an update without an update_id")
                        continue
                    if update_id >= offset and (not pending or update_id > pending[-1][0]):
                        pending.append((update_id, raw))  # not one already taken (a server ignoring our offset)
                await self._take(pending, taken)
                offset = _advance(offset, pending, taken)
                if offset:
                    position.advance(str(offset))
        finally:
            # Stopped mid-batch: remember what was taken, so the next start neither replays it
            # nor skips what was not (past the first update not taken, the ledger drops repeats).
            offset = _advance(offset, pending, taken)
            if offset:
                position.advance(str(offset))
            await position.close()

    async def _take(self, updates: list[tuple[int, dict[str, Any]]], taken: set[int]) -> None:
        """Hand a batch to the core: each chat's (or forum topic's) updates in order, different chats
        at once. A batch is up to 100 updates; one after another, every chat waited behind each
        store write of every other, and under load a poller fell minutes behind."""
        taken.clear()
        by_chat: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]] = {}
        for update_id, raw in updates:
            by_chat.setdefault(_conversation_of(raw), []).append((update_id, raw))

        async def in_order(items: list[tuple[int, dict[str, Any]]]) -> None:
            for update_id, raw in items:
                try:
                    await self._handle(raw)
                except _SubmitFailed as e:
                    self._log.error("dropping update %s: the core did not take it: %s", update_id, e)
                taken.add(update_id)

        if len(by_chat) == 1:
            await in_order(updates)
            return
        # Every chat's task ends before the poll goes on (none left running unowned while the same
        # updates are fetched again: a button click is not in the ledger); then the first error.
        results = await asyncio.gather(*(in_order(items) for items in by_chat.values()), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _poll_cut(self, bot: Bot, error: NetworkError, in_a_row: int) -> None:
        """One warning per cut poll; /readyz says so once polls keep failing."""
        scrub = self._redactor.scrub if self._redactor else str
        self._log.warning("getUpdates failed (%s); polling again", scrub(str(error)))
        if in_a_row >= POLL_FAILURES_DOWN:
            self._health.down(f"polling as @{bot.username}: {in_a_row} polls in a row failed: {scrub(str(error))}")

    async def _handle(self, raw: dict[str, Any]) -> None:
        """One raw update: normalize (from its JSON), hand to the core. Malformed input is dropped."""
        assert self._me is not None
        try:
            event = normalize_update(raw, binding_id=self.binding_id, bot=self._me,
                                     ignore_bots=self.binding.admission.ignore_bots)
        except Exception as e:  # a shape we cannot read must not stop the others
            self._log.warning("dropping malformed update %s: %s: %s", raw.get("update_id"), type(e).__name__, e)
            return
        if event is None:
            self._log.debug("ignoring update %s", raw.get("update_id"))
        elif isinstance(event, ButtonClick):
            await self._on_click(event)
        else:
            await self._submit(event)

    async def _submit(self, msg: InboundMessage) -> None:
        dispatcher = self._require_dispatcher()
        backoff = Backoff(base=0.2, cap=2.0)
        attempt = 0
        while attempt < SUBMIT_ATTEMPTS:
            attempt += 1
            try:
                result = await dispatcher.submit(msg)
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as e:
                # Nothing was stored. A webhook answers non-2xx (Telegram sends it again); a
                # poller waits here, its offset not past this update, until the store takes it.
                if self._section.mode == "webhook":
                    raise _SubmitFailed(f"{e.what}: {e}") from e
                self._log.warning("update %s waits: %s (%s)", msg.event_id, e.what, e)
                attempt -= 1
                await self._clock.sleep(backoff.next_delay())
            except Exception as e:  # the core's trouble: retry a little, then give up on this one
                if attempt == SUBMIT_ATTEMPTS:
                    raise _SubmitFailed(f"{type(e).__name__}: {e}") from e
                self._log.warning("submit of update %s failed (%s); retrying", msg.event_id, e)
                await self._clock.sleep(backoff.next_delay())
            else:
                if not result.accepted:
                    self._log.debug("update %s not taken: %s", msg.event_id, result.reason or "duplicate")
                return

    async def _on_click(self, click: ButtonClick) -> None:
        """A button press: the core decides; Telegram gets an answer to every callback."""
        dispatcher = self._require_dispatcher()
        bot = self._require_bot()
        text, alert = "", False
        try:
            if click.stop_run is not None:  # the core asks who may stop; anyone else is told, alone
                stopped = await dispatcher.stop_run(click.stop_run, click.clicker, binding_id=self.binding_id)
                text, alert = ("" if stopped.stopped else stopped.message), not stopped.stopped
            elif click.memory is not None:
                text, alert = await self._on_memory_click(click)
            elif click.show is not None:
                text, alert = await self._on_show_click(click)
            elif click.question is not None:  # the core asks who may answer; anyone else is told, alone
                outcome = await dispatcher.answer(click.question[0], click.question[1], click.clicker,
                                                  binding_id=self.binding_id)
                text, alert = outcome.message, not outcome.accepted
            elif click.decision is None:
                text, alert = "This button is no longer valid.", True
            else:
                outcome = await dispatcher.decide(click.target_id, click.decision, click.clicker,
                                                  binding_id=self.binding_id, surface=self.platform)
                text, alert = outcome.message, not outcome.accepted
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._log.error("decision on %s failed: %s", click.target_id, e)
            text, alert = "Something went wrong; please try again.", True
        finally:
            try:
                await bot.answer_callback_query(click.query_id, text=_clip(text, 200) or None, show_alert=alert)
            except TelegramError as e:  # e.g. the query expired while the core decided
                self._log.warning("answerCallbackQuery failed: %s", e)

    async def _on_show_click(self, click: ButtonClick) -> tuple[str, bool]:
        """"Show all" on a card: every argument of the call, sent in the card's chat (and topic) as a reply
        to it, in messages under 4,096 characters. Only calls on this binding's cards. (answer, as alert)."""
        assert click.show is not None
        item = await self._require_dispatcher().approval_item(click.show, binding_id=self.binding_id)
        if item is None or click.chat_id is None:
            return "This approval no longer exists.", True
        bot = self._require_bot()
        chat_id = int(click.chat_id)
        for n, html in enumerate(arguments_messages(item)):
            async with self.pacer.paced(self.budget.message(chat_id)):
                with translated("sendMessage"):
                    reply = (ReplyParameters(int(click.message_id), allow_sending_without_reply=True)
                             if n == 0 and click.message_id else None)
                    await bot.call("sendMessage", chat_id=chat_id, text=html, parse_mode=ParseMode.HTML,
                                   message_thread_id=click.thread_id, reply_parameters=reply)
        return "Every argument is in the messages below the card.", False

    async def _on_memory_click(self, click: ButtonClick) -> tuple[str, bool]:
        """A `/memory` card's button: the core acts on the store of the chat clicked in (and the
        clicker), never what the data says; the card is edited in place. (answer text, as alert)."""
        if click.chat_id is None or click.message_id is None or click.chat_kind is None or click.memory is None:
            return "This button is no longer valid.", True
        assert self._me is not None
        outcome = await self._require_dispatcher().memory_click(MemoryClick(
            self.binding_id, str(self._me.id), click.chat_id, click.chat_kind, click.clicker, click.memory))
        if outcome.card is not None:
            bot = self._require_bot()
            chat_id = int(click.chat_id)
            async with self.pacer.paced(self.budget.message(chat_id)):
                with translated("editMessageText"):
                    try:
                        await bot.call("editMessageText", chat_id=chat_id, message_id=int(click.message_id),
                                       text=memory_html(outcome.card), parse_mode=ParseMode.HTML,
                                       reply_markup=memory_keyboard(outcome.card))
                    except TelegramError as e:
                        if not is_not_modified(e):
                            raise
        return outcome.message, bool(outcome.message) and outcome.card is None

    async def post_memory_card(self, target: ReplyTarget, card: MemoryCard) -> str | None:
        return await self._post_with_buttons(target, memory_html(card), memory_keyboard(card))

    async def _post_with_buttons(self, target: ReplyTarget, html: str, keyboard: Any) -> str:
        """A card: HTML with its inline keyboard, paced as any message to that chat."""
        bot = self._require_bot()
        chat_id, thread = _chat(target)
        async with self.pacer.paced(self.budget.message(chat_id)):
            with translated("sendMessage"):
                sent = await bot.call("sendMessage", chat_id=chat_id, text=html, parse_mode=ParseMode.HTML,
                                      message_thread_id=thread, reply_markup=keyboard)
        return sent_id(sent, "sendMessage")

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes | None:
        """`getFile`, then the file download URL (the Bot API serves at most 20 MB)."""
        if not attachment.ref or self._bot is None:
            return None
        try:
            file = await self._bot.get_file(attachment.ref)
            if file.file_size is not None and file.file_size > max_bytes:
                raise AttachmentTooLarge(f"{attachment.name} is {file.file_size} bytes, over {max_bytes}")
            data = bytes(await file.download_as_bytearray())
        except TelegramError as e:
            if "too big" in str(e).lower():
                raise AttachmentTooLarge(f"{attachment.name}: {e}") from None
            raise PlatformError(f"fetching {attachment.name}: {e}") from None
        if len(data) > max_bytes:
            raise AttachmentTooLarge(f"{attachment.name} is {len(data)} bytes, over {max_bytes}")
        return data

    # --- HTTP (webhook mode) -------------------------------------------------------------

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        if self._section.mode != "webhook":
            return []
        return [web.post(f"/telegram/webhook/{self.binding_id}", self._webhook)]

    async def _webhook(self, request: web.Request) -> web.Response:
        expected = self._webhook_secret
        given = request.headers.get(_SECRET_HEADER, "")
        if expected is None or not hmac.compare_digest(given.encode(), expected.reveal().encode()):
            return web.Response(status=401, text="unauthorized")
        if self._me is None or self._dispatcher is None or self._stopping:
            return web.Response(status=503, text="not ready")  # Telegram retries later
        try:
            raw = await request.json()
        except ValueError:
            self._log.warning("dropping a webhook request that is not JSON")
            return web.Response(status=400, text="expected a JSON update")
        if not isinstance(raw, dict):
            return web.Response(status=400, text="expected a JSON object")
        try:
            await self._handle(raw)
        except _SubmitFailed as e:  # not taken: let Telegram deliver it again
            self._log.error("update %s not taken: %s", raw.get("update_id"), e)
            return web.Response(status=500, text="try again")
        return web.Response(status=200)

    # --- replying ------------------------------------------------------------------------

    def render(self, markdown: str) -> str:
        return markdown_to_html(markdown)

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        bot = self._require_bot()
        chat_id, thread = _chat(target)
        async with self.pacer.paced(self.budget.message(chat_id)):
            with translated("sendMessage"):
                try:
                    sent = await bot.call("sendMessage", chat_id=chat_id, text=text, parse_mode=ParseMode.HTML,
                                          message_thread_id=thread)
                except TelegramError as e:
                    if not is_parse_error(e):
                        raise
                    self._log.warning("Telegram refused the HTML of a reply (%s); sending it as plain text", e)
                    sent = await bot.call("sendMessage", chat_id=chat_id, text=html_to_plain(text),
                                          message_thread_id=thread)
        return sent_id(sent, "sendMessage")

    async def upload(self, target: ReplyTarget, file: OutboundFile) -> str:
        """Nothing ahead: Telegram's sendPhoto / sendDocument take the bytes and post in one call."""
        return ""

    async def share(self, target: ReplyTarget, files: Sequence[tuple[OutboundFile, str]], caption: str) -> str:
        """sendPhoto / sendDocument / sendAudio (sendVoice for OGG/Opus) for one file, sendMediaGroup (an
        album) for several of one family (photos; documents; audio), else one send each with the caption
        on the first. A file the Bot API refuses as too large is FileTooLarge naming its limits (the send
        is the upload here)."""
        try:
            return await self._send_files(target, [f for f, _ in files], caption)
        except FileTooLarge as e:
            limits = self.file_limits.max_bytes
            raise FileTooLarge(f"{e}; the Bot API takes a photo of at most {size_text(limits[FileKind.IMAGE])} and "
                               f"any other file of at most {size_text(limits[FileKind.DOCUMENT])}") from None

    async def _send_files(self, target: ReplyTarget, items: list[OutboundFile], caption: str) -> str:
        bot = self._require_bot()
        chat_id, thread = _chat(target)
        where: dict[str, Any] = {"message_thread_id": thread}
        if len(items) > 1 and len({f.kind for f in items}) == 1:
            # attach=True: each file goes as its own multipart part that the album names (attach://…).
            media = [_MEDIA[f.kind](InputFile(f.data, filename=f.name, attach=True), caption=caption if i == 0 else None,
                                    parse_mode=ParseMode.HTML if i == 0 and caption else None)
                     for i, f in enumerate(items)]
            for _ in items[1:]:  # every photo of an album is a message of the chat's budgets
                await self.pacer.take(self.budget.message(chat_id))
            async with self.pacer.paced(self.budget.message(chat_id)):
                with translated("sendMediaGroup"):
                    sent = await bot.send_media_group(chat_id, media, **where)
            return str(sent[0].message_id)
        first = ""
        for i, f in enumerate(items):
            text = {"caption": caption, "parse_mode": ParseMode.HTML} if i == 0 and caption else {}
            upload = InputFile(f.data, filename=f.name)
            async with self.pacer.paced(self.budget.message(chat_id)):
                if f.kind is FileKind.IMAGE:
                    with translated("sendPhoto"):
                        sent_one = await bot.send_photo(chat_id, upload, **text, **where)
                elif f.kind is FileKind.AUDIO and f.media_type == VOICE_NOTE:
                    # OGG/Opus is what Telegram shows as a voice note (a waveform, played in place).
                    with translated("sendVoice"):
                        sent_one = await bot.send_voice(chat_id, upload, **text, **where)
                elif f.kind is FileKind.AUDIO:
                    with translated("sendAudio"):
                        sent_one = await bot.send_audio(chat_id, upload, **text, **where)
                else:
                    with translated("sendDocument"):
                        sent_one = await bot.send_document(chat_id, upload, **text, **where)
            first = first or str(sent_one.message_id)
        return first

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        bot = self._require_bot()
        chat_id, _ = _chat(target)
        key = (chat_id, message_id)
        run_id, final = self._stops.for_edit(key)  # the reply's final edit: without the keyboard, which it removes
        # An edit without reply_markup drops the keyboard: a reply with a Stop button passes it every time.
        markup = stop_keyboard(run_id) if run_id is not None else None
        async with self.pacer.paced(self.budget.message(chat_id)):
            with translated("editMessageText"):
                try:
                    try:
                        await bot.call("editMessageText", chat_id=chat_id, message_id=int(message_id), text=text,
                                       parse_mode=ParseMode.HTML, reply_markup=markup)
                    except TelegramError as e:
                        if not is_parse_error(e):
                            raise
                        self._log.warning("Telegram refused the HTML of an edit (%s); editing as plain text", e)
                        await bot.call("editMessageText", chat_id=chat_id, message_id=int(message_id),
                                       text=html_to_plain(text), reply_markup=markup)
                except TelegramError as e:
                    if not is_not_modified(e):  # the same text again is not a failure
                        raise
        self._stops.edited(key, final=final)

    def stop_control_ends_with_edit(self, target: ReplyTarget, message_id: str) -> None:
        """The reply's final edit goes without the ⏹ keyboard: one call against the chat's budget, not
        two (in a group, 20 a minute, that is a quarter of what a short answer costs)."""
        self._stops.ends_with_edit((_chat(target)[0], message_id))

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        """A ⏹ Stop button under the streaming reply, kept on every edit; taken away when the reply is final."""
        bot = self._require_bot()
        chat_id, _ = _chat(target)
        key = (chat_id, message_id)
        if not present and not self._stops.take_off(key):
            return  # none of ours on it (the final edit took it away)
        # Shown only if the chat's budget has room now (the runner asks again at its next step); taken
        # away whatever the wait, so no final reply keeps a button.
        with impatient() if present else contextlib.nullcontext():
            async with self.pacer.paced(self.budget.message(chat_id)):
                with translated("editMessageReplyMarkup"):
                    try:
                        await bot.call("editMessageReplyMarkup", chat_id=chat_id, message_id=int(message_id),
                                       reply_markup=stop_keyboard(run_id) if present else None)
                    except TelegramError as e:
                        if not is_not_modified(e):
                            raise
        if present:
            self._stops.shown(key, run_id)

    async def show_typing(self, target: ReplyTarget) -> None:
        bot = self._require_bot()
        chat_id, thread = _chat(target)
        async with self.pacer.paced(self.budget.action()):
            with translated("sendChatAction"):
                await bot.call("sendChatAction", chat_id=chat_id, action=ChatAction.TYPING, message_thread_id=thread)

    def native_stream(self, target: ReplyTarget) -> TelegramNativeStream | None:
        """A private chat streams as a draft; groups keep edit-in-place under the group budget."""
        if not (self.drafts and target.chat_kind is ChatKind.DM and self._bot is not None):
            return None
        return TelegramNativeStream(self._bot, target, render=self.render, pacer=self.pacer,
                                 draft_scopes=self.budget.draft(), post=self.post_message,
                                 on_unavailable=self._no_drafts)

    def _no_drafts(self) -> None:
        if self.drafts:
            self.drafts = False
            self._log.info("Telegram refused a message draft: private replies are posted and edited")

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        return await self._post_with_buttons(target, card_html(card), card_keyboard(card))

    async def post_question(self, target: ReplyTarget, card: QuestionCard) -> str:
        return await self._post_with_buttons(target, question_html(card), question_keyboard(card))

    async def update_question(self, target: ReplyTarget, ref: str, card: QuestionCard) -> None:
        await self._edit_with_buttons(target, ref, question_html(card), question_keyboard(card))

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        # An empty keyboard once decided: the edit removes the buttons.
        await self._edit_with_buttons(target, card_ref, card_html(card), card_keyboard(card))

    async def _edit_with_buttons(self, target: ReplyTarget, ref: str, html: str, keyboard: Any) -> None:
        bot = self._require_bot()
        chat_id, _ = _chat(target)
        async with self.pacer.paced(self.budget.message(chat_id)):
            with translated("editMessageText"):
                try:
                    await bot.call("editMessageText", chat_id=chat_id, message_id=int(ref), text=html,
                                   parse_mode=ParseMode.HTML, reply_markup=keyboard)
                except TelegramError as e:
                    if not is_not_modified(e):
                        raise

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        """Telegram has no ephemeral messages: say it in the person's private chat with the bot.

        In a DM that is the chat itself. In a group it works only if the person has started a
        chat with the bot; otherwise this raises rather than say it in front of the group.
        """
        bot = self._require_bot()
        if target.chat_kind is ChatKind.DM:
            chat_id, thread = _chat(target)
        else:
            chat_id, thread = int(account_id), None
        async with self.pacer.paced(self.budget.message(chat_id)):
            with translated("sendMessage"):
                try:
                    await bot.call("sendMessage", chat_id=chat_id, text=text, message_thread_id=thread)
                except Forbidden as e:
                    raise PlatformError(f"cannot message {account_id} privately: they have not started the bot") from e

    def directory(self) -> TelegramDirectory | None:
        return TelegramDirectory(self._bot) if self._bot is not None else None

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        directory = self.directory()
        if directory is None:
            raise PlatformError(f"telegram binding {self.binding_id} is not started")
        return await directory.is_member(target, account_id)

    # --- helpers -------------------------------------------------------------------------

    def _require_bot(self) -> TelegramBot:
        if self._bot is None:
            raise PlatformError("the Telegram adapter is not started")
        return self._bot


def file_url(api_url: str) -> str:
    """Where the Bot API serves files, from where it answers methods: `…/bot` → `…/file/bot`."""
    return api_url.removesuffix("/bot") + "/file/bot" if api_url.endswith("/bot") else "https://api.telegram.org/file/bot"


class _SubmitFailed(Exception):
    """The core raised on every attempt to take an update."""


def _chat(target: ReplyTarget) -> tuple[int, int | None]:
    """The chat id and the forum topic (message_thread_id) replies go to."""
    return int(target.channel), int(target.thread) if target.thread else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Redact(logging.Filter):
    """Replaces secrets in log records of the loggers that see request URLs and parameters."""

    LOGGERS = ("aiohttp.client", "telegram.Bot", "telegram.request.BaseRequest")

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s]
        self._extra: tuple[logging.Logger, ...] = ()

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(s in message for s in self._secrets):
            record.msg, record.args = self.scrub(message), None
        return True

    def install(self, *extra: logging.Logger) -> None:
        self._extra = extra
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        for logger in extra:
            logger.addFilter(self)

    def uninstall(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)
        for logger in self._extra:
            logger.removeFilter(self)


def _plain(text: str) -> str:
    """A menu description is plain text: no Markdown code marks."""
    return text.replace("`", "")


def _conversation_of(raw: dict[str, Any]) -> tuple[Any, Any]:
    """The chat (and forum topic) an update belongs to, as far as its raw shape tells; updates
    of one key are handed over in order. Anything unreadable (it is not parsed yet) shares one key."""
    item: Any = None
    for field_name in ("message", "edited_message", "channel_post", "edited_channel_post", "message_reaction"):
        if isinstance(raw.get(field_name), dict):
            item = raw[field_name]
            break
    else:
        query = raw.get("callback_query")
        item = query.get("message") if isinstance(query, dict) else None
    chat = item.get("chat") if isinstance(item, dict) else None
    chat_id = chat.get("id") if isinstance(chat, dict) else None
    if not isinstance(chat_id, int):
        return None, None
    topic = item.get("message_thread_id") if item.get("is_topic_message") is True else None
    return chat_id, topic if isinstance(topic, int) else None


def _advance(offset: int, updates: list[tuple[int, dict[str, Any]]], taken: set[int]) -> int:
    """The next offset: past every update of the batch taken in a row from its start."""
    for update_id, _ in updates:
        if update_id not in taken:
            break
        offset = update_id + 1
    return offset
