"""A fake Slack on loopback: the Web API, a Socket Mode websocket, and signed HTTP-mode requests.

The real slack_sdk / slack-bolt talk to it over HTTP and a websocket, so a test sees what a
person in Slack would see: messages posted into a channel, their edit history, ephemeral
notes, and the acks the app sent for each envelope. Payload shapes follow Slack's published
events and interactivity payloads (bolt-python's scenario tests, python-slack-sdk's Socket
Mode tests).

Everything is recorded (`calls`, `acks`), nothing is asserted here: tests assert.

Slack's rate limits are enforced: each method's tier (calls a minute for the workspace), and
the special limits counted per channel: `chat.postMessage` one a second, and
`assistant.threads.setStatus` 60 a minute. A call over either gets HTTP 429 with `Retry-After`, as Slack answers it
(`budget_scale` shortens every period; `throttled` lists the calls refused). A call counts
when it succeeds, at its arrival on `clock`: a test that runs the gateway on a `ManualClock` gives the
fake the same one, so a call over a limit is refused in that clock's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote

from aiohttp import WSMsgType, web

from gateway.clock import Clock
from tests.fakes.inflight import InFlight
from tests.support.patience import PATIENCE

# (limit, seconds) per method for the workspace, by Slack's tiers (2: 20/min, 3: 50/min, 4: 100/min).
TIERS = {
    "chat.update": (50, 60.0),
    "chat.delete": (50, 60.0),
    "chat.postEphemeral": (100, 60.0),
    "chat.startStream": (20, 60.0),
    "chat.appendStream": (100, 60.0),
    "chat.stopStream": (20, 60.0),
    "conversations.list": (20, 60.0),
    "conversations.info": (50, 60.0),
    "conversations.history": (50, 60.0),
    "conversations.replies": (50, 60.0),
    "conversations.members": (100, 60.0),
    "users.info": (100, 60.0),
    "files.getUploadURLExternal": (100, 60.0),
    "files.completeUploadExternal": (100, 60.0),
}
MAX_FILE_BYTES = 1 << 30  # what files.getUploadURLExternal takes as `length`
PER_CHANNEL = {  # (limit, seconds) per channel: Slack's special limits
    "chat.postMessage": (1, 1.0),  # one a second in a channel (short bursts aside)
    "assistant.threads.setStatus": (60, 60.0),  # as Slack's SDKs count it: 60 a minute per DM
}
BOT_TOKEN = "xoxb-fake-bot-token"
DROPPED = 0  # `fail_next(status=DROPPED)`: no answer, the connection closed
MANIFEST_SCOPES = ("app_mentions:read", "chat:write", "chat:write.customize", "channels:history", "groups:history",
                   "im:history", "mpim:history", "channels:read", "groups:read", "im:read", "mpim:read", "users:read",
                   "commands", "files:read", "files:write")
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"


@dataclass
class ApiCall:
    """One Web API request as the fake received it."""

    method: str
    args: dict[str, Any]
    token: str | None
    status: int = 200
    at: float = field(default_factory=time.monotonic)  # when it arrived, on the fake's clock (the bench reads it)
    headers: dict[str, str] = field(default_factory=dict)  # as sent, the Authorization header left out
    body: bytes = b""  # as sent


@dataclass
class PostedMessage:
    """A message in a channel; `edits` holds every text chat.update set, in order."""

    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    bot_id: str | None = None
    blocks: list[dict[str, Any]] | None = None
    edits: list[str] = field(default_factory=list)
    streaming: bool = False  # started with chat.startStream and not yet stopped
    appends: list[str] = field(default_factory=list)  # the markdown each chat.appendStream added
    block_edits: list[list[dict[str, Any]] | None] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    username: str | None = None  # chat.postMessage's username (chat:write.customize): the name Slack shows


@dataclass
class SharedFile:
    """One file as files.completeUploadExternal shared it: where, under which title, its bytes."""

    file_id: str
    title: str
    data: bytes
    channel: str
    thread_ts: str | None
    message_ts: str


@dataclass
class Ephemeral:
    channel: str
    user: str
    text: str
    thread_ts: str | None


@dataclass
class Channel:
    id: str
    name: str
    kind: str = "channel"  # channel | group | im | mpim (as `channel_type` names it)
    purpose: str = ""
    topic: str = ""
    members: list[str] = field(default_factory=list)
    is_archived: bool = False

    def as_api(self) -> dict[str, Any]:
        is_im = self.kind == "im"
        return {
            "id": self.id,
            "name": "" if is_im else self.name,
            "is_channel": self.kind == "channel",
            "is_group": self.kind == "group",
            "is_im": is_im,
            "is_mpim": self.kind == "mpim",
            "is_private": self.kind != "channel",
            "is_archived": self.is_archived,
            "is_member": True,
            "created": 1_600_000_000,
            "creator": "U0ADMIN",
            "topic": {"value": self.topic, "creator": "U0ADMIN", "last_set": 0},
            "purpose": {"value": self.purpose, "creator": "U0ADMIN", "last_set": 0},
            "num_members": len(self.members),
            **({"user": self.members[0] if self.members else ""} if is_im else {}),
        }


@dataclass
class User:
    id: str
    name: str
    real_name: str = ""
    display_name: str = ""
    is_bot: bool = False

    def as_api(self, team_id: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "team_id": team_id,
            "name": self.name,
            "deleted": False,
            "real_name": self.real_name or self.name,
            "is_bot": self.is_bot,
            "is_app_user": False,
            "profile": {
                "real_name": self.real_name or self.name,
                "display_name": self.display_name,
                "team": team_id,
            },
        }


@dataclass
class Failure:
    status: int
    error: str
    retry_after: float | None = None


class FakeSlack:
    """One workspace with one installed app. Use as `async with FakeSlack() as slack:`."""

    def __init__(
        self,
        *,
        team_id: str = "T0TEAM",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        app_id: str = "A0APP",
        echo_bot_posts: bool = True,
        budget_scale: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock or Clock()  # when calls arrive (`ApiCall.at`) and what the limits count in
        self.tiers = {m: (limit, per * budget_scale) for m, (limit, per) in TIERS.items()}
        self.per_channel = {m: (limit, per * budget_scale) for m, (limit, per) in PER_CHANNEL.items()}
        self.throttled: list[ApiCall] = []  # calls refused with 429 for going over a rate limit
        self._counted: dict[tuple[str, str], list[float]] = {}
        self.team_id, self.bot_user_id, self.bot_id, self.app_id = team_id, bot_user_id, bot_id, app_id
        # Real Slack echoes the app's own posts back as `message` events with `bot_id`.
        self.echo_bot_posts = echo_bot_posts
        self.calls: list[ApiCall] = []
        self.acks: list[dict[str, Any]] = []
        self.sent_envelopes: list[dict[str, Any]] = []
        self.messages: list[PostedMessage] = []
        self.deleted: list[PostedMessage] = []  # removed by chat.delete
        self.ephemerals: list[Ephemeral] = []
        # views.open: the modals opened, with the click they answered; a trigger id is good once.
        self.views: list[dict[str, Any]] = []
        self._triggers: dict[str, str] = {}  # trigger id -> the user whose click issued it
        self.channels: dict[str, Channel] = {}
        self.users: dict[str, User] = {bot_user_id: User(bot_user_id, "agent", "Agent", "agent", is_bot=True)}
        self.connections_opened = 0
        # The bot token's scopes, as Slack names them in every Web API answer's x-oauth-scopes header:
        # by default what docs/slack.md's manifest asks for.
        self.scopes: list[str] = list(MANIFEST_SCOPES)
        self.status_allowed = True  # assistant.threads.setStatus answers ok, or an error
        self.native_streaming = True  # chat.startStream & co. exist (False: unknown_method, an older workspace)
        # False: the server never answers the client's close frame (a slow edge, a connection that
        # died without a word); the client must drop the connection itself.
        self.answer_close = True
        # True: as real Slack, an events envelope not acked on the connection it went out on is
        # sent again (`retry_attempt` + 1, a new envelope id) on the next connection opened, and
        # one sent while no connection is open waits for the next.
        self.redeliver = False
        # With `redeliver`: also, as real Slack retries an event nobody acked (after 1 and 5
        # minutes there), send it again on the live connection after this many seconds, up to 3
        # times. None: only on the next connection.
        self.redeliver_after: float | None = None
        # A 429 storm: this share of calls to `storm_methods` answered 429 with `Retry-After`.
        self.storm_share = 0.0
        self.storm_methods: set[str] = {"chat.postMessage", "chat.update"}
        self.storm_retry_after = 1.0
        self.storm_429s = 0
        self._storm = random.Random(429)
        self.post_answer_delay = 0.0  # seconds chat.postMessage holds its answer after posting
        self.redelivered = 0
        self._unacked: dict[str, dict[str, Any]] = {}
        self._retries: set[asyncio.Task[None]] = set()  # redeliver_after's timers
        self._released = asyncio.Event()  # set on exit: silent sockets may end now
        self._failures: dict[str, list[Failure]] = {}
        self._echoes: set[asyncio.Task[str]] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._ts = itertools.count(1)
        self.files: dict[str, bytes] = {}  # file id → contents, served at url_private with the bot token
        # The external upload: file id → (filename, declared length, bytes POSTed to its upload URL or None).
        self.pending_uploads: dict[str, tuple[str, int, bytes | None]] = {}
        self.shared_files: list[SharedFile] = []  # files completeUploadExternal put into a channel
        self.max_file_bytes = MAX_FILE_BYTES
        self.complete_hold: asyncio.Event | None = None  # set up: completeUploadExternal shares, then waits for it
        self.file_fetches: list[str | None] = []  # the Authorization header of each file download
        self.file_hold: asyncio.Event | None = None  # set up: a file's download is answered once it is set
        self._event_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Condition()
        self.in_flight = InFlight()
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------------

    def busy(self) -> list[str]:
        """What the fake is still doing (`tests.support.settled`): calls it is answering, events
        the daemon has not acked yet (with `redeliver`, each comes again), retries waiting."""
        found = [f"slack: {self.in_flight.calls} calls in flight"] if self.in_flight.calls else []
        if self._unacked:
            found.append(f"slack: {len(self._unacked)} events not acked")
        if any(not r.done() for r in self._retries):
            found.append("slack: a redelivery is waiting")
        return found

    async def __aenter__(self) -> FakeSlack:
        app = web.Application(middlewares=[self.in_flight.middleware])
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/files-pri/{team_file}/{name}", self._file)
        app.router.add_post("/upload/{file_id}", self._upload)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._released.set()
        for retry in list(self._retries):
            retry.cancel()
        for echo in list(self._echoes):
            echo.cancel()
        await asyncio.gather(*self._echoes, return_exceptions=True)
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # --- workspace set-up -----------------------------------------------------------------

    def add_user(self, user_id: str, name: str, *, real_name: str = "", display_name: str = "", is_bot: bool = False) -> User:
        user = User(user_id, name, real_name, display_name, is_bot)
        self.users[user_id] = user
        return user

    def add_channel(self, channel_id: str, name: str, *, kind: str = "channel", purpose: str = "", topic: str = "", members: list[str] | None = None) -> Channel:
        channel = Channel(channel_id, name, kind, purpose, topic, list(members or []))
        self.channels[channel_id] = channel
        return channel

    def fail_next(self, method: str, *, status: int = 429, error: str = "ratelimited", retry_after: float | None = 1, times: int = 1) -> None:
        """The next `times` calls of `method` fail (a 429 with Retry-After by default; `DROPPED`: the
        connection is closed with no answer, as a server that closed a kept-alive connection meanwhile)."""
        self._failures.setdefault(method, []).extend(Failure(status, error, retry_after) for _ in range(times))

    def next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ts):06d}"

    # --- what a test reads ----------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    def bot_messages(self, channel: str | None = None) -> list[PostedMessage]:
        return [m for m in self.messages if m.bot_id == self.bot_id and (channel is None or m.channel == channel)]

    def message(self, channel: str, ts: str) -> PostedMessage | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def acked(self, envelope_id: str) -> bool:
        return any(a.get("envelope_id") == envelope_id for a in self.acks)

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = PATIENCE) -> Any:
        """Wait until `predicate()` is truthy (re-checked on every request, ack and post)."""
        async def _until() -> Any:
            async with self._changed:
                while not (result := predicate()):
                    await self._changed.wait()
                return result

        try:
            return await asyncio.wait_for(_until(), timeout)
        except TimeoutError:
            raise AssertionError(f"fake Slack: condition not met within {timeout}s") from None

    async def wait_connected(self, count: int = 1, timeout: float = PATIENCE) -> None:
        await self.wait_for(lambda: len([s for s in self._sockets if not s.closed]) >= 1 and self.connections_opened >= count, timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- Web API --------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        raw = b""
        if request.can_read_body:
            raw = await request.read()
            if request.content_type == "application/json":
                args.update(json.loads(raw or b"{}"))
            else:
                args.update(parse_qsl(raw.decode(), keep_blank_values=True))
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.pop("token", None)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        call = ApiCall(method, args, token, at=self.clock.monotonic(), headers=headers,
                       body=raw)
        self.calls.append(call)
        try:
            failures = self._failures.get(method)
            if not failures and method in self.storm_methods and self._storm.random() < self.storm_share:
                failures = [Failure(429, "ratelimited", self.storm_retry_after)]
                self.storm_429s += 1
            if failures:
                failure = failures.pop(0)
                call.status = failure.status
                if failure.status == DROPPED:  # the connection closed under the call: no answer at all
                    assert request.transport is not None
                    request.transport.close()
                    return web.Response()
                headers = {"Retry-After": f"{failure.retry_after:g}"} if failure.retry_after is not None else {}
                return web.json_response({"ok": False, "error": failure.error}, status=failure.status, headers=headers)
            wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
            if token != wanted:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            handler = getattr(self, "_m_" + method.replace(".", "_"), None)
            if handler is None:
                return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
            arrived = self.clock.monotonic()
            scopes = self._scopes(method, args)
            wait = self._over_budget(scopes, arrived)
            if wait is not None:
                call.status = 429
                self.throttled.append(call)
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": str(wait)})
            try:
                result = await handler(args)
            except KeyError as e:
                result = {"ok": False, "error": "invalid_arguments", "detail": str(e)}
            if result.get("ok"):
                for scope in scopes:
                    self._counted.setdefault(scope, []).append(arrived)
            granted = {"x-oauth-scopes": ",".join(self.scopes)} if token == BOT_TOKEN else {}
            return web.json_response(result, headers=granted)
        finally:
            await self._notify()

    def _scopes(self, method: str, args: dict[str, Any]) -> list[tuple[str, str]]:
        scopes = [(method, "")] if method in self.tiers else []
        if method in self.per_channel:
            scopes.append((method, str(args.get("channel") or args.get("channel_id"))))
        return scopes

    def _over_budget(self, scopes: list[tuple[str, str]], now: float) -> int | None:
        """Whole seconds to wait (Slack's Retry-After) when a call would go over a limit."""
        for scope in scopes:
            limit, per = self.per_channel[scope[0]] if scope[1] else self.tiers[scope[0]]
            recent = [t for t in self._counted.get(scope, []) if t > now - per]
            self._counted[scope] = recent
            if len(recent) >= limit:
                return max(1, int(recent[-limit] + per - now + 0.999))
        return None

    async def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.test/",
            "team": "Fake Team",
            "user": "agent",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    async def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={uuid.uuid4()}&app_id={self.app_id}"}

    async def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args["channel"]
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        blocks = _maybe_json(args.get("blocks"))
        msg = PostedMessage(channel, self.next_ts(), args.get("text", ""), self.bot_user_id, args.get("thread_ts") or None, self.bot_id, blocks,
                            username=args.get("username") or None)
        self.messages.append(msg)
        if self.echo_bot_posts and self._sockets:
            event = self._message_event(msg, kind=self.channels[channel].kind)
            echo = asyncio.get_running_loop().create_task(self.send_event(event))
            self._echoes.add(echo)
            echo.add_done_callback(self._echoes.discard)
        held = time.monotonic()  # the message is in the channel; the app hears so only later
        while time.monotonic() - held < self.post_answer_delay:  # re-read: setting 0 releases it
            await asyncio.sleep(0.05)
        return {"ok": True, "channel": channel, "ts": msg.ts, "message": self._message_json(msg)}

    async def _m_files_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        # Retired: Slack refuses it for new apps and ends it for all (Nov 2025). Nothing may call it.
        return {"ok": False, "error": "method_deprecated"}

    async def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        filename, length = args.get("filename"), int(args.get("length") or 0)
        if not filename or length <= 0:
            return {"ok": False, "error": "invalid_arguments"}
        if length > self.max_file_bytes:  # a team's admins restricted uploads of large files (Slack's own error)
            return {"ok": False, "error": "file_upload_size_restricted"}
        file_id = f"F{len(self.files) + len(self.pending_uploads) + 1:08d}U"
        self.pending_uploads[file_id] = (filename, length, None)
        return {"ok": True, "upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        """The upload URL: the bytes, exactly `length` of them (Slack refuses a mismatch)."""
        file_id = request.match_info["file_id"]
        data = await request.read()
        pending = self.pending_uploads.get(file_id)
        try:
            if pending is None:
                return web.Response(status=404, text="unknown upload")
            if len(data) != pending[1]:
                return web.Response(status=400, text="length mismatch")
            self.pending_uploads[file_id] = (pending[0], pending[1], data)
            return web.Response(text=f"OK - {len(data)}")
        finally:
            await self._notify()

    async def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        files = _maybe_json(args.get("files"))
        channel = args.get("channel_id") or ""
        if not isinstance(files, list) or not files or channel not in self.channels:
            return {"ok": False, "error": "invalid_arguments" if channel in self.channels else "channel_not_found"}
        for f in files:
            pending = self.pending_uploads.get(f.get("id", ""))
            if pending is None:
                return {"ok": False, "error": "file_not_found"}  # never uploaded, or completed already
            if pending[2] is None:
                return {"ok": False, "error": "file_upload_not_completed"}
        thread_ts = args.get("thread_ts") or None
        msg = PostedMessage(channel, self.next_ts(), args.get("initial_comment", ""), self.bot_user_id, thread_ts,
                            self.bot_id)
        out = []
        for f in files:
            name, _, data = self.pending_uploads.pop(f["id"])
            assert data is not None
            self.files[f["id"]] = data
            title = f.get("title") or name
            self.shared_files.append(SharedFile(f["id"], title, data, channel, thread_ts, msg.ts))
            msg.files.append({"id": f["id"], "name": name, "title": title, "size": len(data)})
            out.append({"id": f["id"], "title": title})
        self.messages.append(msg)
        if self.complete_hold is not None:  # shared; the answer is held (a client killed meanwhile never hears it)
            await self._notify()
            await self.complete_hold.wait()
        return {"ok": True, "files": out}

    async def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self.message(args["channel"], args["ts"])
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        if msg.bot_id != self.bot_id:
            return {"ok": False, "error": "cant_update_message"}
        msg.text = args.get("text", msg.text)
        msg.edits.append(msg.text)
        # As on Slack, an update is the whole message: one without `blocks` leaves it with none.
        msg.blocks = _maybe_json(args["blocks"]) if "blocks" in args else None
        msg.block_edits.append(msg.blocks)
        return {"ok": True, "channel": msg.channel, "ts": msg.ts, "text": msg.text, "message": self._message_json(msg)}

    async def _m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self.message(args["channel"], args["ts"])
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        if msg.bot_id != self.bot_id:
            return {"ok": False, "error": "cant_delete_message"}
        self.messages.remove(msg)
        self.deleted.append(msg)
        return {"ok": True, "channel": msg.channel, "ts": msg.ts}

    async def _m_chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        if not self.native_streaming:
            return {"ok": False, "error": "unknown_method"}
        channel = args["channel"]
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        text = args.get("markdown_text") or ""
        msg = PostedMessage(channel, self.next_ts(), text, self.bot_user_id, args["thread_ts"], self.bot_id,
                            streaming=True, appends=[text] if text else [])
        self.messages.append(msg)
        return {"ok": True, "channel": channel, "ts": msg.ts}

    def _streaming(self, args: dict[str, Any]) -> PostedMessage | dict[str, Any]:
        if not self.native_streaming:
            return {"ok": False, "error": "unknown_method"}
        msg = self.message(args["channel"], args["ts"])
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        if not msg.streaming:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        return msg

    async def _m_chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        if isinstance(msg, dict):
            return msg
        msg.text += args["markdown_text"]
        msg.appends.append(args["markdown_text"])
        return {"ok": True, "channel": msg.channel, "ts": msg.ts}

    async def _m_chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        if isinstance(msg, dict):
            return msg
        if args.get("markdown_text"):
            msg.text += args["markdown_text"]
            msg.appends.append(args["markdown_text"])
        msg.streaming = False
        return {"ok": True, "channel": msg.channel, "ts": msg.ts, "message": self._message_json(msg)}

    async def _m_views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        """As Slack: the trigger id of a click, used once; a modal's title and close at most 24
        characters, at most 100 blocks, a section's text at most 3,000."""
        trigger = str(args.get("trigger_id", ""))
        if trigger not in self._triggers:
            return {"ok": False, "error": "invalid_trigger_id"}
        user = self._triggers.pop(trigger)
        if user == "":
            return {"ok": False, "error": "exchanged_trigger_id"}
        self._triggers[trigger] = ""  # spent
        view = _maybe_json(args.get("view"))
        problems = []
        if not isinstance(view, dict) or view.get("type") != "modal":
            problems.append("view.type must be modal")
        else:
            for key in ("title", "close"):
                text = (view.get(key) or {}).get("text", "")
                if (key == "title" and not text) or len(text) > 24:
                    problems.append(f"must be less than 25 characters [json-pointer:/view/{key}/text]")
            blocks = view.get("blocks") or []
            if len(blocks) > 100:
                problems.append("no more than 100 items allowed [json-pointer:/view/blocks]")
            for n, b in enumerate(blocks):
                if b.get("type") == "section" and len((b.get("text") or {}).get("text", "")) > 3000:
                    problems.append(f"must be less than 3001 characters [json-pointer:/view/blocks/{n}/text/text]")
        if problems:
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": problems}}
        opened = {"id": f"V{len(self.views) + 1:08d}", "user": user, **view}
        self.views.append(opened)
        return {"ok": True, "view": opened}

    async def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        self.ephemerals.append(Ephemeral(args["channel"], args["user"], args.get("text", ""), args.get("thread_ts") or None))
        return {"ok": True, "message_ts": self.next_ts()}

    async def _m_assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        args["channel_id"], args["thread_ts"]  # noqa: B018 - required arguments
        return {"ok": True} if self.status_allowed else {"ok": False, "error": "not_allowed_token_type"}

    async def _m_users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(args["user"])
        return {"ok": True, "user": user.as_api(self.team_id)} if user else {"ok": False, "error": "user_not_found"}

    async def _m_conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.channels.get(args["channel"])
        return {"ok": True, "channel": channel.as_api()} if channel else {"ok": False, "error": "channel_not_found"}

    async def _m_conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.channels.get(args["channel"])
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        page, cursor = _page(channel.members, args)
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": cursor}}

    async def _m_conversations_list(self, args: dict[str, Any]) -> dict[str, Any]:
        types = set(str(args.get("types") or "public_channel").split(","))
        wanted = {"channel": "public_channel", "group": "private_channel", "im": "im", "mpim": "mpim"}
        exclude_archived = str(args.get("exclude_archived", "")).lower() in ("1", "true")
        matching = [
            c.as_api()
            for c in self.channels.values()
            if wanted[c.kind] in types and not (exclude_archived and c.is_archived)
        ]
        page, cursor = _page(matching, args)
        return {"ok": True, "channels": page, "response_metadata": {"next_cursor": cursor}}

    async def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        if args["channel"] not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        top = [m for m in self.messages if m.channel == args["channel"] and (m.thread_ts in (None, m.ts))]
        newest_first = [self._message_json(m) for m in reversed(top)]
        page, cursor = _page(newest_first, args)
        return {"ok": True, "messages": page, "has_more": bool(cursor), "response_metadata": {"next_cursor": cursor}}

    async def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        thread = args["ts"]
        in_thread = [m for m in self.messages if m.channel == args["channel"] and (m.ts == thread or m.thread_ts == thread)]
        if not in_thread:
            return {"ok": False, "error": "thread_not_found"}
        oldest_first = [self._message_json(m) for m in in_thread]
        page, cursor = _page(oldest_first, args)
        return {"ok": True, "messages": page, "has_more": bool(cursor), "response_metadata": {"next_cursor": cursor}}

    def _message_json(self, msg: PostedMessage) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "user": msg.user, "text": msg.text, "ts": msg.ts, "team": self.team_id}
        if msg.bot_id:
            out["bot_id"] = msg.bot_id
            out["app_id"] = self.app_id
        if msg.thread_ts:
            out["thread_ts"] = msg.thread_ts
        if msg.blocks is not None:
            out["blocks"] = msg.blocks
        if msg.files:
            out["files"] = msg.files
        return out

    # --- Socket Mode ----------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, autoclose=self.answer_close)
        await ws.prepare(request)
        self.connections_opened += 1
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": 1,
                "debug_info": {"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        )
        await self._notify()
        if self.redeliver:
            for envelope in list(self._unacked.values()):
                await self._resend(ws, envelope)
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    try:
                        self.acks.append(json.loads(frame.data))
                        self._unacked.pop(str(self.acks[-1].get("envelope_id")), None)
                    except ValueError:
                        self.acks.append({"unparsable": frame.data})
                    await self._notify()
            if not self.answer_close:
                await self._released.wait()  # the client's close frame stays unanswered
        finally:
            self._sockets.remove(ws)
            await self._notify()
        return ws

    async def _live_socket(self) -> web.WebSocketResponse:
        await self.wait_for(lambda: any(not s.closed for s in self._sockets))
        return next(s for s in reversed(self._sockets) if not s.closed)

    async def _resend(self, ws: web.WebSocketResponse, envelope: dict[str, Any]) -> dict[str, Any]:
        self._unacked.pop(envelope["envelope_id"], None)
        attempt = int(envelope.get("retry_attempt") or 0) + 1
        again = {**envelope, "envelope_id": str(uuid.uuid4()), "retry_attempt": attempt, "retry_reason": "timeout"}
        self._unacked[again["envelope_id"]] = again
        self.redelivered += 1
        self.sent_envelopes.append(again)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_str(json.dumps(again))
        return again

    async def send_envelope(self, envelope: dict[str, Any]) -> str:
        if self.redeliver and envelope.get("type") == "events_api":
            self._unacked[envelope["envelope_id"]] = envelope
            live = [s for s in self._sockets if not s.closed]
            if not live:  # sent when the app connects again
                return str(envelope["envelope_id"])
            self.sent_envelopes.append(envelope)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await live[-1].send_str(json.dumps(envelope))
            if self.redeliver_after is not None:
                self._retries.add(asyncio.create_task(self._retry_unacked(envelope)))
            return str(envelope["envelope_id"])
        ws = await self._live_socket()
        self.sent_envelopes.append(envelope)
        await ws.send_str(json.dumps(envelope))
        return envelope["envelope_id"]

    async def _retry_unacked(self, envelope: dict[str, Any]) -> None:
        """Slack's timed retries of one event: the same event, a new envelope, while unacked."""
        for _ in range(3):
            assert self.redeliver_after is not None
            await asyncio.sleep(self.redeliver_after)
            if envelope["envelope_id"] not in self._unacked:  # acked, or resent on a new connection
                return
            live = [ws for ws in self._sockets if not ws.closed]
            if not live:
                return  # the next connection gets it
            envelope = await self._resend(live[-1], envelope)

    async def send_raw(self, text: str) -> None:
        """A frame as is (e.g. malformed JSON) on the live socket."""
        await (await self._live_socket()).send_str(text)

    async def request_reconnect(self) -> None:
        """Slack's `disconnect` frame: the client should open a new connection."""
        await (await self._live_socket()).send_json(
            {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "applink-fake"}}
        )

    async def drop_connections(self) -> None:
        """Close every socket from the server side, as a network drop or a deploy would."""
        for ws in list(self._sockets):
            await ws.close()

    def event_callback(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """The Events API body (`event_callback`) around one event, as HTTP mode and Socket Mode carry it."""
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._event_ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {"enterprise_id": None, "team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True, "is_enterprise_install": False}
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{event.get('type')}-{self.team_id}-{event.get('channel', '')}",
        }

    async def send_event(self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0, body: dict[str, Any] | None = None) -> str:
        body = body or self.event_callback(event, event_id=event_id)
        return await self.send_envelope(
            {
                "envelope_id": str(uuid.uuid4()),
                "payload": body,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
            }
        )

    async def send_interactive(self, payload: dict[str, Any]) -> str:
        return await self.send_envelope(
            {"envelope_id": str(uuid.uuid4()), "payload": payload, "type": "interactive", "accepts_response_payload": False}
        )

    async def slash_command(self, user: str, channel: str, command: str, text: str = "") -> str:
        """A person runs one of the app's slash commands (Socket Mode `slash_commands` envelope)."""
        payload = {"token": "verification-token", "team_id": self.team_id, "team_domain": "acme",
                   "channel_id": channel, "channel_name": self.channels[channel].name or "directmessage",
                   "user_id": user, "user_name": self.users[user].name, "command": command, "text": text,
                   "api_app_id": self.app_id, "is_enterprise_install": "false",
                   "response_url": f"http://127.0.0.1:{self.port}/commands/{uuid.uuid4().hex}",
                   "trigger_id": f"{next(self._event_ids)}.{uuid.uuid4().int % 10**12}"}
        return await self.send_envelope({"envelope_id": str(uuid.uuid4()), "payload": payload, "type": "slash_commands",
                                         "accepts_response_payload": True})

    # --- a person using Slack -------------------------------------------------------------

    def _message_event(self, msg: PostedMessage, *, kind: str) -> dict[str, Any]:
        event = self._message_json(msg)
        event.update({"channel": msg.channel, "event_ts": msg.ts, "channel_type": kind})
        if msg.bot_id is None:
            event["client_msg_id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{msg.channel}/{msg.ts}"))
            event["blocks"] = [
                {"type": "rich_text", "block_id": "b1", "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": msg.text}]}]}
            ]
        if msg.thread_ts:
            parent = self.message(msg.channel, msg.thread_ts)
            if parent is not None:
                event["parent_user_id"] = parent.user
        if msg.files:
            event["subtype"] = "file_share"
        return event

    def add_file(self, name: str, mimetype: str, data: bytes, *, size: int | None = None) -> dict[str, Any]:
        """A file a person uploads: its `files[]` object as events carry it (`size` may lie, as a test wants)."""
        file_id = f"F{len(self.files) + 1:08d}"
        self.files[file_id] = data
        url = f"http://127.0.0.1:{self.port}/files-pri/{self.team_id}-{file_id}/{quote(name, safe='')}"
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype, "filetype": name.rsplit(".", 1)[-1],
                "size": len(data) if size is None else size, "url_private": url, "url_private_download": url + "?dl=1",
                "permalink": f"https://fake.slack.com/files/U0ADA/{file_id}/{quote(name)}"}

    async def _file(self, request: web.Request) -> web.Response:
        """`url_private`: the bot token in the Authorization header, or Slack's login page (HTML, 200)."""
        self.file_fetches.append(request.headers.get("Authorization"))
        if self.file_hold is not None:  # a large file, a slow link
            await self._notify()
            await self.file_hold.wait()
        file_id = request.match_info["team_file"].rsplit("-", 1)[-1]
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}" or file_id not in self.files:
            return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    def user_posts(self, channel: str, user: str, text: str, *, thread_ts: str | None = None, files: list[dict[str, Any]] | None = None) -> tuple[PostedMessage, list[dict[str, Any]]]:
        """A person posts: the message lands in the channel; returns the events Slack would send.

        A message that mentions the bot outside a DM yields two events: `message` and
        `app_mention` (different event ids, same `ts` and `client_msg_id`).
        """
        kind = self.channels[channel].kind
        msg = PostedMessage(channel, self.next_ts(), text, user, thread_ts, None, None, files=list(files or []))
        self.messages.append(msg)
        message = self._message_event(msg, kind=kind)
        events = [message]
        if f"<@{self.bot_user_id}>" in text and kind != "im":
            mention = {k: v for k, v in message.items() if k not in ("channel_type", "subtype", "parent_user_id")}
            mention["type"] = "app_mention"
            events.append(mention)
        return msg, events

    async def say(self, channel: str, user: str, text: str, *, thread_ts: str | None = None, files: list[dict[str, Any]] | None = None, mention_first: bool = False) -> tuple[PostedMessage, list[str]]:
        """`user_posts`, delivered over the socket; returns the message and its envelope ids."""
        msg, events = self.user_posts(channel, user, text, thread_ts=thread_ts, files=files)
        if mention_first:
            events.reverse()
        return msg, [await self.send_event(e) for e in events]

    def block_actions(self, user: str, msg: PostedMessage, value: str) -> dict[str, Any]:
        """The `block_actions` payload of a click on the button carrying `value` in `msg`."""
        action = next(
            (e for b in msg.blocks or [] if b.get("type") == "actions" for e in b["elements"] if e.get("value") == value),
            None,
        )
        if action is None:
            raise LookupError(f"no button with value {value!r} on message {msg.ts}")
        person = self.users.get(user, User(user, user))
        trigger = f"{next(self._ts)}.{next(self._ts)}.fake"
        self._triggers[trigger] = user
        return {
            "type": "block_actions",
            "user": {"id": user, "username": person.name, "name": person.name, "team_id": self.team_id},
            "api_app_id": self.app_id,
            "token": "verification-token",
            "container": {"type": "message", "message_ts": msg.ts, "channel_id": msg.channel, "is_ephemeral": False, "thread_ts": msg.thread_ts},
            "trigger_id": trigger,
            "team": {"id": self.team_id, "domain": "fake"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": msg.channel, "name": self.channels[msg.channel].name},
            "message": self._message_json(msg),
            "state": {"values": {}},
            "response_url": f"http://127.0.0.1:{self.port}/actions/{self.team_id}/1/fake",
            "actions": [
                {
                    "action_id": action["action_id"],
                    "block_id": next(b.get("block_id", "") for b in msg.blocks or [] if action in b.get("elements", [])),
                    "text": action.get("text", {"type": "plain_text", "text": ""}),
                    "value": value,
                    "style": action.get("style"),
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    async def click(self, user: str, msg: PostedMessage, value: str) -> str:
        return await self.send_interactive(self.block_actions(user, msg, value))


# --- HTTP mode ----------------------------------------------------------------------------


def sign(body: str, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with a request: `v0=` HMAC-SHA256 of `v0:{ts}:{body}`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def signed_event_request(body: Mapping[str, Any], secret: str = SIGNING_SECRET, *, timestamp: int | None = None, retry_num: int | None = None) -> tuple[str, dict[str, str]]:
    """An Events API request (JSON) with its signed headers."""
    raw = json.dumps(body)
    headers = {"Content-Type": "application/json", **sign(raw, secret, timestamp)}
    if retry_num is not None:
        headers.update({"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"})
    return raw, headers


def signed_interactive_request(payload: Mapping[str, Any], secret: str = SIGNING_SECRET, *, timestamp: int | None = None) -> tuple[str, dict[str, str]]:
    """An interactivity request: form-encoded `payload=<JSON>`, signed."""
    raw = "payload=" + quote(json.dumps(payload))
    return raw, {"Content-Type": "application/x-www-form-urlencoded", **sign(raw, secret, timestamp)}


def _maybe_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _page(items: list[Any], args: Mapping[str, Any]) -> tuple[list[Any], str]:
    """Cursor pagination as Slack does it: an opaque `next_cursor`, empty on the last page."""
    limit = int(args.get("limit") or 100) or 100
    start = int(args.get("cursor") or 0)
    end = start + limit
    return items[start:end], (str(end) if end < len(items) else "")
