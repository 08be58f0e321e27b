"""MattermostAdapter: one binding's connection to a Mattermost server.

In: the websocket (`posted`, `post_edited`, `reaction_added`), resumed after a drop from the
server's queue, each post handed to `dispatcher.submit` before its sequence number counts as
processed. Out: REST v4 posts and patches, typing over the websocket, approval cards with
signed buttons (or reactions when the server cannot reach us), a DM for private notes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from adapters.base import BaseAdapter
from adapters.read_position import ReadPosition
from adapters.stop_buttons import StopButtons
from bindings.models import BindingSpec, MattermostSection
from gateway.adapter_registry import AdapterContext
from gateway.inbound.memory_card import MemoryCard, MemoryClick
from gateway.messages import Attachment, ChatKind, InboundMessage, Sender
from gateway.reconnect import Backoff
from gateway.store.availability import StoreUnavailable
from gateway.outbound.adapter import (
    AnswersDirectory,
    ApprovalCard,
    Decision,
    ChannelDirectory,
    FileKind,
    FileLimits,
    OutboundFile,
    SendsFiles,
    ConfirmsMembership,
    CHAT_FIRST_DRAFT_AFTER,
    FetchesAttachments,
    FinalEditTakesStop,
    FindsOwnPosts,
    PlatformError,
    PlatformLimits,
    PostsMemoryCards,
    ReplyTarget,
    ShowsStopControl,
    Trouble,
)

from . import actions, cards, stop
from .budget import ServerLimit
from .commands import COMMAND_PATH, NativeCommands
from .client import Channel, MattermostClient, MattermostSocket, User
from .directory import MattermostDirectory
from .normalize import (
    CHAT_KINDS,
    MalformedEvent,
    NormalizeContext,
    PostedEvent,
    Skip,
    normalize_post,
    parse_edited_post,
    parse_posted,
    parse_reaction,
)

MAX_MESSAGE_CHARS = 16_383
# A catch-up after a lost stream starts this long before the last event handled: clocks differ,
# and a post fetched twice is a duplicate to the inbound ledger, never a second answer.
CATCH_UP_MARGIN_MS = 60_000
# Across a restart the last event handled is kept in the store (at most this often), and posts
# made while the daemon was down are caught up when it starts, as far back as this (Telegram
# keeps a bot's updates for 24 hours; a longer outage is not answered message by message).
SEEN_SAVE_EVERY = 5.0  # seconds at most between writes of the read position (`ReadPosition`)
CATCH_UP_LIMIT_MS = 24 * 3600 * 1000
SEEN_KEY = "seen_at_ms"
SINCE_KEY = "reading_since_ms"  # the binding's first start: nothing older is answered, margin or not
_THREAD_CACHE_SIZE = 10_000


# A server takes files up to its FileSettings.MaxFileSize (100 MB unless its admin changed it: a
# smaller one refuses with 413, which the model is told) and ten files to a post.
MATTERMOST_FILE_LIMITS = FileLimits(max_bytes=dict.fromkeys(FileKind, 100 * 1024 * 1024), max_files=10,
                                    max_caption_chars=MAX_MESSAGE_CHARS)


class MattermostAdapter(BaseAdapter, ShowsStopControl, FinalEditTakesStop, PostsMemoryCards, AnswersDirectory,
                        FetchesAttachments, FindsOwnPosts, SendsFiles, ConfirmsMembership):
    platform = "mattermost"
    file_limits = MATTERMOST_FILE_LIMITS
    limits = PlatformLimits(max_message_chars=MAX_MESSAGE_CHARS, min_edit_interval=1.0, supports_edit=True,
                            first_draft_after=CHAT_FIRST_DRAFT_AFTER)

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        if binding.mattermost is None:
            raise ValueError("a mattermost binding needs a mattermost: section")
        super().__init__(binding, context)
        self._section: MattermostSection = binding.mattermost
        public = context.gateway.http.public_url
        self._action_url = f"{public.rstrip('/')}/mattermost/actions/{binding.id}" if public else None
        self._commands = NativeCommands(
            f"{public.rstrip('/')}{COMMAND_PATH.format(binding_id=binding.id)}" if public else None, self._log,
            self._clock)
        self._client: MattermostClient | None = None
        self._socket: MattermostSocket | None = None
        self._key: bytes | None = None
        self._ctx: NormalizeContext | None = None
        self._bot_teams: list[str] = []
        # Threads the bot has posted in (True) or was found absent from (False), newest last.
        self._threads: OrderedDict[str, bool] = OrderedDict()
        self._channels: dict[str, Channel] = {}
        self._users: dict[str, User] = {}
        self._dm_channels: dict[str, str] = {}
        self._seen_at_ms = 0  # wall clock (ms) of the last websocket event handled
        self._catch_up_from: int | None = None  # set while a lost stream's posts are still to fetch
        self._seen: ReadPosition | None = None  # where the stream was read to, in the store (`_load_seen`)
        self._stops: StopButtons[str] = StopButtons()  # replies showing a Stop action, by post id
        self._reading_since_ms = 0

    # --- lifecycle: the base's start/stop call these ---------------------------------------

    async def _open(self) -> None:
        token = self._secret("token", self._section.token).reveal()
        self._key = actions.action_key(token, self.binding_id)
        self._client = MattermostClient(self._section.url, token, clock=self._clock)
        self._socket = MattermostSocket(self._client)

    async def _verify(self) -> list[Trouble]:
        """GET /users/me with the token: the server takes it, and it is the bot account's."""
        assert self._client is not None
        try:
            me = await self._client.me()
        except PlatformError as e:
            return [Trouble(f"token ({self._section.token.describe()}): {self._section.url} refused it ({e})",
                            "create a new access token for the bot account (Integrations → Bot Accounts) and check url")]
        if not me.get("is_bot"):
            return [Trouble(f"token ({self._section.token.describe()}) is {me.get('username')!r}'s, not a bot account's",
                            "use a bot account's access token (Integrations → Bot Accounts)")]
        return []

    async def _close(self) -> None:
        if self._seen is not None:
            self._keep_seen()
            await self._seen.close()
            self._seen = None
        if self._socket is not None:
            await self._socket.close()
        if self._client is not None:
            await self._client.close()

    async def _connect_once(self) -> None:
        assert self._client is not None and self._socket is not None
        if self._ctx is None:
            await self._identify()
        if self._seen is None:
            await self._load_seen()
        await self._commands.register(self._client, self._bot_teams)  # once per start; a refusal is only logged
        await self._socket.connect()
        assert self._ctx is not None
        self._health.up(f"connected as @{self._ctx.bot_username}")
        try:
            async for frame in self._socket.events():
                await self._handle(frame)
                self._socket.processed(frame)
                if self._socket.new_stream:  # after the new stream's hello: fetch what it lost
                    self._socket.new_stream = False
                    if self._catch_up_from is None:
                        self._catch_up_from = self._seen_at_ms
                if self._catch_up_from is not None:
                    try:
                        await self._catch_up(self._catch_up_from)
                        self._catch_up_from = None
                    except PlatformError as e:
                        self._log.warning("catching up over REST failed (%s); trying again after the next event", e)
                self._seen_at_ms = self._now_ms()
                self._keep_seen()
        finally:
            await self._socket.close()

    async def _load_seen(self) -> None:
        """Where the last process stopped reading: the first stream catches up from there, so a post
        made while the daemon was down (or refused while it stopped) is answered, not lost."""
        dispatcher = self._require_dispatcher()
        position = ReadPosition(dispatcher, self.binding_id, SEEN_KEY, clock=self._clock, every=SEEN_SAVE_EVERY,
                                log=self._log)
        since = await dispatcher.get_state(self.binding_id, SINCE_KEY)
        now = self._now_ms()
        if since is None or not since.isdigit():  # a binding's first start: history is not answered
            await dispatcher.set_state(self.binding_id, SINCE_KEY, str(now))
            since = str(now)
        self._reading_since_ms = int(since)
        stored = await position.load()
        self._seen = position
        if not stored or not stored.isdigit():
            return
        floor = now - CATCH_UP_LIMIT_MS
        if int(stored) < floor:
            self._log.warning("the last post read is older than %d hours: posts before then are not answered",
                              CATCH_UP_LIMIT_MS // 3_600_000)
        self._seen_at_ms = max(int(stored), floor)
        self._catch_up_from = self._seen_at_ms

    def _now_ms(self) -> int:
        return int(self._clock.now().timestamp() * 1000)

    def _keep_seen(self) -> None:
        # While a catch-up is still owed (its REST calls failed), where it must start is what is
        # kept: saving "now" would let the next process skip the posts it has not fetched yet.
        seen = min(self._seen_at_ms, self._catch_up_from) if self._catch_up_from else self._seen_at_ms
        if seen and self._seen is not None:
            self._seen.advance(str(seen))

    async def _catch_up(self, seen_at_ms: int) -> None:
        """Posts made while the websocket was down and the server could not replay them (it
        restarted, or the gap outran its queue), fetched over REST and handled as `posted`
        events, oldest first. Anything already taken is a duplicate to the inbound ledger.
        Channels are listed per team (with their DMs): a bot on no team catches up nothing."""
        assert self._client is not None and self._ctx is not None
        if not seen_at_ms:
            return  # nothing was handled before the break: nothing to catch up from
        since = max(seen_at_ms - CATCH_UP_MARGIN_MS, self._reading_since_ms, 0)
        channels: dict[str, Channel] = {}
        for team_id in self._bot_teams:
            for channel in await self._client.my_channels(self._ctx.bot_user_id, team_id):
                if int(channel.get("last_post_at") or 0) >= since and channel.get("id"):
                    channels[str(channel["id"])] = channel
        missed: list[tuple[int, dict[str, Any]]] = []
        for channel_id, channel in channels.items():
            self._channels.setdefault(channel_id, channel)
            listing = await self._client.posts_since(channel_id, since)
            for post in (listing.get("posts") or {}).values():
                if int(post.get("create_at") or 0) < since or post.get("delete_at"):
                    continue
                sender = await self._user(str(post.get("user_id", "")))
                missed.append((int(post.get("create_at") or 0),
                               self._as_posted(dict(post), channel, sender.get("username", ""))))
        missed.sort(key=lambda m: m[0])
        self._log.info("caught up on %d post(s) in %d channel(s) since the stream broke", len(missed), len(channels))
        for _, frame in missed:
            await self._handle(frame)

    def _as_posted(self, post: dict[str, Any], channel: Channel, sender_name: str) -> dict[str, Any]:
        """A `posted` frame for a post read over REST: the server's `mentions` computed as it
        does for the bot (every DM and group message; elsewhere an @-mention of its name)."""
        assert self._ctx is not None
        kind = str(channel.get("type", ""))
        name = re.escape(self._ctx.bot_username)
        mentioned = kind in ("D", "G") or bool(
            name and re.search(rf"(?<![\w@])@{name}(?![\w-])", str(post.get("message", "")), re.IGNORECASE))
        data: dict[str, Any] = {"post": json.dumps(post), "channel_type": kind, "team_id": channel.get("team_id", ""),
                                "sender_name": "@" + sender_name}
        if mentioned and post.get("user_id") != self._ctx.bot_user_id:
            data["mentions"] = json.dumps([self._ctx.bot_user_id])
        return {"event": "posted", "data": data}

    async def _identify(self) -> None:
        """Who the bot is, and which teams it serves (names in the binding resolved to ids)."""
        assert self._client is not None
        me = await self._client.me()
        teams = await self._client.my_teams()
        self._bot_teams = [t.get("id", "") for t in teams]
        allowed: frozenset[str] | None = None
        if self._section.teams:
            wanted = set(self._section.teams)
            allowed = frozenset(t.get("id", "") for t in teams if t.get("id") in wanted or t.get("name") in wanted)
            known = {t.get("id") for t in teams} | {t.get("name") for t in teams}
            for name in sorted(wanted - known):
                self._log.warning("team %r in the binding is not one of the bot's teams", name)
            self._bot_teams = [t for t in self._bot_teams if t in allowed]
        self._ctx = NormalizeContext(
            binding_id=self.binding_id,
            bot_user_id=me.get("id", ""),
            bot_username=me.get("username", ""),
            workspace=server_name(self._section.url),
            team_ids=allowed,
            ignore_bots=self.binding.admission.ignore_bots,
            base_url=self._client.base_url,
        )

    # --- events in -------------------------------------------------------------------------

    async def _handle(self, frame: dict[str, Any]) -> None:
        """One websocket event. A bad event is logged and dropped; a failing `submit` raises,
        which drops the connection so the server replays the event on resume; a busy database
        is waited for here."""
        event = frame.get("event")
        try:
            if event == "posted":
                msg = await self._from_posted(frame)
            elif event == "post_edited":
                msg = await self._from_edited(frame)
            elif event == "reaction_added":
                await self._on_reaction(frame)
                return
            else:
                return
        except MalformedEvent as e:
            self._log.warning("dropped a malformed %s event: %s", event, e)
            return
        except PlatformError as e:
            self._log.warning("dropped a %s event: a lookup failed: %s", event, e)
            return
        except Exception:
            self._log.exception("dropped a %s event that could not be read", event)
            return
        if isinstance(msg, Skip):
            self._log.debug("skipped %s: %s", event, msg.reason)
            return
        assert self._dispatcher is not None
        backoff = Backoff(base=0.2, cap=2.0)
        while True:
            try:
                result = await self._dispatcher.submit(msg)
                break
            except StoreUnavailable as e:
                # The websocket has no ack: retry here, with the frame not yet counted as
                # processed (if the connection drops meanwhile, the server replays it).
                self._log.warning("post %s waits: %s (%s)", msg.message_id, e.what, e)
                await self._clock.sleep(backoff.next_delay())
        if result.duplicate:
            self._log.debug("post %s already recorded", msg.message_id)

    async def _from_posted(self, frame: dict[str, Any]) -> InboundMessage | Skip:
        assert self._ctx is not None
        event = parse_posted(frame)
        if event.post.get("user_id") == self._ctx.bot_user_id:
            # The bot's own post, from this replica or another: its thread is one the bot is in.
            self._remember_thread(str(event.post.get("root_id") or event.post.get("id") or ""), True)
        return await self._thread_facts(normalize_post(event, self._ctx))

    async def _from_edited(self, frame: dict[str, Any]) -> InboundMessage | Skip:
        assert self._ctx is not None
        if self.binding.admission.ignore_edits:
            return Skip("edits ignored by this binding")
        post = parse_edited_post(frame)
        if post.get("user_id") == self._ctx.bot_user_id:
            return Skip("own post")
        channel = await self._channel(str(post.get("channel_id", "")))
        user = await self._user(str(post.get("user_id", "")))
        event = PostedEvent(post=post, channel_type=channel.get("type", ""), team_id=channel.get("team_id", ""),
                            sender_name=user.get("username", ""))
        if event.channel_type not in ("D", "G", "O", "P"):
            raise MalformedEvent(f"channel {channel.get('id')} has type {event.channel_type!r}")
        return await self._thread_facts(normalize_post(event, self._ctx, is_edit=True))

    async def _thread_facts(self, msg: InboundMessage | Skip) -> InboundMessage | Skip:
        """`reply_to_bot` for a thread reply that does not mention the bot: is the bot in it?"""
        if isinstance(msg, Skip) or msg.thread is None or msg.mentioned or msg.chat_kind is ChatKind.DM:
            return msg
        if await self._bot_in_thread(msg.thread):
            return dataclasses.replace(msg, reply_to_bot=True)
        return msg

    async def _bot_in_thread(self, root_id: str) -> bool:
        known = self._threads.get(root_id)
        if known is not None:
            self._threads.move_to_end(root_id)
            return known
        # Not seen since start: ask the server once. Later own posts flip the answer to True.
        assert self._client is not None and self._ctx is not None
        try:
            listing = await self._client.thread(root_id)
        except PlatformError as e:
            self._log.info("thread %s: cannot tell whether the bot is in it: %s", root_id, e)
            return False
        present = any(p.get("user_id") == self._ctx.bot_user_id for p in (listing.get("posts") or {}).values())
        self._remember_thread(root_id, present)
        return present

    def _remember_thread(self, root_id: str, present: bool) -> None:
        if not root_id:
            return
        self._threads[root_id] = present or self._threads.get(root_id, False)
        self._threads.move_to_end(root_id)
        while len(self._threads) > _THREAD_CACHE_SIZE:
            self._threads.popitem(last=False)

    async def _on_reaction(self, frame: dict[str, Any]) -> None:
        """👍 / 👎 on a card posted without buttons decides every call on it."""
        assert self._ctx is not None and self._dispatcher is not None
        reaction = parse_reaction(frame)
        if reaction["user_id"] == self._ctx.bot_user_id:
            return
        decision = cards.reaction_decision(reaction["emoji_name"])
        if decision is None:
            return
        stored = await self._dispatcher.get_state(self.binding_id, _card_key(reaction["post_id"]))
        if stored is None:
            return  # not a card of ours (or one with buttons)
        try:
            approval_ids = [str(a) for a in json.loads(stored)["approvals"]]
        except (ValueError, KeyError, TypeError):
            self._log.warning("card state for post %s is unreadable", reaction["post_id"])
            return
        user = await self._user(reaction["user_id"])
        decider = Sender(account_id=reaction["user_id"], display_name=user.get("username", ""))
        for approval_id in approval_ids:
            outcome = await self._dispatcher.decide(
                approval_id, decision, decider, binding_id=self.binding_id, surface=self.platform
            )
            if not outcome.accepted:
                # Reactions are public and cheap: no private answer, or every replica would send one.
                self._log.info("reaction by %s on post %s not taken: %s", reaction["user_id"], reaction["post_id"],
                               outcome.message)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes | None:
        """`GET /api/v4/files/{id}` with the bot token."""
        if not attachment.ref or self._client is None:
            return None
        return await self._client.file(attachment.ref, max_bytes, attachment.name)

    # --- action callbacks ------------------------------------------------------------------

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        return [web.post(f"/mattermost/actions/{self.binding_id}", self._on_action),
                web.post(COMMAND_PATH.format(binding_id=self.binding_id), self._on_command)]

    async def _on_command(self, request: web.Request) -> web.Response:
        """A slash command, posted by the Mattermost server with the token it issued for it, or 401
        and nothing runs. The core answers as for `!`: a private answer comes back ephemerally
        (`tell_privately` through the command's response_url), a public one is posted."""
        try:
            form = await request.post()
            header = request.headers.get("Authorization", "")
            token = str(form.get("token") or (header[6:] if header.startswith("Token ") else ""))
            command, user_id, channel_id = str(form["command"]), str(form["user_id"]), str(form["channel_id"])
        except (ValueError, KeyError) as e:
            self._log.warning("dropping a malformed slash command request: %s", type(e).__name__)
            return web.json_response({"error": "malformed command request"}, status=400)
        registered = self._commands.verify(token, command) if token else None
        if registered is None:
            self._log.warning("slash command request with a token that is not ours refused (%s)", command[:40])
            return web.json_response({"error": "bad token"}, status=401)
        if self._dispatcher is None or self._client is None:
            return web.json_response({"error": "not started"}, status=503)
        trigger_id = str(form.get("trigger_id") or f"{channel_id}.{user_id}.{time.time_ns()}")
        try:
            kind = CHAT_KINDS.get((await self._channel(channel_id)).get("type", ""), ChatKind.CHANNEL)
        except PlatformError as e:
            self._log.warning("slash command in channel %s: cannot tell its kind (%s)", channel_id, e)
            return web.json_response({"text": "Sorry, that command could not be run here just now."})
        self._commands.owe_answer(channel_id, user_id, str(form.get("response_url") or ""), self._client.base_url)
        root_id = str(form.get("root_id") or "")
        if not root_id and kind is not ChatKind.DM:
            self._commands.anchor(trigger_id)  # no post to thread under: a public answer goes to the channel
        message = InboundMessage(
            platform=self.platform, binding_id=self.binding_id, workspace=server_name(self._section.url),
            channel=channel_id, chat_kind=kind, sender=Sender(user_id, str(form.get("user_name") or "")),
            text=f"{command} {form.get('text') or ''}".strip(), event_id=f"command:{trigger_id}",
            message_id=trigger_id, thread=root_id or None,
            mentioned=True,  # addressed to the bot by its command
        )
        await self._dispatcher.submit(message)
        return web.json_response({})  # the answer comes from the core, on the response_url or as a post

    async def _on_action(self, request: web.Request) -> web.Response:
        """A button click, posted by the Mattermost server: an approval, a Stop or a `/memory` card's.

        Every kind passes the same two checks before anything runs: a context we signed for this
        channel (else 401), and the server vouching for the clicker (`_vouched`, else the clicker
        alone is told why). Only then is the click the core's, as the user the server names.
        """
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("not an object")
            user_id, channel_id = str(body["user_id"]), str(body.get("channel_id", ""))
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "malformed action request"}, status=400)
        signed = None
        if self._key is not None:
            signed = actions.verify(self._key, body.get("context"), binding_id=self.binding_id, channel_id=channel_id)
        if signed is None:
            self._log.warning("action callback with a bad signature refused (post %s)", body.get("post_id", "?"))
            return web.json_response({"error": "bad signature"}, status=401)
        if self._dispatcher is None:
            return web.json_response({"error": "not started"}, status=503)
        post_id = str(body.get("post_id", ""))
        # Always 200 from here: anything else fails the click in the clicker's client.
        refusal = await self._vouched(post_id, channel_id, user_id, signed.nonce)
        if refusal is not None:
            return web.json_response({"ephemeral_text": refusal})
        user = await self._user(user_id)  # the name the server gives, not the one the body claims
        clicker = Sender(account_id=user_id, display_name=user.get("username", "") or user_id)
        if signed.kind == "stop":
            return await self._on_stop(signed.values[0], clicker, post_id, channel_id)
        if signed.kind == "memory":
            return await self._on_memory(signed.values[0], clicker, post_id, channel_id)
        return await self._on_decision(signed.values[0], Decision(signed.values[1]), clicker, post_id, channel_id)

    async def _on_decision(self, approval_id: str, decision: Decision, decider: Sender, post_id: str,
                           channel_id: str) -> web.Response:
        assert self._dispatcher is not None
        try:
            outcome = await self._dispatcher.decide(
                approval_id, decision, decider, binding_id=self.binding_id, surface=self.platform
            )
        except Exception:
            self._log.exception("recording a decision failed")
            return web.json_response({"ephemeral_text": "The decision could not be recorded; please try again."})
        if not outcome.accepted:
            # The clicked nonce is theirs now: the card gets fresh buttons for everyone else.
            await self._reissue_buttons(post_id, channel_id)
            return web.json_response({"ephemeral_text": outcome.message})
        return web.json_response({})  # the core's update_card edits the card itself

    async def _vouched(self, post_id: str, channel_id: str, user_id: str, nonce: str) -> str | None:
        """None when the server vouches for this click; else what the sender is told (and nothing runs).

        A signed context proves we rendered the button, not who pressed it: the body's user id is the
        sender's word. So: the nonce must be one the post shows now; the first user who presented it
        owns it (a replay under another user's id is refused); the post must be ours, in this channel;
        and the server must say the user is a member of that channel.
        """
        assert self._dispatcher is not None and self._ctx is not None
        raw = await self._dispatcher.get_state(self.binding_id, _actions_key(post_id))
        shown = json.loads(raw) if raw else None
        owners: dict[str, str] = shown["nonces"] if isinstance(shown, dict) else {}
        if nonce not in owners:
            self._log.warning("action callback on post %s refused: a context the post no longer shows", post_id)
            return "This message has changed since it was shown to you; press the button again."
        if owners[nonce] and owners[nonce] != user_id:
            self._log.warning("action callback on post %s refused: a context first presented by %s, replayed as %s",
                              post_id, owners[nonce], user_id)
            return "This button was already pressed by someone else; press the button again."
        try:
            post = await self._api().post(post_id)
            member = await self._api().is_channel_member(channel_id, user_id)
        except PlatformError as e:
            self._log.warning("action callback on post %s refused: the server could not vouch for it: %s", post_id, e)
            return "The click could not be checked with the server; please try again."
        if post.get("channel_id") != channel_id or post.get("user_id") != self._ctx.bot_user_id or not member:
            self._log.warning("action callback on post %s refused: not this channel's post, or %s is not a member",
                              post_id, user_id)
            return "Only members of this channel can use its buttons."
        owners[nonce] = user_id
        await self._dispatcher.set_state(self.binding_id, _actions_key(post_id), json.dumps(shown))
        return None

    async def _remember_buttons(self, post_id: str, props: dict[str, Any]) -> None:
        """The buttons a post shows now, their nonces not yet presented by anyone (older ones stop working)."""
        if self._dispatcher is not None and self._action_url is not None:
            state = {"props": props, "nonces": {n: "" for n in actions.nonces(props)}}
            await self._dispatcher.set_state(self.binding_id, _actions_key(post_id), json.dumps(state))

    async def _reissue_buttons(self, post_id: str, channel_id: str) -> None:
        assert self._dispatcher is not None and self._key is not None
        raw = await self._dispatcher.get_state(self.binding_id, _actions_key(post_id))
        if not raw:
            return
        props = actions.reissue(json.loads(raw)["props"], key=self._key, binding_id=self.binding_id,
                                channel_id=channel_id)
        try:
            await self._api().patch_post(post_id, props=props)
        except PlatformError as e:
            self._log.warning("could not give post %s fresh buttons: %s", post_id, e)
            return
        await self._remember_buttons(post_id, props)

    async def _on_stop(self, run_id: str, who: Sender, post_id: str, channel_id: str) -> web.Response:
        """A Stop click: the core asks who may stop; a refusal is told to the clicker alone, and the
        reply, while it still shows Stop, gets a fresh one (the clicked nonce is the clicker's now)."""
        assert self._dispatcher is not None
        outcome = await self._dispatcher.stop_run(run_id, who, binding_id=self.binding_id)
        if outcome.stopped:
            return web.json_response({})
        if post_id in self._stops:  # not once the final edit took it away: that would put Stop back
            await self._reissue_buttons(post_id, channel_id)
        return web.json_response({"ephemeral_text": outcome.message})

    async def _on_memory(self, data: str, who: Sender, post_id: str, channel_id: str) -> web.Response:
        """A `/memory` card's button. The core acts on the store of the channel clicked in (and the
        clicker); the answer updates the post in place, with fresh buttons."""
        assert self._dispatcher is not None
        kind = CHAT_KINDS.get((await self._channel(channel_id)).get("type", ""), ChatKind.CHANNEL)
        outcome = await self._dispatcher.memory_click(MemoryClick(
            self.binding_id, server_name(self._section.url), channel_id, kind, who, data))
        answer: dict[str, Any] = {"ephemeral_text": outcome.message} if outcome.message else {}
        if outcome.card is not None:
            props = self._memory_props(channel_id, outcome.card)
            await self._remember_buttons(post_id, props)  # before the server shows them
            answer["update"] = {"message": cards.memory_message(outcome.card), "props": props}
        else:
            await self._reissue_buttons(post_id, channel_id)
        return web.json_response(answer)

    def _memory_props(self, channel_id: str, card: MemoryCard) -> dict[str, Any]:
        assert self._action_url is not None and self._key is not None
        return cards.memory_props(card, url=self._action_url, key=self._key, binding_id=self.binding_id,
                                  channel_id=channel_id)

    async def post_memory_card(self, target: ReplyTarget, card: MemoryCard) -> str | None:
        """Buttons only where the server can reach us (`http.public_url`); else the text answer."""
        if self._action_url is None or self._key is None:
            return None
        props = self._memory_props(target.channel, card)
        post = await self._api().create_post(target.channel, cards.memory_message(card), root_id=self._commands.root_id(target.thread),
                                             props=props, pending_post_id=self._pending_id())
        await self._remember_buttons(post.get("id", ""), props)
        return post.get("id", "")

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        """A Stop action on the streaming reply (its props; the text is patched on its own), gone when final."""
        if self._action_url is None or self._key is None:
            return  # no action URL: nowhere for a click to arrive (`/stop` still works)
        if not present and not self._stops.take_off(message_id):
            return  # none of ours on it (the final edit took it away)
        props = stop.stop_props(url=self._action_url, key=self._key, binding_id=self.binding_id,
                                channel_id=target.channel, run_id=run_id) if present else {}
        await self._api().patch_post(message_id, props=props)
        if present:
            self._stops.shown(message_id, run_id)
            await self._remember_buttons(message_id, props)

    def stop_control_ends_with_edit(self, target: ReplyTarget, message_id: str) -> None:
        """The reply's final patch carries empty props, which takes the Stop action away: one call, not two."""
        self._stops.ends_with_edit(message_id)

    # --- replies out -----------------------------------------------------------------------

    def render(self, markdown: str) -> str:
        return markdown  # Mattermost renders Markdown (CommonMark + tables) as is

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        post = await self._api().create_post(
            target.channel, text, root_id=self._commands.root_id(target.thread), pending_post_id=self._pending_id()
        )
        self._remember_thread(target.thread or post.get("id", ""), True)
        return post.get("id", "")

    async def upload(self, target: ReplyTarget, file: OutboundFile) -> str:
        """`POST /api/v4/files` into the target's channel: the file id a post then names."""
        return await self._api().upload_file(target.channel, file.name, file.data, file.media_type)

    async def share(self, target: ReplyTarget, files: Sequence[tuple[OutboundFile, str]], caption: str) -> str:
        """A post with `file_ids` (in the thread). Its pending_post_id comes from the files, so a share
        whose answer was lost and is sent again is answered with the post the server already made."""
        ids = [ref for _, ref in files]
        pending = "files-" + hashlib.sha256(",".join(ids).encode()).hexdigest()[:20]
        post = await self._api().create_post(target.channel, caption, root_id=target.thread or "",
                                             pending_post_id=pending, file_ids=ids)
        return post.get("id", "")

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        _, final = self._stops.for_edit(message_id)  # the action rides in props, which a text patch leaves
        if final:
            await self._api().patch_post(message_id, message=text, props={})
        else:
            await self._api().patch_post(message_id, message=text)
        self._stops.edited(message_id, final=final)

    async def show_typing(self, target: ReplyTarget) -> None:
        """The websocket's `user_typing` action; REST when the socket is down. Cosmetic: never raises."""
        data = {"channel_id": target.channel, "parent_id": target.thread or ""}
        try:
            if self._socket is not None and await self._socket.send_action("user_typing", data):
                return
            if self._ctx is not None:
                await self._api().typing(self._ctx.bot_user_id, target.channel, target.thread or "")
        except PlatformError as e:
            self._log.debug("typing indicator not shown: %s", e)

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        by_reaction = self._action_url is None
        props = self._card_props(target, card)
        post = await self._api().create_post(
            target.channel,
            cards.card_message(card, by_reaction=by_reaction),
            root_id=self._commands.root_id(target.thread),
            props=props,
            pending_post_id=self._pending_id(),
        )
        post_id = post.get("id", "")
        await self._remember_buttons(post_id, props)
        if by_reaction and self._dispatcher is not None:
            # Reactions name only the post: remember which calls it stands for, in the store,
            # so another replica or a restarted process can decide them too.
            state = json.dumps({"approvals": [i.approval_id for i in card.items], "channel_id": target.channel})
            await self._dispatcher.set_state(self.binding_id, _card_key(post_id), state)
        return post_id

    async def own_posts_after(self, target: ReplyTarget, message_id: str) -> list[tuple[str, str]]:
        """The bot's plain posts (not cards) after `message_id` in the thread or channel, oldest
        first (gateway.outbound.orphans): a killed process may have made one it never recorded."""
        api = self._api()
        assert self._ctx is not None
        if target.thread:
            listing = await api.thread(target.thread)
        else:
            listing = await api.channel_posts(target.channel, per_page=200)
        posts = listing.get("posts") or {}
        anchor = posts.get(message_id) or await api.post(message_id)
        since = int(anchor.get("create_at") or 0)
        mine = [p for p in posts.values()
                if p.get("user_id") == self._ctx.bot_user_id and int(p.get("create_at") or 0) > since
                and not cards.is_card(p) and not p.get("file_ids")]  # a post of shared files is no reply text
        mine.sort(key=lambda p: int(p.get("create_at") or 0))
        return [(str(p.get("id", "")), str(p.get("message", ""))) for p in mine]

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        props = self._card_props(target, card)  # fresh nonces: every render issues new contexts
        await self._api().patch_post(
            card_ref,
            message=cards.card_message(card, by_reaction=self._action_url is None),
            props=props,
        )
        await self._remember_buttons(card_ref, props)

    def _card_props(self, target: ReplyTarget, card: ApprovalCard) -> dict[str, Any]:
        return cards.card_props(card, url=self._action_url, key=self._key, binding_id=self.binding_id,
                                channel_id=target.channel)

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        """The answer to a slash command just sent: an ephemeral on its response_url. Otherwise a DM
        from the bot: ephemeral posts need a system-admin bot, a DM needs nothing."""
        answer_url = self._commands.answer_url(target.channel, account_id)
        if answer_url is not None:
            await self._api().command_response(answer_url, {"response_type": "ephemeral", "text": text})
            return
        channel_id = self._dm_channels.get(account_id)
        if channel_id is None:
            assert self._ctx is not None
            channel = await self._api().direct_channel(self._ctx.bot_user_id, account_id)
            channel_id = self._dm_channels[account_id] = channel.get("id", "")
        await self._api().create_post(channel_id, text, pending_post_id=self._pending_id())

    def directory(self) -> MattermostDirectory:
        return MattermostDirectory(self._api, team_ids=lambda: self._bot_teams, channel=self._channel)

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        return await self.directory().is_member(target, account_id)

    @property
    def server_limit(self) -> ServerLimit | None:
        """The server's rate limit every REST call waits for (None until started): how long calls
        waited, and how many are on their way (a test's clock does not jump under them)."""
        return self._client.server_limit if self._client is not None else None

    # --- helpers ---------------------------------------------------------------------------

    def _api(self) -> MattermostClient:
        if self._client is None:
            raise PlatformError(f"mattermost binding {self.binding_id} is not started")
        return self._client

    def _pending_id(self) -> str:
        bot = self._ctx.bot_user_id if self._ctx else ""
        return f"{bot}:{time.time_ns() // 1000}"

    async def _channel(self, channel_id: str) -> Channel:
        if channel_id not in self._channels:
            self._channels[channel_id] = await self._api().channel(channel_id)
        return self._channels[channel_id]

    async def _user(self, user_id: str) -> User:
        if user_id not in self._users:
            try:
                self._users[user_id] = await self._api().user(user_id)
            except PlatformError:
                return User(id=user_id, username="")
        return self._users[user_id]


def server_name(url: str) -> str:
    """The workspace of every message: the server's host name (ids are unique per server)."""
    return urllib.parse.urlsplit(url).netloc.lower() or url


def _card_key(post_id: str) -> str:
    return f"card:{post_id}"


def _actions_key(post_id: str) -> str:
    """Adapter state: a card's buttons as shown now, and which user first presented each nonce."""
    return f"card-actions:{post_id}"
