"""SlackAdapter: one Slack binding (one app in one workspace) behind the core's Adapter protocol.

slack-bolt's AsyncApp does the Slack protocol work (request signatures, url_verification,
self-event filtering, listener dispatch); this module wires it to the core and translates:
events in through `normalize`, replies out through `render` / `cards`, errors through `api`.
Over Socket Mode, Events API envelopes skip Bolt's dispatch (`_on_socket_event`: nothing of it
is needed for an event there, and it was most of an event's cost); clicks and slash commands,
and everything in HTTP mode, go through Bolt.

Acks: bolt runs with `process_before_response=True`, so the ack (the Socket Mode envelope
response, or the HTTP 200) is sent only when our listener returns — after
`dispatcher.submit()` has durably recorded the message; `_on_socket_event` acks the same way.
A listener that fails before that sends no ack, and Slack redelivers; the core's ledger turns a
redelivery into nothing. Slack's last delivery (its third retry) is the exception: refused by a
busy store, it is acked and held until the store takes it (`held.HeldEvents`: in memory and in
the gateway's spool on disk, written before the ack), since no further delivery would come. A message this process stored lately, delivered again (a mention comes
as `message` and `app_mention`), and the bot's own posts echoed back are acked unread.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import re
import time
import urllib.parse
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.base import BaseAdapter, read_capped, within
from adapters.stop_buttons import StopButtons
from gateway.adapter_registry import AdapterContext
from gateway.outbound.budget import Pacer, impatient, scaled
from bindings.models import BindingSpec, SlackSection
from gateway.inbound.memory_card import MemoryCard, MemoryClick
from gateway.messages import Attachment, ChatKind, InboundMessage, Sender
from gateway.store.availability import StoreUnavailable
from gateway.spool import Spool
from gateway.outbound.adapter import (
    AnswersDirectory,
    ApprovalCard,
    AsksQuestions,
    QuestionCard,
    FileKind,
    FileLimits,
    OutboundFile,
    SendsFiles,
    ConfirmsMembership,
    CHAT_FIRST_DRAFT_AFTER,
    FetchesAttachments,
    FinalEditTakesStop,
    FindsOwnCards,
    FindsOwnPosts,
    PlatformError,
    PlatformLimits,
    PostsMemoryCards,
    RateLimited,
    ReplyTarget,
    ShowsStatus,
    ShowsStopControl,
    SpeaksAs,
    StreamsNatively,
    Trouble,
)
from gateway.tasks import cancel_and_wait

from . import scopes
from .api import JsonPost, SlackConnection, Unreached, UserNames, call, sdk_logger
from .budget import RULES, SlackBudget
from .native_stream import SlackNativeStream
from .cards import (ACTION_PREFIX, MEMORY_ACTION_PREFIX, SHOW_ACTION_PREFIX, arguments_view, card_message, memory_message,
                    parse_action_value, parse_show_value)
from .stop import control_blocks, is_reply, parse_stop, reply_blocks
from .questions import QUESTION_ACTION_PREFIX, parse_question_value, question_message
from .directory import SlackDirectory
from .frames import CheckedSocketModeClient, payload_problem
from .held import HeldEvents
from .normalize import BotIdentity, chat_kind, echoed, normalize_event, pair_key
from .render import markdown_to_mrkdwn

T = TypeVar("T")
CONNECT_TIMEOUT = 15.0  # seconds for one websocket connect before backing off and retrying
THINKING_STATUS = "is thinking…"
# Seconds an events envelope's ack waits once its message is stored. Slack allows 3 s; sent at once, the
# ack (and a mention's twin's) was the loop's work between the message's store and its run's model request,
# a frame written and its reader woken. Later it goes while the run waits for its model (bench/README.md, Round 15).
ACK_AFTER = 0.05

# Slack shows up to 40,000 characters but folds long messages; 3,900 keeps one reply readable
# and leaves room for the mrkdwn escapes `render` adds.
# Connections to one host (the Web API; file downloads go to another), per binding. Slack's tiers
# allow tens of calls a minute per method: 16 at once carry any burst they allow; aiohttp's default
# (100 in all) kept as many idle sockets after a burst of replies as calls in flight at its peak.
WEB_API_CONNECTIONS = 16
REMEMBERED_POSTS = 256  # recent replies' texts, for putting a Stop button on one (chat.update needs the text)
# An assistant thread's status lasts two minutes unless a message is sent (assistant.threads.setStatus).
# Slack takes files up to 1 GB (files.getUploadURLExternal's `length`); ten to a message.
SLACK_FILE_BYTES = 1 << 30
SLACK_FILE_LIMITS = FileLimits(max_bytes=dict.fromkeys(FileKind, SLACK_FILE_BYTES), max_files=10,
                               max_caption_chars=3_900)
SLACK_LIMITS = PlatformLimits(max_message_chars=3_900, min_edit_interval=1.0, supports_edit=True, typing_lasts=120.0,
                              first_draft_after=CHAT_FIRST_DRAFT_AFTER)


class SlackAdapter(BaseAdapter, StreamsNatively, ShowsStatus, ShowsStopControl, FinalEditTakesStop,
                   PostsMemoryCards, AnswersDirectory, FetchesAttachments, FindsOwnPosts, FindsOwnCards,
                   SpeaksAs, SendsFiles, ConfirmsMembership, AsksQuestions):
    """Socket Mode (default) or HTTP Events API, chosen by `slack.mode` in the binding."""

    platform = "slack"
    limits = SLACK_LIMITS
    file_limits = SLACK_FILE_LIMITS

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        if binding.slack is None:
            raise ValueError("a slack binding needs a slack: section")
        super().__init__(binding, context)
        self._section: SlackSection = binding.slack
        self._conn = SlackConnection()
        self._app: AsyncApp | None = None
        self._directory = SlackDirectory(self._conn, self._call)
        self._session: aiohttp.ClientSession | None = None
        self._kinds: dict[str, ChatKind] = {}  # channel id → chat kind, learned from events
        # Dedupe keys of the events being handled now (Socket Mode): the other event of a pair waits for
        # its first, then asks the core whether it was stored (in a burst it mostly arrives meanwhile).
        self._handling: dict[str, asyncio.Event] = {}
        # Slack's last deliveries of events the store refused: acked, held, stored when it answers.
        # On disk too, where the gateway has a spool: a restart keeps them (`gateway.spool`).
        spool = Spool(context.spool / binding.id, self._log) if context.spool is not None else None
        self._held = HeldEvents(self._handle_event, self._spawn, lambda: self._stopping, self._clock, self._log, spool)
        self._no_status: set[str] = set()  # channels where assistant.threads.setStatus was refused
        self._set_status: JsonPost | None = None
        self._app_token = ""
        self.ping_interval = 10.0
        self.ack_after = ACK_AFTER
        self.pacer = Pacer(clock=self._clock)  # every outbound call waits here for its method's tier and its channel
        self.budget = SlackBudget(scaled(RULES, context.gateway.limits.platform_budget_scale))
        self.native_streaming = True  # until a method is refused: then post + edit for this binding
        # Stop controls (adapters/slack/stop.py), keyed (channel, reply ts): the run a reply's own button
        # stops; the control message beside a natively streamed reply; the last text of recent posts;
        # recent natively streamed replies (None: the value is unused).
        self._stops: StopButtons[tuple[str, str]] = StopButtons()
        self._stop_posts: dict[tuple[str, str], str] = {}
        self._texts: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()
        self._native: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    # --- lifecycle: the base's start/stop call these ---------------------------------------

    async def _open(self) -> None:
        section = self._section
        bot_token = self._secret("bot_token", section.bot_token).reveal()
        signing_secret = self._secret("signing_secret", section.signing_secret).reveal() if section.signing_secret else ""
        self._app_token = self._secret("app_token", section.app_token).reveal() if section.app_token else ""
        # One session for every Web API call of this binding: a new connection per call
        # would double the latency of each reply edit.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit_per_host=WEB_API_CONNECTIONS))
        base_url = section.api_url if section.api_url.endswith("/") else section.api_url + "/"
        client = AsyncWebClient(token=bot_token, base_url=base_url, session=self._session, logger=sdk_logger(self._log, "web"))
        self._conn.client = client
        self._conn.users = UserNames(client, self._call, clock=self._clock)
        self._set_status = JsonPost(self._session, client, "assistant.threads.setStatus")  # every message's first sign
        self._app = self._build_app(client, signing_secret)

    async def _connect_once(self) -> None:
        await self._held.resume()  # what a stop or a crash left in the spool: once per start
        await (self._socket_once() if self._section.mode == "socket" else self._http_ready())

    async def _close(self) -> None:
        self._held.give_up()  # its retries were cancelled and awaited with the other side tasks
        # Requests that still reach the HTTP route get 503 (Slack retries them later).
        self._app = None
        self._conn.client = self._conn.users = None
        self._set_status = None
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        """HTTP mode: one Request URL for events and interactivity, per binding."""
        if self._section.mode != "http":
            return []
        return [web.post(f"/slack/events/{self.binding_id}", self._http_request)]

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes | None:
        """`url_private` with the bot token, sent only to Slack's own file hosts (or the configured api_url's)."""
        client, session = self._conn.client, self._session
        if not attachment.ref or client is None or session is None or client.token is None:
            return None
        host = urllib.parse.urlsplit(attachment.ref).hostname or ""
        if not (host.endswith((".slack.com", ".slack-gov.com"))
                or host == urllib.parse.urlsplit(self._section.api_url).hostname):
            raise PlatformError(f"fetching {attachment.name}: not a Slack file URL")
        return await read_capped(session, attachment.ref, {"Authorization": f"Bearer {client.token}"}, max_bytes,
                                 attachment.name, login_page=True)

    # --- connecting -----------------------------------------------------------------------

    def _build_app(self, client: AsyncWebClient, signing_secret: str) -> AsyncApp:
        app = AsyncApp(
            # Named, so Bolt does not name the app after its caller's file with `inspect.stack()`: that
            # resolves the real path of every imported module's file, 40-65 ms of CPU before READY with
            # the daemon's ~1,700 modules loaded. The name is the logger Bolt hands listeners: ours.
            name=self._log.name,
            client=client,
            signing_secret=signing_secret,
            process_before_response=True,
            request_verification_enabled=self._section.mode == "http",
            logger=self._log,
        )
        # Bolt sends no ack for an event no listener matches (Slack would redeliver it):
        # listen to every event type and every block action, and ignore what is not ours.
        app.event(re.compile(".*"))(self._on_event)
        app.action(re.compile(".*"))(self._on_action)
        app.command(re.compile(".*"))(self._on_command)
        app.error(self._on_listener_error)
        return app

    async def _on_listener_error(self, error: Exception, body: dict[str, Any]) -> None:
        """A listener raised: no ack goes out (Bolt answers 500), so Slack delivers it again.
        A busy database is routine (the store has not taken the event): one warning line.
        Anything else is a bug, logged with its traceback."""
        event_id = body.get("event_id", "?") if isinstance(body, dict) else "?"
        if isinstance(error, StoreUnavailable):
            self._log.warning("event %s not acked: %s (%s); Slack delivers it again", event_id, error.what, error)
        else:
            self._log.error("a Slack listener failed on %s", event_id, exc_info=error)

    async def _whoami(self) -> None:
        client = self._require_client()
        auth = await call("auth.test", client.auth_test())
        self._conn.bot_user_id, self._conn.bot_id = str(auth["user_id"]), str(auth.get("bot_id") or "")

    async def _verify(self) -> list[Trouble]:
        """auth.test with the bot token (its answer's `x-oauth-scopes` against the manifest's), and in
        Socket Mode apps.connections.open with the app token (a ticket, not a connection)."""
        client = self._require_client()
        troubles = []
        try:
            auth = await call("auth.test", client.auth_test())
        except PlatformError as e:
            return [Trouble(f"bot_token ({self._section.bot_token.describe()}): Slack refused it ({e})",
                            "copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page again")]
        lacking = scopes.missing(auth.headers.get("x-oauth-scopes") or auth.headers.get("X-OAuth-Scopes"))
        if lacking:
            effects = "; ".join(f"{s}: {scopes.NEEDED[s]}" for s in lacking)
            troubles.append(Trouble(f"bot_token lacks the scopes {', '.join(lacking)} ({effects})",
                                    "add them under OAuth & Permissions → Bot Token Scopes (docs/slack.md's "
                                    "manifest lists them), then reinstall the app to the workspace"))
        if self._section.mode == "socket":
            try:
                await call("apps.connections.open", client.apps_connections_open(app_token=self._app_token))
            except PlatformError as e:
                troubles.append(Trouble(f"app_token ({self._section.app_token.describe() if self._section.app_token else ''}): "
                                        f"Slack refused it ({e})",
                                        "generate an app-level token (xapp-…) with connections:write under Basic "
                                        "Information → App-Level Tokens, and turn Socket Mode on"))
        return troubles

    async def _http_ready(self) -> None:
        """HTTP mode has nothing to hold open: ready once the token works."""
        await self._whoami()
        self._health.up("http mode: token verified")
        await asyncio.Event().wait()

    async def _socket_once(self) -> None:
        """One Socket Mode connection, from apps.connections.open until it drops.

        The SDK's own reconnect loop retries at a fixed interval forever; we turn it off and
        let the base's reconnect loop back off with jitter instead. A `disconnect` frame (Slack
        asking for a refresh) is still followed at once by the SDK, as Slack intends.
        """
        client = self._require_client()
        await self._whoami()
        url = (await call("apps.connections.open", client.apps_connections_open(app_token=self._app_token)))["url"]
        dropped = asyncio.Event()

        async def on_drop(_: object) -> None:
            dropped.set()

        async def on_message(_: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None = None) -> None:
            if message.get("type") == "hello":
                self._health.up("socket mode: connected")

        socket = CheckedSocketModeClient(
            app_token=self._app_token,
            logger=sdk_logger(self._log, "socket"),
            web_client=client,
            auto_reconnect_enabled=False,
            ping_interval=self.ping_interval,
            on_close_listeners=[on_drop],
            on_error_listeners=[on_drop],
        )
        socket.message_listeners.append(on_message)
        socket.socket_mode_request_listeners.append(self._on_socket_request)
        socket.wss_uri = url
        try:
            await asyncio.wait_for(socket.connect(), CONNECT_TIMEOUT)
            while not dropped.is_set():
                try:
                    await asyncio.wait_for(dropped.wait(), self.ping_interval)
                except TimeoutError:
                    # Dead without a close frame (ping-pong failing), and not mid-refresh.
                    if not socket.connect_operation_lock.locked() and not await socket.is_connected():
                        break
        finally:
            await _close_socket(socket)

    async def _on_socket_request(self, socket: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        started = time.time()
        key = pair_key(req.payload) if req.type == "events_api" else None
        while key is not None and (first := self._handling.get(key)) is not None:
            await first.wait()  # the other event of its pair, being handled: then the core knows
        if req.type == "events_api" and self._settled_unread(req.payload, key):
            # Acked all the same: Slack delivers an envelope nobody acked again.
            await self._out_of_the_way()
            await self._send_ack(socket, req)
            return
        try:
            problem = payload_problem(req.payload)
            if problem is not None:
                raise ValueError(problem)
            event = req.type == "events_api" and req.payload.get("type") == "event_callback"
            bolt_request = None if event else AsyncBoltRequest(mode="socket_mode", body=req.payload,
                                                                 headers=build_headers(req))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._log.warning("dropped a malformed Socket Mode %s payload: %s", req.type, _bolt_refusal(e))
            # Acked: a redelivery would fail the same way, for ever.
            await self._ack(socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id)), req)
            return
        if bolt_request is None:
            await self._on_socket_event(socket, req, key)
            return
        response = await self._require_app().async_dispatch(bolt_request)
        await self._ack(send_async_response(socket, req, response, started), req)

    async def _on_socket_event(self, socket: AsyncBaseSocketModeClient, req: SocketModeRequest, key: str | None) -> None:
        """An Events API envelope, handled without Bolt's dispatch (its middleware, a Web API client
        and every listener argument built per event: ~220 calls). Over Socket Mode nothing of it is
        needed for an event: no signature to check, who the bot is is our own auth.test's, its own
        posts are `normalize`'s to tell. As Bolt's `process_before_response`: acked once handled
        (`ack_after` later: `_out_of_the_way`), and a handler that raises sends no ack (Bolt's 500),
        so Slack delivers the event again (unless this was its last delivery and the store refused
        it: acked and held, `HeldEvents`).
        While it is handled, an event of the same `key` waits (`_on_socket_request`)."""
        handling = asyncio.Event()
        if key is not None:
            self._handling[key] = handling  # before any await: the caller checked there was none
        bot = BotIdentity(self._conn.bot_user_id, self._conn.bot_id)
        try:
            try:
                await self._handle_event(req.payload, bot)
            except Exception as e:
                if not (isinstance(e, StoreUnavailable) and await self._held.take(req.payload, bot, req.retry_attempt)):
                    await self._on_listener_error(e, req.payload)
                    return
            # Stored (or held): its twin, waiting for `handling`, is settled only then, as this is acked.
            await self._out_of_the_way()
        finally:
            if key is not None:
                del self._handling[key]
            handling.set()
        await self._send_ack(socket, req)

    async def _out_of_the_way(self) -> None:
        """Wait `ack_after` before an events envelope's ack (and its twin's settling): out of the way of
        the run its message started, on its way to the model request. Real time, not the gateway's
        clock: what is waited out is the loop's work of the moment, which a test's clock does not hold
        up. A connection dropped meanwhile loses the ack (`_ack`); Slack then delivers the event again
        and the ledger drops it."""
        await asyncio.sleep(self.ack_after)

    async def _send_ack(self, socket: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        await self._ack(socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id)), req)

    def _settled_unread(self, body: Any, key: str | None) -> bool:
        """An event not worth handling: the bot's own post echoed back, or a message this process
        stored lately (`key`, its `pair_key`), delivered again (the mention's other event, mostly),
        which the core counts as the duplicate it is. Socket Mode only: an HTTP request is trusted
        once Bolt has checked its signature."""
        if echoed(body, BotIdentity(self._conn.bot_user_id, self._conn.bot_id)):
            return True
        return key is not None and self._require_dispatcher().stored_lately(self.binding_id, self.platform, key)

    async def _ack(self, sending: Coroutine[Any, Any, None], req: SocketModeRequest) -> None:
        """An ack, which a connection dropped meanwhile cannot carry: routine, not an error. The
        event is stored by now; Slack redelivers it on the next connection and the store knows it."""
        try:
            await sending
        except (ConnectionError, aiohttp.ClientError, RuntimeError) as e:
            self._log.info("the ack of envelope %s was lost with the connection (%s); Slack redelivers it",
                           req.envelope_id, e)

    async def _http_request(self, request: web.Request) -> web.StreamResponse:
        """Events and interactivity in HTTP mode. Bolt checks the signature and the 5-minute
        window first: a forged or stale request gets 401 and no listener runs."""
        app = self._app
        if app is None:
            return web.json_response({"error": "not started"}, status=503)
        try:
            bolt_request = await to_bolt_request(request)
            problem = payload_problem(bolt_request.body)
            if problem is not None:
                raise ValueError(problem)
        except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as e:
            self._log.warning("refused a malformed Slack request: %s", _bolt_refusal(e))
            return web.json_response({"error": "malformed request"}, status=400)
        response = await app.async_dispatch(bolt_request)
        return await to_aiohttp_response(response)

    # --- inbound --------------------------------------------------------------------------

    async def _on_event(self, ack: Any, body: dict[str, Any], context: AsyncBoltContext,
                        request: AsyncBoltRequest) -> None:
        """An event through Bolt (HTTP mode, its signature checked), acked once handled; one the
        store refused on Slack's last delivery (`X-Slack-Retry-Num`) is acked and held."""
        bot = BotIdentity(context.bot_user_id or self._conn.bot_user_id, context.bot_id or self._conn.bot_id)
        try:
            await self._handle_event(body, bot)
        except StoreUnavailable:
            if not await self._held.take(body, bot, _retry_num(request)):
                raise
        await ack()

    async def _handle_event(self, body: dict[str, Any], bot: BotIdentity) -> None:
        """The event's message to the core. If `submit` raises, the caller sends no ack and Slack
        delivers the event again later (a busy database must raise: `_on_listener_error`)."""
        event_id = body.get("event_id", "?") if isinstance(body, dict) else "?"
        try:
            message = await self._to_message(body, bot)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._log.warning("dropping malformed slack event %s: %s: %s", event_id, type(e).__name__, e)
            message = None
        if message is not None:
            result = await self._require_dispatcher().submit(message)
            if not result.accepted:
                self._log.debug("event %s not run: %s", event_id, result.reason or ("duplicate" if result.duplicate else "-"))

    async def _to_message(self, body: dict[str, Any], bot: BotIdentity) -> InboundMessage | None:
        event = body["event"]
        if event.get("type") not in ("message", "app_mention"):
            return None
        channel = str(event.get("channel") or "")
        kind = chat_kind(event.get("channel_type"), channel)
        if kind is not None and event.get("channel_type"):
            self._kinds[channel] = kind
        elif kind is None and channel:
            kind = await self._channel_kind(channel)
        admission = self.binding.admission
        message = normalize_event(
            body,
            binding_id=self.binding_id,
            bot=bot,
            kind=kind,
            include_edits=not admission.ignore_edits,
            admit_bots=not admission.ignore_bots,
        )
        if message is None or message.sender.is_bot:
            return message
        name = await self._require_users().display_name(message.sender.account_id)
        return dataclasses.replace(message, sender=Sender(message.sender.account_id, name))

    async def _on_command(self, ack: Any, body: dict[str, Any]) -> None:
        """A slash command the app defines (`/memory`, `/help`, …): the core's command path, as if
        typed with `!`. Slack sends no thread: a command answers about the person or the channel.
        Acked empty once submitted; the answer comes from the core (privately, as for `!`)."""
        try:
            message = await self._command_message(body)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._log.warning("dropping malformed slash command: %s: %s", type(e).__name__, e)
            message = None
        if message is not None:
            await self._require_dispatcher().submit(message)
        await ack()

    async def _command_message(self, body: dict[str, Any]) -> InboundMessage | None:
        command, user_id, channel = str(body["command"]), str(body["user_id"]), str(body["channel_id"])
        if not command.startswith("/") or not user_id or not channel:
            return None
        trigger = str(body.get("trigger_id") or f"{channel}.{user_id}.{time.time_ns()}")
        kind = ChatKind.DM if channel.startswith("D") else await self._channel_kind(channel)
        return InboundMessage(
            platform="slack", binding_id=self.binding_id, workspace=str(body.get("team_id") or ""), channel=channel,
            chat_kind=kind, sender=Sender(user_id, await self._require_users().display_name(user_id)),
            text=f"{command} {body.get('text') or ''}".strip(), event_id=f"command:{trigger}", message_id=trigger,
            mentioned=True,  # addressed to the app by name
        )

    async def _channel_kind(self, channel: str) -> ChatKind:
        """A `G…` channel: a private channel or a group DM; conversations.info knows which."""
        if channel in self._kinds:
            return self._kinds[channel]
        try:
            info = (await call("conversations.info", self._require_client().conversations_info(channel=channel)))["channel"]
        except PlatformError as e:
            # Unknown: treat it as a channel, the kind with the least memory exposure.
            self._log.warning("cannot tell the kind of channel %s (%s); treating it as a channel", channel, e)
            return ChatKind.CHANNEL
        kind = ChatKind.DM if info.get("is_im") else ChatKind.GROUP if info.get("is_mpim") else ChatKind.CHANNEL
        self._kinds[channel] = kind
        return kind

    async def _on_action(self, ack: Any, body: dict[str, Any]) -> None:
        """An approval button. Ack after the decision is recorded; tell a refused clicker privately."""
        actions = body.get("actions") if isinstance(body, dict) else None
        first = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
        if str(first.get("action_id", "")).startswith(MEMORY_ACTION_PREFIX):
            await self._on_memory_action(ack, body, first)
            return
        if str(first.get("action_id", "")).startswith(SHOW_ACTION_PREFIX):
            await self._on_show_arguments(ack, body, first)
            return
        if str(first.get("action_id", "")).startswith(QUESTION_ACTION_PREFIX):
            await self._on_question_action(ack, body, first)
            return
        try:
            action = body["actions"][0]
            action_id, value = str(action.get("action_id", "")), str(action.get("value") or "")
            stop_run = parse_stop(action_id, value)
            parsed = parse_action_value(value) if action_id.startswith(ACTION_PREFIX) and stop_run is None else None
            user = body["user"]
            user_id = str(user["id"])
            channel = str((body.get("container") or {}).get("channel_id") or (body.get("channel") or {}).get("id") or "")
            thread = (body.get("container") or {}).get("thread_ts") or (body.get("message") or {}).get("thread_ts")
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            self._log.warning("dropping malformed block action: %s: %s", type(e).__name__, e)
            await ack()
            return
        if parsed is None and stop_run is None:
            await ack()
            return
        name = await self._require_users().display_name(user_id)
        if name == user_id:
            name = str(user.get("name") or user.get("username") or user_id)
        if stop_run is not None:
            # The core asks who may stop (the requester or a decider); anyone else is told alone.
            stopped = await self._require_dispatcher().stop_run(stop_run, Sender(user_id, name), binding_id=self.binding_id)
            await ack()
            if not stopped.stopped and channel:
                self._spawn(self._ephemeral(channel, user_id, stopped.message, thread))
            return
        assert parsed is not None
        decision, approval_id = parsed
        outcome = await self._require_dispatcher().decide(
            approval_id, decision, Sender(user_id, name), binding_id=self.binding_id, surface="slack"
        )
        await ack()
        if not outcome.accepted and channel:
            # After the ack (bolt sends it when this returns): the note must not delay it.
            self._spawn(self._ephemeral(channel, user_id, outcome.message, thread))

    async def _on_question_action(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A question card's button: the core asks who may answer; anyone else is told alone, after the ack."""
        parsed = parse_question_value(str(action.get("value") or ""))
        try:
            user_id = str(body["user"]["id"])
            channel = str((body.get("container") or {}).get("channel_id") or (body.get("channel") or {}).get("id") or "")
            thread = (body.get("container") or {}).get("thread_ts") or (body.get("message") or {}).get("thread_ts")
        except (KeyError, TypeError, AttributeError) as e:
            self._log.warning("dropping malformed question action: %s: %s", type(e).__name__, e)
            parsed = None
        if parsed is None:
            await ack()
            return
        name = await self._require_users().display_name(user_id)
        outcome = await self._require_dispatcher().answer(parsed[0], parsed[1], Sender(user_id, name),
                                                          binding_id=self.binding_id)
        await ack()
        if not outcome.accepted and channel:
            self._spawn(self._ephemeral(channel, user_id, outcome.message, thread))

    async def _on_show_arguments(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """"Show all arguments": a modal with every argument of the call, opened for the clicker with
        the click's trigger_id (valid 3 s, once). Only calls on this binding's cards are shown."""
        approval_id = parse_show_value(str(action.get("value") or ""))
        trigger = body.get("trigger_id")
        await ack()
        if approval_id is None or not isinstance(trigger, str):
            return
        item = await self._require_dispatcher().approval_item(approval_id, binding_id=self.binding_id)
        if item is None:
            return
        try:
            await call("views.open", self._require_client().views_open(trigger_id=trigger, view=arguments_view(item)))
        except PlatformError as e:
            self._log.warning("could not show the arguments of approval %s: %s", approval_id, e)

    async def _on_memory_action(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A `/memory` card's button: the core acts (on the store of the channel clicked in and the
        clicker, never what the button says), then the card is updated in place after the ack."""
        try:
            user_id = str(body["user"]["id"])
            container = body.get("container") or {}
            channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
            ts = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
            thread = container.get("thread_ts") or (body.get("message") or {}).get("thread_ts")
            team = str((body.get("team") or {}).get("id") or body["user"].get("team_id") or "")
        except (KeyError, TypeError, AttributeError) as e:
            self._log.warning("dropping malformed memory action: %s: %s", type(e).__name__, e)
            await ack()
            return
        if not channel:
            await ack()
            return
        kind = ChatKind.DM if channel.startswith("D") else await self._channel_kind(channel)
        outcome = await self._require_dispatcher().memory_click(MemoryClick(
            self.binding_id, team, channel, kind,
            Sender(user_id, await self._require_users().display_name(user_id)), str(action.get("value") or "")))
        await ack()
        if outcome.card is not None and ts:
            text, blocks = memory_message(outcome.card)
            self._spawn(self._update_quietly(channel, ts, text, blocks))
        if outcome.message:
            self._spawn(self._ephemeral(channel, user_id, outcome.message, thread))

    async def _update_quietly(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        try:
            await self._call("chat.update", channel,
                             self._require_client().chat_update(channel=channel, ts=ts, text=text, blocks=blocks))
        except PlatformError as e:
            self._log.warning("could not update a memory card: %s", e)

    async def _ephemeral(self, channel: str, user: str, text: str, thread: str | None) -> None:
        try:
            await self._post_ephemeral(channel, user, text, thread)
        except PlatformError as e:
            self._log.warning("could not tell %s privately: %s", user, e)

    # --- outbound -------------------------------------------------------------------------

    def render(self, markdown: str) -> str:
        return markdown_to_mrkdwn(markdown)

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        # Another agent's answer (a handoff) is posted under its own name: chat:write.customize.
        persona = {"username": target.speaker} if target.speaker else {}
        response = await self._call(
            "chat.postMessage", target.channel,
            self._require_client().chat_postMessage(**_where(target), text=text, unfurl_links=False, unfurl_media=False,
                                                    **persona),
        )
        ts = str(response["ts"])
        self._remember(target.channel, ts, text)
        return ts

    async def upload(self, target: ReplyTarget, file: OutboundFile) -> str:
        """Slack's external upload, its first two steps: an upload URL for the file, then its bytes
        POSTed there. Nobody sees the file until `share` completes it (never the retired files.upload)."""
        client, session = self._require_client(), self._session
        if session is None:
            raise PlatformError(f"slack binding {self.binding_id} is not started")
        got = await self._call("files.getUploadURLExternal", target.channel,
                               client.files_getUploadURLExternal(filename=file.name, length=len(file.data)))
        url, file_id = str(got["upload_url"]), str(got["file_id"])
        try:
            # The upload URL is a file host's, not a Web API method: no tier counts it.
            async with session.post(url, data=file.data, headers={"Content-Type": file.media_type}) as answer:
                if answer.status == 429:
                    raise RateLimited(float(answer.headers.get("Retry-After", "1")), "file upload")
                if answer.status != 200:
                    raise PlatformError(f"slack file upload: HTTP {answer.status}")
        except aiohttp.ClientError as e:
            raise PlatformError(f"slack file upload: {type(e).__name__}") from None
        return file_id

    async def share(self, target: ReplyTarget, files: Sequence[tuple[OutboundFile, str]], caption: str) -> str:
        """files.completeUploadExternal into the channel (and thread): the files show as one message."""
        where = {"channel_id": target.channel, **({"thread_ts": target.thread} if target.thread else {})}
        comment = {"initial_comment": caption} if caption else {}
        done = await self._call("files.completeUploadExternal", target.channel,
                                self._require_client().files_completeUploadExternal(
                                    files=[{"id": ref, "title": f.name} for f, ref in files], **where, **comment))
        shared = done.get("files") or [{}]
        return str(shared[0].get("id") or files[0][1])

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        key = (target.channel, message_id)
        run_id, final = self._stops.for_edit(key)  # the reply's final edit: `text` alone, which drops the button
        # A reply with a Stop button is shown by its blocks: the button rides on every edit, or it is gone.
        blocks = {"blocks": reply_blocks(text, run_id)} if run_id is not None else {}
        await self._call("chat.update", target.channel,
                         self._require_client().chat_update(channel=target.channel, ts=message_id, text=text, **blocks))
        self._remember(target.channel, message_id, text)
        self._stops.edited(key, final=final)

    def stop_control_ends_with_edit(self, target: ReplyTarget, message_id: str) -> None:
        """The reply's final edit goes without the Stop button (`text` alone): one chat.update, not two."""
        self._stops.ends_with_edit((target.channel, message_id))  # a button in the reply's blocks, if any

    def _remember(self, channel: str, ts: str, text: str) -> None:
        _keep_recent(self._texts, (channel, ts), text)

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        """A Stop button on the streaming reply (in its blocks), or beside a natively streamed one; gone when final."""
        key = (target.channel, message_id)
        client = self._require_client()
        if present:
            text = self._texts.get(key)
            if key not in self._native and text is None:
                # A post this process did not make (a run continuing the reply a killed process
                # posted): its blocks need its text, which its next edit tells us; the runner asks
                # again then. A control message of its own here would outlive a second kill, since
                # no later process knows of it.
                raise PlatformError("the reply's text is not known yet: its Stop button waits for its next edit")
            # Shown only if the budget has room now: the runner asks again at its next step (a reply's
            # edits are worth more than its button), and keeps it only once it is there.
            with impatient():
                if text is None:  # a native stream, which takes no blocks: the control is a message beside it
                    response = await self._call("chat.postMessage", target.channel, client.chat_postMessage(
                        **_where(target), text="Stop", blocks=control_blocks(run_id)))
                    self._stop_posts[key] = str(response["ts"])
                    return
                await self._call("chat.update", target.channel, client.chat_update(
                    channel=target.channel, ts=message_id, text=text, blocks=reply_blocks(text, run_id)))
            self._stops.shown(key, run_id)
            return
        on_reply = self._stops.take_off(key)
        control = self._stop_posts.pop(key, None)
        if control is not None:
            await self._call("chat.delete", target.channel, client.chat_delete(channel=target.channel, ts=control))
        elif on_reply:
            text = self._texts.get(key)
            if text is not None:  # `text` alone: Slack shows it as the message again, without the blocks
                await self._call("chat.update", target.channel, client.chat_update(
                    channel=target.channel, ts=message_id, text=text))

    async def show_typing(self, target: ReplyTarget) -> None:
        """Assistant thread status ("is thinking…") where Slack allows it; else nothing.

        Slack clears the status itself when the app posts in the thread.
        """
        await self.show_status(target, THINKING_STATUS)

    def native_stream(self, target: ReplyTarget) -> SlackNativeStream | None:
        """Native streaming in an assistant thread (a thread in a DM), while this binding has it."""
        if not (self.native_streaming and target.thread and target.chat_kind is ChatKind.DM):
            return None
        return SlackNativeStream(self._require_client(), self._call, target, self._native_unavailable,
                              started=lambda ts: _keep_recent(self._native, (target.channel, ts), None))

    def _native_unavailable(self) -> None:
        if self.native_streaming:
            self.native_streaming = False
            self._log.info("no native streaming on this workspace or token: replies are posted and edited")

    async def show_status(self, target: ReplyTarget, text: str) -> None:
        """The assistant thread's status line ("using web_fetch…"), where Slack allows one."""
        if not target.thread or target.channel in self._no_status:
            return
        if self._set_status is None:
            raise PlatformError(f"slack binding {self.binding_id} is not started")
        try:
            with impatient():  # cosmetic: never worth waiting for, nor for a budget
                await self._call("assistant.threads.setStatus", target.channel,
                                 self._set_status(channel_id=target.channel, thread_ts=target.thread, status=text))
        except (RateLimited, Unreached):  # counted against the budget all the same; the next status is asked
            pass
        except PlatformError as e:
            self._no_status.add(target.channel)
            self._log.debug("no thread status in %s: %s", target.channel, e)

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        text, blocks = card_message(card)
        response = await self._call("chat.postMessage", target.channel,
                                    self._require_client().chat_postMessage(**_where(target), text=text, blocks=blocks))
        return str(response["ts"])

    async def post_question(self, target: ReplyTarget, card: QuestionCard) -> str:
        text, blocks = question_message(card)
        response = await self._call("chat.postMessage", target.channel,
                                    self._require_client().chat_postMessage(**_where(target), text=text, blocks=blocks))
        return str(response["ts"])

    async def update_question(self, target: ReplyTarget, ref: str, card: QuestionCard) -> None:
        text, blocks = question_message(card)
        await self._call("chat.update", target.channel,
                         self._require_client().chat_update(channel=target.channel, ts=ref, text=text, blocks=blocks))

    async def post_memory_card(self, target: ReplyTarget, card: MemoryCard) -> str | None:
        text, blocks = memory_message(card)
        response = await self._call("chat.postMessage", target.channel,
                                    self._require_client().chat_postMessage(**_where(target), text=text, blocks=blocks))
        return str(response["ts"])

    async def own_posts_after(self, target: ReplyTarget, message_id: str) -> list[tuple[str, str]]:
        """The app's plain posts after `message_id` in the thread or channel (gateway.outbound.orphans)."""
        client = self._require_client()
        if target.thread:
            response = await call("conversations.replies",
                                  client.conversations_replies(channel=target.channel, ts=target.thread, limit=200))
        else:
            response = await call("conversations.history",
                                  client.conversations_history(channel=target.channel, oldest=message_id, limit=200))
        mine = [
            m for m in response.get("messages") or []
            if m.get("bot_id") == self._conn.bot_id and float(m.get("ts") or 0) > float(message_id)
            and is_reply(m.get("blocks")) and not m.get("files")  # a shared file is no part of a reply's text
        ]
        return [(str(m["ts"]), str(m.get("text") or "")) for m in sorted(mine, key=lambda m: float(m["ts"]))]

    async def own_card(self, target: ReplyTarget, card: ApprovalCard) -> str | None:
        """The app's post showing `card` in the thread or channel (gateway.outbound.orphans)."""
        client = self._require_client()
        if target.thread:
            response = await call("conversations.replies",
                                  client.conversations_replies(channel=target.channel, ts=target.thread, limit=200))
        else:
            response = await call("conversations.history", client.conversations_history(channel=target.channel,
                                                                                         limit=200))
        ids = {item.approval_id for item in card.items} | {card.card_id}
        for m in response.get("messages") or []:
            if m.get("bot_id") != self._conn.bot_id:
                continue
            values = {str(e.get("value") or "") for b in m.get("blocks") or [] if b.get("type") == "actions"
                      for e in b.get("elements") or []}
            if any(v.partition(":")[2] in ids for v in values):
                return str(m["ts"])
        return None

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        text, blocks = card_message(card)
        await self._call("chat.update", target.channel,
                         self._require_client().chat_update(channel=target.channel, ts=card_ref, text=text, blocks=blocks))

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        await self._post_ephemeral(target.channel, account_id, text, target.thread)

    async def _post_ephemeral(self, channel: str, user: str, text: str, thread: str | None) -> None:
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread:
            kwargs["thread_ts"] = thread
        await self._call("chat.postEphemeral", channel, self._require_client().chat_postEphemeral(**kwargs))

    def directory(self) -> SlackDirectory:
        return self._directory

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        return await self._directory.is_member(target, account_id)

    # --- helpers --------------------------------------------------------------------------

    async def _call(self, method: str, channel: str, request: Coroutine[Any, Any, T]) -> T:
        """One outbound Web API call, sent when the method's tier and the channel's limit have room."""
        try:
            async with self.pacer.paced(self.budget.scopes(method, channel)):
                return await call(method, request)
        finally:
            request.close()  # a no-op once awaited; never awaited (cancelled, over budget): no warning

    def _require_client(self) -> AsyncWebClient:
        return self._conn.require_client()

    def _require_users(self) -> UserNames:
        return self._conn.require_users()

    def _require_app(self) -> AsyncApp:
        if self._app is None:
            raise PlatformError(f"slack binding {self.binding_id} is not started")
        return self._app


def _keep_recent(recent: collections.OrderedDict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    """`recent[key] = value`, the oldest entries dropped past REMEMBERED_POSTS (a process lives long)."""
    recent[key] = value
    recent.move_to_end(key)
    while len(recent) > REMEMBERED_POSTS:
        recent.popitem(last=False)


def _where(target: ReplyTarget) -> dict[str, str]:
    """channel, and thread_ts when the reply belongs in a thread."""
    return {"channel": target.channel, "thread_ts": target.thread} if target.thread else {"channel": target.channel}



async def _close_socket(socket: SocketModeClient) -> None:
    """slack_sdk's `SocketModeClient.close()`, without its wait of up to 10 s for the peer.

    The SDK's close() closes the websocket while its own receive task is still reading; aiohttp
    then ends that read, sends a close frame and waits for the peer's answer for up to 10 s
    (`ClientWSTimeout.ws_close`). A server slow to answer, or a connection that died without a
    word, held every stop and every reload of the binding that long. Cancelling the SDK's tasks
    first marks the connection as abnormally closed, so aiohttp sends the close frame and drops
    the connection at once; `within` bounds the close anyway, and the SDK's session is closed
    whatever happened.
    """
    socket.closed = True
    socket.auto_reconnect_enabled = False
    tasks = [t for t in (socket.message_receiver, socket.current_session_monitor, socket.message_processor)
             if t is not None]
    await cancel_and_wait(*tasks, level=logging.DEBUG)
    if socket.current_session is not None:
        await within(socket.current_session.close())
    await socket.aiohttp_client_session.close()


def _retry_num(request: AsyncBoltRequest) -> int | None:
    """Which of Slack's retries an HTTP request is (`X-Slack-Retry-Num`); None on its first delivery."""
    values = request.headers.get("x-slack-retry-num") or []
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None


def _bolt_refusal(e: Exception) -> str:
    """Why Bolt could not read a request: it reads ids (user, channel, team) out of the body
    before any signature check or listener, and fails on a field of an unexpected type."""
    return f"{type(e).__name__}: {str(e)[:200]}"
