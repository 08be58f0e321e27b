"""A fake Mattermost server on loopback: REST v4, the websocket, and interactive action callbacks.

It speaks the wire protocol the real server speaks (shapes from mattermost/mattermost
`api/v4/source/*.yaml`, `server/public/model/websocket_message.go`, `app/post.go`,
`app/integration_action.go`), so the adapter under test talks to it exactly as it would talk to
a real server. Tests seed users, teams and channels, act as people (`user_post`, `react`,
`click`), inject trouble (`rate_limit`, `limit_rate`, `drop_websockets`) and read what a person would see
(`posts_in`, `history`, `ephemerals`).

Facts reproduced on purpose:
- websocket: Bearer auth on the upgrade or an `authentication_challenge`; `hello` (seq 0) is
  sent before the `{"status": "OK", "seq_reply": 1}` answer, then a `status_change`; a bad
  token in the challenge closes the socket; `connection_id` + `sequence_number` resume a
  dropped connection from the server's queue of recent events.
- `posted` / `post_edited`: `data.post` is a JSON string; `mentions` is a JSON string array
  (in a DM the other member, in a group DM every member but the poster); `team_id` is empty
  for D and G channels; `integration` is stripped from posts sent to clients.
- REST errors are `{id, message, detailed_error, request_id, status_code}`; a 429 is
  `text/plain` with `X-Ratelimit-Reset` and `Retry-After`; with rate limiting on (`limit_rate`)
  every answer carries `X-Ratelimit-Limit` / `-Remaining` / `-Reset`, GCRA per token; a message over 16,383 characters
  is a 400; a retried create with the same `pending_post_id` returns the same post.
- An action click posts `{user_id, user_name, channel_id, ..., context}` to the action's
  `integration.url`; anything but 200 fails the click; `update` without `message` blanks the
  post; `update.props` replaces the props (`{}` drops the buttons); `ephemeral_text` is shown
  to the clicker only.
- Custom slash commands (`app/command.go`, `api4/command.go`): `POST /commands` needs
  `manage_slash_commands` on the team (here: system admins and `command_managers`), lower-cases the
  trigger and refuses one already used on the team or by a built-in command (`/help`, `/join`, ...)
  with a 400 `api.command.duplicate_trigger.app_error`; `GET /commands?team_id=&custom_only=true`
  lists the team's with their tokens. Running one (`run_command`) POSTs a form (`token`,
  `command`, `text`, `user_id`, `channel_id`, `team_id`, `response_url`, `trigger_id`, ...) with
  `Authorization: Token <token>` to its URL; the JSON answer's `response_type` (`ephemeral`, the
  default, or `in_channel`) decides who sees its `text`; `response_url` takes up to 5 more answers
  within 30 minutes.

The limits it enforces (`limit_rate`'s GCRA, a `response_url`'s 30 minutes) count in `clock`'s time,
which also stamps `request_times` and `typing_times`: a test that runs the adapter on a `ManualClock`
gives the fake the same one, so a call over the limit is refused in that clock's time (as
`FakeSlack(clock=)` and `FakeTelegram(clock=)` do).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from gateway.clock import Clock
from tests.fakes.inflight import InFlight
from tests.support.patience import PATIENCE

MAX_MESSAGE_RUNES = 16_383
MAX_PROPS_RUNES = 800_000  # model.PostPropsMaxRunes: a post's props, as JSON
_DEAD_QUEUE_SIZE = 128
_ACTION_ID = re.compile(r"^[A-Za-z0-9]+$")
# Triggers of the server's own commands (`app/slashcommands/command_*.go`): no custom command may take one.
BUILT_IN_COMMANDS = frozenset({
    "away", "code", "collapse", "dnd", "echo", "expand", "groupmsg", "header", "help", "invite", "invite_people",
    "join", "kick", "leave", "logout", "me", "msg", "mute", "offline", "online", "open", "purpose", "remove",
    "rename", "search", "settings", "shortcuts", "shrug", "status",
})
_CHANNEL_MENTIONS = re.compile(r"(?<![\w@])@(channel|all|here)\b", re.IGNORECASE)


def new_id() -> str:
    """A Mattermost-style id: 26 lowercase base32 characters."""
    return base64.b32encode(uuid.uuid4().bytes).decode().lower().rstrip("=")[:26]


def _app_error(status: int, error_id: str, message: str) -> web.Response:
    body = {
        "id": error_id,
        "message": message,
        "detailed_error": "",
        "request_id": new_id(),
        "status_code": status,
    }
    return web.json_response(body, status=status)


@dataclass
class RateLimitRule:
    method: str
    path: re.Pattern[str]
    times: int
    reset: int


@dataclass
class ServerRateLimit:
    """The server's rate limiting (System Console > Rate Limiting), per token as with
    `VaryByHeader: Authorization`: GCRA as the `throttled` library does it, a burst of
    `max_burst + 1` calls refilled at `per_sec` a second.

    In whole nanoseconds, as the library's `time.Duration`s are: on a test's clock, which stands
    still, a call comes exactly at the moment the burst is full again, and a sum of float
    intervals a hair past that moment would refuse it."""

    per_sec: float
    max_burst: int
    tat: dict[str, int] = field(default_factory=dict)  # key -> theoretical arrival time (ns)

    def check(self, key: str, at: float) -> tuple[bool, dict[str, str]]:
        """Whether a call arriving at `at` (seconds) is admitted (and counted), with the headers to answer."""
        now = round(at * 1e9)
        interval = round(1e9 / self.per_sec)
        tolerance = interval * (self.max_burst + 1)
        tat = max(self.tat.get(key, now), now)
        new_tat = tat + interval
        allow_at = new_tat - tolerance
        limit = self.max_burst + 1
        if now < allow_at:
            headers = {"X-Ratelimit-Limit": str(limit), "X-Ratelimit-Remaining": "0",
                       "X-Ratelimit-Reset": str(_whole_seconds(tat - now)),
                       "Retry-After": str(_whole_seconds(allow_at - now))}
            return False, headers
        self.tat[key] = new_tat
        remaining = (now - allow_at) // interval
        return True, {"X-Ratelimit-Limit": str(limit), "X-Ratelimit-Remaining": str(min(remaining, limit)),
                      "X-Ratelimit-Reset": str(_whole_seconds(new_tat - now))}


def _whole_seconds(ns: int) -> int:
    """Nanoseconds as the headers say them: whole seconds, rounded up."""
    return -(-ns // 1_000_000_000)


@dataclass
class ClickResult:
    """What the clicker's client gets back from `POST /posts/{id}/actions/{action_id}`."""

    status: int
    ephemeral_text: str = ""
    error_id: str = ""


@dataclass
class _Conn:
    """One websocket connection as the server tracks it, alive or waiting to be resumed."""

    connection_id: str
    user_id: str
    seq_next: int = 0
    dead_queue: list[tuple[int, str]] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None

    async def send_event(self, event: str, data: dict[str, Any], broadcast: dict[str, Any]) -> None:
        frame = json.dumps({"event": event, "data": data, "broadcast": broadcast, "seq": self.seq_next})
        self.dead_queue.append((self.seq_next, frame))
        del self.dead_queue[:-_DEAD_QUEUE_SIZE]
        self.seq_next += 1
        if self.ws is not None and not self.ws.closed:
            try:
                await self.ws.send_str(frame)
            except (ConnectionError, RuntimeError):
                self.ws = None  # queued: a resume replays it


class FakeMattermost:
    """The server. `await start()` returns its base URL (http://127.0.0.1:<port>)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()  # what the limits count in, and what stamps the request times
        self.users: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # token -> user id
        self.system_admins: set[str] = set()
        self.teams: dict[str, dict[str, Any]] = {}
        self.team_members: dict[str, set[str]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.members: dict[str, list[str]] = {}  # channel id -> user ids, in join order
        self.posts: dict[str, dict[str, Any]] = {}  # as stored, integrations included
        self.edit_history: dict[str, list[str]] = {}  # post id -> every message it has shown
        self.reactions: list[dict[str, Any]] = []
        self.typing: list[dict[str, Any]] = []  # user_typing seen, from the websocket or REST
        self.ephemerals: list[dict[str, Any]] = []  # shown to one user only
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, json body) of REST calls
        self.request_times: list[float] = []  # clock.monotonic() of each entry of `requests`
        self.typing_times: list[float] = []  # clock.monotonic() of each entry of `typing`
        self.rate_limits: list[RateLimitRule] = []
        self.server_limit: ServerRateLimit | None = None  # set by `limit_rate`
        self.throttled: list[tuple[str, str]] = []  # (method, path) of calls refused by `server_limit`
        self.click_log: list[dict[str, Any]] = []  # what was posted to integrations
        self.websocket_connects = 0
        self.break_after_create = 0  # create the next N posts, then cut the connection unanswered
        self.post_answer_delay = 0.0  # seconds POST /posts holds its answer after creating the post
        self.websocket_resumes = 0  # connections that continued an earlier stream without a hello
        # False: the server never answers a client's websocket close frame (a connection that
        # died without a word); the client must drop the connection itself.
        self.answer_close = True
        self._released = asyncio.Event()  # set on stop: silent sockets may end now
        self._pending: dict[tuple[str, str], str] = {}  # (user, pending_post_id) -> post id
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}  # file id -> (FileInfo, contents)
        self.max_file_bytes = 100 * 1024 * 1024  # FileSettings.MaxFileSize, the server's default
        self.uploads: list[str] = []  # file ids POST /files made, in order
        self.commands: dict[str, dict[str, Any]] = {}  # custom slash commands by id, as stored
        self.command_managers: set[str] = set()  # users with manage_slash_commands (besides system admins)
        self._hooks: dict[str, dict[str, Any]] = {}  # response_url id -> {user_id, channel_id, root_id, uses, until}
        self.file_downloads: list[str] = []  # file ids fetched with a valid token
        self._conns: dict[str, _Conn] = {}
        self._last_ms = 0  # the latest post time handed out: each one later than the one before
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""
        self.in_flight = InFlight()

    # --- lifecycle -------------------------------------------------------------------------

    def busy(self) -> list[str]:
        """What the fake is still doing (`tests.support.settled`): REST calls it is answering."""
        return [f"mattermost: {self.in_flight.calls} calls in flight"] if self.in_flight.calls else []

    async def start(self) -> str:
        app = web.Application(middlewares=[self.in_flight.middleware, self._rate_limit_middleware])
        r = app.router
        r.add_get("/api/v4/websocket", self._websocket)
        r.add_get("/api/v4/users/me", self._get_me)
        r.add_get("/api/v4/users/me/teams", self._get_my_teams)
        r.add_post("/api/v4/users/ids", self._users_by_ids)
        r.add_get("/api/v4/users/{user_id}", self._get_user)
        r.add_get("/api/v4/users/{user_id}/teams/{team_id}/channels", self._user_team_channels)
        r.add_post("/api/v4/users/{user_id}/typing", self._rest_typing)
        r.add_get("/api/v4/teams/name/{name}", self._team_by_name)
        r.add_post("/api/v4/teams/{team_id}/channels/search", self._search_channels)
        r.add_post("/api/v4/channels/direct", self._direct_channel)
        r.add_get("/api/v4/channels/{channel_id}", self._get_channel)
        r.add_get("/api/v4/channels/{channel_id}/stats", self._channel_stats)
        r.add_get("/api/v4/channels/{channel_id}/members", self._channel_members)
        r.add_get("/api/v4/channels/{channel_id}/members/{user_id}", self._channel_member)
        r.add_get("/api/v4/channels/{channel_id}/posts", self._channel_posts)
        r.add_post("/api/v4/posts", self._create_post)
        r.add_post("/api/v4/posts/ephemeral", self._ephemeral_post)
        r.add_get("/api/v4/posts/{post_id}", self._get_post)
        r.add_put("/api/v4/posts/{post_id}/patch", self._patch_post)
        r.add_get("/api/v4/posts/{post_id}/thread", self._get_thread)
        r.add_post("/api/v4/posts/{post_id}/actions/{action_id}", self._do_action)
        r.add_post("/api/v4/reactions", self._create_reaction)
        r.add_get("/api/v4/files/{file_id}", self._get_file)
        r.add_post("/api/v4/files", self._upload_file)
        r.add_post("/api/v4/commands", self._create_command)
        r.add_get("/api/v4/commands", self._list_commands)
        r.add_post("/hooks/commands/{hook_id}", self._command_hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession()
        return self.url

    async def stop(self) -> None:
        self._released.set()
        await self.drop_websockets(forget=True)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- seeding ---------------------------------------------------------------------------

    def add_user(self, username: str, *, is_bot: bool = False, token: str | None = None, **extra: Any) -> dict[str, Any]:
        uid = new_id()
        user = {
            "id": uid,
            "create_at": self._now(),
            "update_at": 0,
            "delete_at": 0,
            "username": username,
            "first_name": extra.pop("first_name", ""),
            "last_name": extra.pop("last_name", ""),
            "nickname": extra.pop("nickname", ""),
            "email": f"{username}@example.test",
            "roles": "system_user",
            "locale": "en",
            "is_bot": is_bot,
            **extra,
        }
        self.users[uid] = user
        if token:
            self.tokens[token] = uid
        return user

    def add_team(self, name: str, display_name: str = "") -> dict[str, Any]:
        tid = new_id()
        self.teams[tid] = {"id": tid, "name": name, "display_name": display_name or name.title(), "type": "O"}
        self.team_members[tid] = set()
        return self.teams[tid]

    def add_channel(
        self,
        team_id: str,
        name: str,
        *,
        type: str = "O",
        members: Iterable[str] = (),
        purpose: str = "",
        header: str = "",
        display_name: str = "",
    ) -> dict[str, Any]:
        cid = new_id()
        self.channels[cid] = {
            "id": cid,
            "create_at": self._now(),
            "update_at": 0,
            "delete_at": 0,
            "team_id": team_id,
            "type": type,
            "display_name": display_name or name.replace("-", " ").title(),
            "name": name,
            "header": header,
            "purpose": purpose,
            "last_post_at": 0,
            "total_msg_count": 0,
            "creator_id": "",
        }
        self.members[cid] = []
        for uid in members:
            self.join(cid, uid)
        return self.channels[cid]

    def join(self, channel_id: str, user_id: str) -> None:
        if user_id not in self.members[channel_id]:
            self.members[channel_id].append(user_id)
        team_id = self.channels[channel_id]["team_id"]
        if team_id:
            self.team_members[team_id].add(user_id)

    def leave(self, channel_id: str, user_id: str) -> None:
        """The user leaves the channel (or is removed from it), as `DELETE /channels/{id}/members/{user_id}` does."""
        self.members[channel_id].remove(user_id)

    def direct_channel(self, a: str, b: str) -> dict[str, Any]:
        name = "__".join(sorted((a, b)))
        for ch in self.channels.values():
            if ch["type"] == "D" and ch["name"] == name:
                return ch
        return self.add_channel("", name, type="D", members=(a, b), display_name="")

    def group_channel(self, user_ids: Iterable[str]) -> dict[str, Any]:
        ids = list(user_ids)
        names = ", ".join(self.users[u]["username"] for u in ids)
        return self.add_channel("", new_id(), type="G", members=ids, display_name=names)

    # --- acting as people ------------------------------------------------------------------

    async def user_post(
        self,
        user_id: str,
        channel_id: str,
        message: str,
        *,
        root_id: str = "",
        props: dict[str, Any] | None = None,
        type: str = "",
        file_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """A person (or another integration) posts; every member's websocket sees `posted`."""
        post, err = await self._create(
            user_id, {"channel_id": channel_id, "message": message, "root_id": root_id, "props": props or {}, "type": type,
                      "file_ids": file_ids or []}
        )
        if err is not None:
            raise AssertionError(f"user_post refused: {err.text}")
        assert post is not None
        return self.client_post(post)

    def add_file(self, user_id: str, name: str, mime_type: str, data: bytes, *, size: int | None = None) -> str:
        """An uploaded file (its FileInfo goes in `metadata.files` of the post naming it); returns its id."""
        file_id = new_id()
        info = {"id": file_id, "user_id": user_id, "post_id": "", "name": name, "extension": name.rsplit(".", 1)[-1],
                "size": len(data) if size is None else size, "mime_type": mime_type}
        self.files[file_id] = (info, data)
        return file_id

    async def _get_file(self, request: web.Request) -> web.Response:
        self._record((request.method, request.path, None))
        if self._auth(request) is None:
            return _app_error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return _app_error(404, "api.file.get_file.not_found", "Unable to get the file.")
        self.file_downloads.append(request.match_info["file_id"])
        return web.Response(body=found[1], content_type=found[0]["mime_type"])

    async def _upload_file(self, request: web.Request) -> web.Response:
        """`POST /api/v4/files`: multipart with `channel_id` and `files`; the uploader must be in the channel."""
        self._record((request.method, request.path, None))
        uid = self._auth(request)
        if uid is None:
            return _app_error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        if request.content_type != "multipart/form-data":
            return _app_error(400, "api.file.upload_file.read_request.app_error", "Unable to read the request.")
        form = await request.post()
        channel_id = form.get("channel_id")
        files = [v for k, v in form.items() if k == "files" and isinstance(v, web.FileField)]
        if not isinstance(channel_id, str) or channel_id not in self.channels or not files:
            return _app_error(400, "api.file.upload_file.incorrect_channelId.app_error", "Unable to upload the file.")
        if uid not in self.members[channel_id]:
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        infos = []
        for f in files:
            data = f.file.read()
            if len(data) > self.max_file_bytes:
                return _app_error(413, "api.file.upload_file.too_large_detailed.app_error",
                                  f"Unable to upload file {f.filename}. File is too large.")
            file_id = self.add_file(uid, f.filename, f.content_type or "application/octet-stream", data)
            self.files[file_id][0]["channel_id"] = channel_id
            self.uploads.append(file_id)
            infos.append(self.files[file_id][0])
        return web.json_response({"file_infos": infos, "client_ids": []}, status=201)

    async def redeliver(self, post_id: str) -> None:
        """Send the `posted` event of an existing post again (a second replica's view, a replay)."""
        await self._broadcast_posted(self.posts[post_id])

    async def react(self, user_id: str, post_id: str, emoji_name: str) -> None:
        await self._add_reaction(user_id, post_id, emoji_name)

    async def click(self, user_id: str, post_id: str, action_id: str) -> ClickResult:
        """A person clicks a button, as their client does (`POST /posts/{id}/actions/{action_id}`)."""
        return await self._click(user_id, post_id, action_id)

    async def push_event(self, user_id: str, event: str, data: Any) -> None:
        """Send any event (well-formed or not) to one user's websockets, numbered like the rest."""
        for conn in list(self._conns.values()):
            if conn.user_id == user_id:
                await conn.send_event(event, data, {"omit_users": None, "user_id": user_id, "channel_id": "", "team_id": ""})

    async def push_raw(self, user_id: str, text: str) -> int:
        """A frame as is (not JSON, no `seq`, any shape) on the user's live websockets; how many got it."""
        sent = 0
        for conn in list(self._conns.values()):
            if conn.user_id == user_id and conn.ws is not None and not conn.ws.closed:
                try:
                    await conn.ws.send_str(text)
                    sent += 1
                except (ConnectionError, RuntimeError):
                    pass
        return sent

    def limit_rate(self, per_sec: float, max_burst: int) -> None:
        """Rate limiting on, as an admin configures it: every REST call counts against its
        token's budget, every answer says the limit in headers, a call over it gets a 429."""
        self.server_limit = ServerRateLimit(per_sec, max_burst)

    def rate_limit(self, method: str, path_regex: str, *, times: int = 1, reset: int = 1) -> None:
        """The next `times` requests matching answer 429 with `reset` seconds to wait."""
        self.rate_limits.append(RateLimitRule(method.upper(), re.compile(path_regex), times, reset))

    async def drop_websockets(self, *, forget: bool = False) -> None:
        """Close every live websocket. `forget=True` also loses the resume queues (a restart)."""
        for conn in list(self._conns.values()):
            ws, conn.ws = conn.ws, None
            if ws is not None and not ws.closed:
                await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"dropped by test")
        if forget:
            self._conns.clear()

    def live_websockets(self) -> int:
        return sum(1 for c in self._conns.values() if c.ws is not None and not c.ws.closed)

    # --- reading what people see -----------------------------------------------------------

    def posts_in(self, channel_id: str, *, root_id: str | None = None) -> list[dict[str, Any]]:
        """Posts of a channel (or of one thread, root included), oldest first."""
        posts = [p for p in self.posts.values() if p["channel_id"] == channel_id and p["delete_at"] == 0]
        if root_id is not None:
            posts = [p for p in posts if p["id"] == root_id or p["root_id"] == root_id]
        return sorted(posts, key=lambda p: p["create_at"])

    def posts_by(self, user_id: str) -> list[dict[str, Any]]:
        return sorted((p for p in self.posts.values() if p["user_id"] == user_id), key=lambda p: p["create_at"])

    def history(self, post_id: str) -> list[str]:
        return list(self.edit_history.get(post_id, []))

    def buttons(self, post_id: str) -> list[dict[str, Any]]:
        """The actions a person sees on a post (integration stripped)."""
        out = []
        for att in self.posts[post_id].get("props", {}).get("attachments", []) or []:
            for action in att.get("actions", []) or []:
                out.append({k: v for k, v in action.items() if k != "integration"})
        return out

    def calls(self, method: str, path_regex: str) -> list[tuple[str, str, Any]]:
        pattern = re.compile(path_regex)
        return [c for c in self.requests if c[0] == method and pattern.search(c[1])]

    # --- internals: posts ------------------------------------------------------------------

    def _now(self) -> int:
        self._last_ms = max(self._last_ms + 1, int(time.time() * 1000))
        return self._last_ms

    @staticmethod
    def client_post(post: dict[str, Any]) -> dict[str, Any]:
        """A post as clients get it: action integrations stripped (the server never shows them)."""
        out = copy.deepcopy(post)
        for att in (out.get("props") or {}).get("attachments", []) or []:
            for action in att.get("actions", []) or []:
                action.pop("integration", None)
        return out

    async def _create(self, user_id: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, web.Response | None]:
        channel_id = body.get("channel_id", "")
        channel = self.channels.get(channel_id)
        if channel is None:
            return None, _app_error(404, "app.channel.get.existing.app_error", "Unable to find the existing channel.")
        if user_id not in self.members[channel_id]:
            return None, _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        message = body.get("message", "") or ""
        if len(message) > MAX_MESSAGE_RUNES:
            return None, _app_error(
                400, "model.post.is_valid.msg.app_error", f"Invalid Message: over {MAX_MESSAGE_RUNES} characters."
            )
        if len(json.dumps(body.get("props") or {}, ensure_ascii=False)) > MAX_PROPS_RUNES:
            return None, _app_error(400, "model.post.is_valid.props.app_error", "Invalid props")
        root_id = body.get("root_id", "") or ""
        if root_id:
            root = self.posts.get(root_id)
            if root is None or root["channel_id"] != channel_id:
                return None, _app_error(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.")
            if root["root_id"]:
                return None, _app_error(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.")
        pending = body.get("pending_post_id", "") or ""
        if pending and (user_id, pending) in self._pending:
            return self.posts[self._pending[(user_id, pending)]], None
        file_ids = body.get("file_ids") or []
        if len(file_ids) > 10:
            return None, _app_error(400, "model.post.is_valid.file_ids.app_error", "Invalid file ids.")
        for f in file_ids:  # the poster's own uploads, into this channel, not on a post yet
            info = self.files.get(f, ({}, b""))[0]
            if info.get("user_id") != user_id or info.get("post_id") or info.get("channel_id", channel_id) != channel_id:
                return None, _app_error(400, "api.post.create_post.file_ids.app_error", "Invalid file ids.")
        now = self._now()
        post = {
            "id": new_id(),
            "create_at": now,
            "update_at": now,
            "edit_at": 0,
            "delete_at": 0,
            "is_pinned": False,
            "user_id": user_id,
            "channel_id": channel_id,
            "root_id": root_id,
            "original_id": "",
            "message": message,
            "type": body.get("type", "") or "",
            "props": copy.deepcopy(body.get("props") or {}),
            "hashtags": "",
            "file_ids": body.get("file_ids") or [],
            "pending_post_id": pending,
            "reply_count": 0,
            "metadata": {},
        }
        if post["file_ids"]:  # the server fills in each file's FileInfo, as `posted` events carry it
            for f in post["file_ids"]:
                self.files[f][0]["post_id"] = post["id"]
            post["metadata"]["files"] = [self.files[f][0] for f in post["file_ids"] if f in self.files]
        if self.users[user_id].get("is_bot"):
            post["props"].setdefault("from_bot", "true")
        self.posts[post["id"]] = post
        self.edit_history[post["id"]] = [message]
        if pending:
            self._pending[(user_id, pending)] = post["id"]
        channel["last_post_at"] = now
        channel["total_msg_count"] += 1
        if root_id:
            self.posts[root_id]["reply_count"] += 1
        await self._broadcast_posted(post)
        return post, None

    def _mentions(self, post: dict[str, Any]) -> list[str]:
        channel = self.channels[post["channel_id"]]
        members = self.members[channel["id"]]
        others = [u for u in members if u != post["user_id"]]
        if channel["type"] in ("D", "G"):
            return others
        if _CHANNEL_MENTIONS.search(post["message"]):
            return others
        out = []
        for uid in others:
            name = re.escape(self.users[uid]["username"])
            if re.search(rf"(?<![\w@])@{name}(?![\w-])", post["message"], re.IGNORECASE):
                out.append(uid)
        return out

    async def _broadcast_posted(self, post: dict[str, Any]) -> None:
        channel = self.channels[post["channel_id"]]
        sender = self.users[post["user_id"]]
        data: dict[str, Any] = {
            "channel_display_name": channel["display_name"],
            "channel_name": channel["name"],
            "channel_type": channel["type"],
            "post": json.dumps(self.client_post(post)),
            "sender_name": "@" + sender["username"],
            "set_online": True,
            "team_id": channel["team_id"],
        }
        mentions = self._mentions(post)
        if mentions:
            data["mentions"] = json.dumps(mentions)
        await self._to_channel(channel["id"], "posted", data)

    async def _to_channel(self, channel_id: str, event: str, data: dict[str, Any]) -> None:
        broadcast = {"omit_users": None, "user_id": "", "channel_id": channel_id, "team_id": "", "connection_id": "", "omit_connection_id": ""}
        members = set(self.members[channel_id])
        for conn in list(self._conns.values()):
            if conn.user_id in members:
                await conn.send_event(event, data, broadcast)

    async def _update(self, post: dict[str, Any], *, message: str, props: dict[str, Any] | None) -> None:
        post["message"] = message
        if props is not None:
            post["props"] = copy.deepcopy(props)
        post["edit_at"] = post["update_at"] = self._now()
        self.edit_history.setdefault(post["id"], []).append(message)
        await self._to_channel(post["channel_id"], "post_edited", {"post": json.dumps(self.client_post(post))})

    async def _add_reaction(self, user_id: str, post_id: str, emoji_name: str) -> dict[str, Any]:
        post = self.posts[post_id]
        now = self._now()
        reaction = {
            "user_id": user_id,
            "post_id": post_id,
            "emoji_name": emoji_name,
            "create_at": now,
            "update_at": now,
            "delete_at": 0,
            "remote_id": "",
            "channel_id": post["channel_id"],
        }
        self.reactions.append(reaction)
        post["has_reactions"] = True
        await self._to_channel(post["channel_id"], "reaction_added", {"reaction": json.dumps(reaction)})
        return reaction

    async def _click(self, user_id: str, post_id: str, action_id: str) -> ClickResult:
        # The router only matches [A-Za-z0-9]+ action ids: anything else never reaches the integration.
        if not _ACTION_ID.match(action_id):
            return ClickResult(404, error_id="api.context.404.app_error")
        post = self.posts.get(post_id)
        if post is None:
            return ClickResult(404, error_id="app.post.get.app_error")
        action = None
        for att in post.get("props", {}).get("attachments", []) or []:
            for a in att.get("actions", []) or []:
                if a.get("id") == action_id:
                    action = a
        if action is None or not action.get("integration"):
            return ClickResult(404, error_id="api.post.do_action.action_id.app_error")
        channel = self.channels[post["channel_id"]]
        team = self.teams.get(channel["team_id"], {})
        request = {
            "user_id": user_id,
            "user_name": self.users[user_id]["username"],
            "channel_id": channel["id"],
            "channel_name": channel["name"],
            "team_id": channel["team_id"],
            "team_domain": team.get("name", ""),
            "post_id": post_id,
            "trigger_id": base64.urlsafe_b64encode(uuid.uuid4().bytes * 3).decode(),
            "type": action.get("type", ""),
            "data_source": action.get("data_source", ""),
            "context": action["integration"].get("context") or {},
        }
        self.click_log.append(request)
        assert self._session is not None
        try:
            async with self._session.post(
                action["integration"]["url"],
                data=json.dumps(request),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except aiohttp.ClientError:
            return ClickResult(400, error_id="api.post.do_action.action_integration.app_error")
        if status != 200:
            return ClickResult(400, error_id="api.post.do_action.action_integration.app_error")
        answer: dict[str, Any] = {}
        if raw:
            try:
                answer = json.loads(raw)
            except ValueError:
                return ClickResult(400, error_id="api.post.do_action.action_integration.app_error")
        update = answer.get("update")
        if isinstance(update, dict):
            # The server replaces the message (absent means blank) and the props when given.
            await self._update(post, message=update.get("message") or "", props=update.get("props"))
        text = answer.get("ephemeral_text") or ""
        if text:
            self.ephemerals.append(
                {"user_id": user_id, "channel_id": channel["id"], "root_id": post["root_id"] or post_id, "message": text}
            )
        return ClickResult(200, ephemeral_text=text)

    # --- slash commands ---------------------------------------------------------------------

    def _manages_commands(self, uid: str, team_id: str) -> bool:
        return uid in self.system_admins or (uid in self.command_managers and uid in self.team_members.get(team_id, set()))

    async def _create_command(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        assert uid is not None
        if not isinstance(body, dict):
            return _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing command in request body.")
        team_id = str(body.get("team_id", ""))
        if team_id not in self.teams or not self._manages_commands(uid, team_id):
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        trigger = str(body.get("trigger", "")).lower()
        url = str(body.get("url", ""))
        if not trigger or trigger.startswith("/") or " " in trigger or len(trigger) > 128:
            return _app_error(400, "model.command.is_valid.trigger.app_error", "Invalid trigger.")
        if not re.match(r"^https?://", url):
            return _app_error(400, "model.command.is_valid.url.app_error", "Invalid URL.")
        if body.get("method") not in ("P", "G"):
            return _app_error(400, "model.command.is_valid.method.app_error", "Invalid Method.")
        if len(str(body.get("display_name", ""))) > 64 or len(str(body.get("description", ""))) > 128:
            return _app_error(400, "model.command.is_valid.display_name.app_error", "Invalid title or description.")
        taken = {c["trigger"] for c in self.commands.values() if c["team_id"] == team_id and not c["delete_at"]}
        if trigger in taken or trigger in BUILT_IN_COMMANDS:
            return _app_error(400, "api.command.duplicate_trigger.app_error",
                              "This trigger word is already in use. Please choose another word.")
        now = self._now()
        command = {
            "id": new_id(), "token": new_id(), "create_at": now, "update_at": now, "delete_at": 0, "creator_id": uid,
            "team_id": team_id, "trigger": trigger, "method": body["method"], "username": body.get("username", ""),
            "icon_url": body.get("icon_url", ""), "auto_complete": bool(body.get("auto_complete")),
            "auto_complete_desc": body.get("auto_complete_desc", ""), "auto_complete_hint": body.get("auto_complete_hint", ""),
            "display_name": body.get("display_name", ""), "description": body.get("description", ""), "url": url,
        }
        self.commands[command["id"]] = command
        return web.json_response(command, status=201)

    async def _list_commands(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        assert uid is not None
        team_id = request.query.get("team_id", "")
        if request.query.get("custom_only") != "true":
            return _app_error(501, "fake.not_implemented", "the fake lists custom commands only")
        if team_id not in self.teams or not self._manages_commands(uid, team_id):
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        return web.json_response([c for c in self.commands.values() if c["team_id"] == team_id and not c["delete_at"]])

    async def run_command(self, user_id: str, channel_id: str, line: str, *, team_id: str | None = None,
                          root_id: str = "") -> tuple[int, Any]:
        """A person sends `/trigger text` in a channel, as their client does (`POST /commands/execute`):
        the command's URL gets the server's form; returns its status and decoded answer."""
        trigger, _, text = line.lstrip("/").partition(" ")
        channel = self.channels[channel_id]
        team = team_id if team_id is not None else channel["team_id"]
        command = next((c for c in self.commands.values() if c["team_id"] == team and c["trigger"] == trigger.lower()
                        and not c["delete_at"]), None)
        if command is None:
            raise AssertionError(f"no custom command /{trigger} on team {team}")
        hook_id = new_id()
        self._hooks[hook_id] = {"user_id": user_id, "channel_id": channel_id, "root_id": root_id, "uses": 0,
                                "until": self.clock.monotonic() + 30 * 60}
        form = {
            "channel_id": channel_id, "channel_name": channel["name"], "command": f"/{command['trigger']}",
            "response_url": f"{self.url}/hooks/commands/{hook_id}", "team_domain": self.teams.get(team, {}).get("name", ""),
            "team_id": team, "text": text.strip(), "token": command["token"],
            "trigger_id": base64.urlsafe_b64encode(uuid.uuid4().bytes * 3).decode(), "user_id": user_id,
            "user_name": self.users[user_id]["username"], "root_id": root_id,
        }
        assert self._session is not None
        async with self._session.post(command["url"], data=form, headers={
            "Authorization": f"Token {command['token']}", "Accept": "application/json"}) as resp:
            raw = await resp.read()
            status = resp.status
        answer: Any = None
        if raw:
            try:
                answer = json.loads(raw)
            except ValueError:
                answer = raw.decode(errors="replace")
        if status == 200 and isinstance(answer, dict):
            self._command_answer(self._hooks[hook_id], command, answer)
        return status, answer

    def _command_answer(self, hook: dict[str, Any], command: dict[str, Any] | None, answer: dict[str, Any]) -> None:
        text = str(answer.get("text") or "")
        if not text:
            return
        if answer.get("response_type") == "in_channel":
            creator = command["creator_id"] if command else next(iter(self.users))
            post = {"id": new_id(), "create_at": self._now(), "update_at": 0, "edit_at": 0, "delete_at": 0,
                    "user_id": creator, "channel_id": hook["channel_id"], "root_id": hook["root_id"], "message": text,
                    "type": "", "props": {"from_webhook": "true"}, "file_ids": [], "pending_post_id": "", "metadata": {}}
            self.posts[post["id"]] = post
            self.edit_history[post["id"]] = [text]
        else:
            self.ephemerals.append({"user_id": hook["user_id"], "channel_id": hook["channel_id"],
                                    "root_id": hook["root_id"], "message": text, "via": "command"})

    async def _command_hook(self, request: web.Request) -> web.Response:
        """A command's `response_url`: no session needed, the id is the secret; 5 uses in 30 minutes."""
        hook = self._hooks.get(request.match_info["hook_id"])
        body = await self._body(request)
        if hook is None or hook["uses"] >= 5 or self.clock.monotonic() > hook["until"]:
            return _app_error(400, "web.command_webhook.invalid.app_error", "Invalid webhook.")
        if not isinstance(body, dict):
            return _app_error(400, "web.command_webhook.parse.app_error", "Unable to parse incoming data.")
        hook["uses"] += 1
        self._command_answer(hook, None, body)
        return web.Response(text="ok")

    # --- internals: REST -------------------------------------------------------------------

    @web.middleware
    async def _rate_limit_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        for rule in self.rate_limits:
            if rule.times > 0 and rule.method == request.method and rule.path.search(request.path):
                rule.times -= 1
                self._record((request.method, request.path, "<429>"))
                return web.Response(
                    status=429,
                    text="limit exceeded\n",
                    content_type="text/plain",
                    headers={
                        "X-Ratelimit-Limit": "10",
                        "X-Ratelimit-Remaining": "0",
                        "X-Ratelimit-Reset": str(rule.reset),
                        "Retry-After": str(rule.reset),
                    },
                )
        if self.server_limit is None or request.path == "/api/v4/websocket":
            return await handler(request)
        admitted, headers = self.server_limit.check(request.headers.get("Authorization", ""),
                                                         self.clock.monotonic())
        if not admitted:
            self.throttled.append((request.method, request.path))
            self._record((request.method, request.path, "<429>"))
            return web.Response(status=429, text="limit exceeded\n", content_type="text/plain", headers=headers)
        response = await handler(request)
        response.headers.update(headers)
        return response

    def _record(self, entry: tuple[str, str, Any]) -> None:
        self.requests.append(entry)
        self.request_times.append(self.clock.monotonic())

    def _auth(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("bearer", "token"):
            return None
        return self.tokens.get(token.strip())

    async def _body(self, request: web.Request) -> Any:
        if not request.can_read_body:
            self._record((request.method, request.path, None))
            return None
        try:
            body = await request.json()
        except ValueError:
            body = "<invalid json>"
        self._record((request.method, request.path, body))
        return body

    async def _authed(self, request: web.Request) -> tuple[str | None, Any, web.Response | None]:
        body = await self._body(request)
        uid = self._auth(request)
        if uid is None:
            return None, body, _app_error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        if body == "<invalid json>":
            return uid, body, _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing body in request.")
        return uid, body, None

    async def _get_me(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        return err or web.json_response(self.users[uid])  # type: ignore[index]

    async def _get_user(self, request: web.Request) -> web.Response:
        _, _, err = await self._authed(request)
        if err:
            return err
        user = self.users.get(request.match_info["user_id"])
        if user is None:
            return _app_error(404, "app.user.missing_account.const", "Unable to find the user.")
        return web.json_response(user)

    async def _users_by_ids(self, request: web.Request) -> web.Response:
        _, body, err = await self._authed(request)
        if err:
            return err
        return web.json_response([self.users[u] for u in body or [] if u in self.users])

    async def _get_my_teams(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        return web.json_response([t for tid, t in self.teams.items() if uid in self.team_members[tid]])

    async def _team_by_name(self, request: web.Request) -> web.Response:
        _, _, err = await self._authed(request)
        if err:
            return err
        for team in self.teams.values():
            if team["name"] == request.match_info["name"]:
                return web.json_response(team)
        return _app_error(404, "app.team.get_by_name.missing.app_error", "Unable to find the existing team.")

    async def _rest_typing(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        self.typing.append({"user_id": uid, "channel_id": body.get("channel_id", ""), "parent_id": body.get("parent_id", ""), "via": "rest"})
        self.typing_times.append(self.clock.monotonic())
        return web.json_response({"status": "OK"})

    def _readable(self, uid: str, channel: dict[str, Any]) -> bool:
        if uid in self.members[channel["id"]]:
            return True
        return channel["type"] == "O" and uid in self.team_members.get(channel["team_id"], set())

    async def _channel_or_error(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        uid, _, err = await self._authed(request)
        if err:
            return None, err
        channel = self.channels.get(request.match_info["channel_id"])
        if channel is None:
            return None, _app_error(404, "app.channel.get.existing.app_error", "Unable to find the existing channel.")
        if not self._readable(uid, channel):  # type: ignore[arg-type]
            return None, _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        return channel, None

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel, err = await self._channel_or_error(request)
        return err or web.json_response(channel)

    async def _channel_stats(self, request: web.Request) -> web.Response:
        channel, err = await self._channel_or_error(request)
        if err:
            return err
        assert channel is not None
        return web.json_response(
            {"channel_id": channel["id"], "member_count": len(self.members[channel["id"]]), "guest_count": 0, "pinnedpost_count": 0, "files_count": 0}
        )

    async def _channel_members(self, request: web.Request) -> web.Response:
        channel, err = await self._channel_or_error(request)
        if err:
            return err
        assert channel is not None
        page, per_page = int(request.query.get("page", 0)), min(int(request.query.get("per_page", 60)), 200)
        ids = self.members[channel["id"]][page * per_page : (page + 1) * per_page]
        return web.json_response(
            [
                {"channel_id": channel["id"], "user_id": u, "roles": "channel_user", "last_viewed_at": 0, "msg_count": 0,
                 "mention_count": 0, "notify_props": {}, "last_update_at": 0}
                for u in ids
            ]
        )

    async def _channel_member(self, request: web.Request) -> web.Response:
        """One membership; 404 with the server's own error id when the user is not in the channel."""
        channel, err = await self._channel_or_error(request)
        if err:
            return err
        assert channel is not None
        user_id = request.match_info["user_id"]
        if user_id not in self.members[channel["id"]]:
            return _app_error(404, "app.channel.get_member.missing.app_error", "No channel member found for that user ID and channel ID.")
        return web.json_response({"channel_id": channel["id"], "user_id": user_id, "roles": "channel_user",
                                  "last_viewed_at": 0, "msg_count": 0, "mention_count": 0, "notify_props": {},
                                  "last_update_at": 0})

    async def _search_channels(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        team_id = request.match_info["team_id"]
        if team_id not in self.teams:
            return _app_error(404, "app.team.get.find.app_error", "Unable to find the existing team.")
        if uid not in self.team_members[team_id]:
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        term = str((body or {}).get("term", "")).lower()
        found = [
            c for c in self.channels.values()
            if c["team_id"] == team_id and c["type"] == "O" and c["delete_at"] == 0
            and (term in c["name"].lower() or term in c["display_name"].lower() or term in c["purpose"].lower())
        ]
        return web.json_response(sorted(found, key=lambda c: c["display_name"]))

    async def _direct_channel(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        if not isinstance(body, list) or len(body) != 2 or uid not in body or any(u not in self.users for u in body):
            return _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing user_ids in request body.")
        return web.json_response(self.direct_channel(body[0], body[1]), status=201)

    def _post_list(self, posts: list[dict[str, Any]]) -> dict[str, Any]:
        newest_first = sorted(posts, key=lambda p: p["create_at"], reverse=True)
        return {
            "order": [p["id"] for p in newest_first],
            "posts": {p["id"]: self.client_post(p) for p in newest_first},
            "next_post_id": "",
            "prev_post_id": "",
            "has_next": False,
        }

    async def _user_team_channels(self, request: web.Request) -> web.Response:
        """The user's channels in a team, their direct and group messages included (as the server does)."""
        uid, _, err = await self._authed(request)
        if err:
            return err
        wanted = request.match_info["user_id"]
        if wanted == "me":
            wanted = uid  # type: ignore[assignment]
        team_id = request.match_info["team_id"]
        if wanted != uid or team_id not in self.teams or uid not in self.team_members[team_id]:
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        mine = [c for c in self.channels.values() if uid in self.members[c["id"]] and c["delete_at"] == 0
                and (c["team_id"] == team_id or c["type"] in ("D", "G"))]
        return web.json_response(mine)

    async def _channel_posts(self, request: web.Request) -> web.Response:
        channel, err = await self._channel_or_error(request)
        if err:
            return err
        assert channel is not None
        if "since" in request.query:  # every post created or changed since (ms), unpaged, as the server does
            since = int(request.query["since"])
            changed = [p for p in self.posts_in(channel["id"]) if max(p["create_at"], p["update_at"]) >= since]
            return web.json_response(self._post_list(changed))
        page, per_page = int(request.query.get("page", 0)), min(int(request.query.get("per_page", 60)), 200)
        newest_first = list(reversed(self.posts_in(channel["id"])))
        return web.json_response(self._post_list(newest_first[page * per_page : (page + 1) * per_page]))

    async def _get_thread(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        post = self.posts.get(request.match_info["post_id"])
        if post is None or not self._readable(uid, self.channels[post["channel_id"]]):  # type: ignore[arg-type]
            return _app_error(404, "app.post.get.app_error", "Unable to get the post.")
        root = post["root_id"] or post["id"]
        return web.json_response(self._post_list(self.posts_in(post["channel_id"], root_id=root)))

    async def _get_post(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        post = self.posts.get(request.match_info["post_id"])
        if post is None or not self._readable(uid, self.channels[post["channel_id"]]):  # type: ignore[arg-type]
            return _app_error(404, "app.post.get.app_error", "Unable to get the post.")
        return web.json_response(self.client_post(post))

    async def _create_post(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        if not isinstance(body, dict):
            return _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing post in request body.")
        post, err = await self._create(uid, body)  # type: ignore[arg-type]
        held = time.monotonic()  # the post is in the channel; its creator hears so only later
        while err is None and time.monotonic() - held < self.post_answer_delay:  # re-read: 0 releases it
            await asyncio.sleep(0.05)
        if err is None and self.break_after_create > 0:
            self.break_after_create -= 1
            assert request.transport is not None
            request.transport.close()  # the post exists; the client never hears so
            return web.Response(status=201)
        return err or web.json_response(self.client_post(post), status=201)  # type: ignore[arg-type]

    async def _ephemeral_post(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        if uid not in self.system_admins:
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        return _app_error(501, "fake.not_implemented", "ephemeral posts from admins are not modelled")

    async def _patch_post(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        post = self.posts.get(request.match_info["post_id"])
        if post is None:
            return _app_error(404, "app.post.get.app_error", "Unable to get the post.")
        if post["user_id"] != uid:
            return _app_error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        if not isinstance(body, dict):
            return _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing post in request body.")
        message = body["message"] if body.get("message") is not None else post["message"]
        if len(message) > MAX_MESSAGE_RUNES:
            return _app_error(400, "model.post.is_valid.msg.app_error", f"Invalid Message: over {MAX_MESSAGE_RUNES} characters.")
        if len(json.dumps(body.get("props") or {}, ensure_ascii=False)) > MAX_PROPS_RUNES:
            return _app_error(400, "model.post.is_valid.props.app_error", "Invalid props")
        await self._update(post, message=message, props=body.get("props"))
        return web.json_response(self.client_post(post))

    async def _do_action(self, request: web.Request) -> web.Response:
        uid, _, err = await self._authed(request)
        if err:
            return err
        result = await self._click(uid, request.match_info["post_id"], request.match_info["action_id"])  # type: ignore[arg-type]
        if result.status != 200:
            return _app_error(result.status, result.error_id, "Unable to complete the action.")
        return web.json_response({"status": "OK", "trigger_id": ""})

    async def _create_reaction(self, request: web.Request) -> web.Response:
        uid, body, err = await self._authed(request)
        if err:
            return err
        if not isinstance(body, dict) or body.get("user_id") != uid or body.get("post_id") not in self.posts:
            return _app_error(400, "api.context.invalid_body_param.app_error", "Invalid or missing reaction in request body.")
        return web.json_response(await self._add_reaction(uid, body["post_id"], body.get("emoji_name", "")), status=201)

    # --- internals: websocket --------------------------------------------------------------

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        header_user = None
        if "Authorization" in request.headers:
            header_user = self._auth(request)
            if header_user is None:  # a bad token on the upgrade: refused before any upgrade
                return _app_error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        ws = web.WebSocketResponse(autoclose=self.answer_close)
        await ws.prepare(request)
        self.websocket_connects += 1
        conn: _Conn | None = None
        if header_user is not None:
            conn, resumed = await self._attach(ws, header_user, request)
            if not resumed:
                await self._status_online(conn)
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    req = json.loads(msg.data)
                    action, seq = req["action"], req["seq"]
                except (ValueError, KeyError, TypeError):
                    break  # the server closes on an undecodable request
                data = req.get("data") or {}
                if conn is None:
                    uid = self.tokens.get(str(data.get("token", ""))) if action == "authentication_challenge" else None
                    if uid is None:
                        break  # a bad token (or anything before auth) just closes the socket
                    # Current servers send hello before the answer to the challenge.
                    conn, resumed = await self._attach(ws, uid, request)
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": seq}))
                    if not resumed:
                        await self._status_online(conn)
                    continue
                if action == "user_typing":
                    self.typing.append({"user_id": conn.user_id, "channel_id": data.get("channel_id", ""),
                                        "parent_id": data.get("parent_id", ""), "via": "websocket"})
                    self.typing_times.append(self.clock.monotonic())
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": seq}))
                elif action == "ping":
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": seq, "data": {"text": "pong", "version": "10.5.0"}}))
                else:
                    await ws.send_str(json.dumps({"status": "FAIL", "seq_reply": seq, "error": {
                        "id": "api.web_socket_router.bad_action.app_error", "message": "invalid action", "status_code": 500}}))
            if not self.answer_close:
                await self._released.wait()  # the client's close frame stays unanswered
        finally:
            if conn is not None and conn.ws is ws:
                conn.ws = None
            if not ws.closed:
                await ws.close()
        return ws

    async def _attach(self, ws: web.WebSocketResponse, user_id: str, request: web.Request) -> tuple[_Conn, bool]:
        """Resume the connection named in the query when the server can, else start afresh with hello.

        Returns the connection and whether it was resumed (a resumed stream gets no hello).
        """
        conn = self._conns.get(request.query.get("connection_id", ""))
        try:
            wanted = int(request.query.get("sequence_number", "0"))
        except ValueError:
            wanted = 0
        if conn is not None and conn.user_id == user_id and wanted > 0:
            # Resumable when nothing was lost: the next event, or one still in the queue.
            if wanted == conn.seq_next or any(seq == wanted for seq, _ in conn.dead_queue):
                conn.ws = ws
                self.websocket_resumes += 1
                for seq, frame in list(conn.dead_queue):
                    if seq >= wanted:
                        await ws.send_str(frame)
                return conn, True
        conn = _Conn(connection_id=new_id(), user_id=user_id, ws=ws)
        self._conns[conn.connection_id] = conn
        await conn.send_event(
            "hello",
            {"connection_id": conn.connection_id, "server_version": "10.5.0.fake", "server_hostname": "fake-mattermost"},
            {"omit_users": None, "user_id": user_id, "channel_id": "", "team_id": ""},
        )
        return conn, False

    async def _status_online(self, conn: _Conn) -> None:
        await conn.send_event("status_change", {"status": "online", "user_id": conn.user_id},
                              {"omit_users": None, "user_id": conn.user_id, "channel_id": "", "team_id": ""})


async def wait_until(predicate: Any, timeout: float = PATIENCE, interval: float = 0.02) -> Any:
    """Poll `predicate` (sync) until it returns something truthy; fail after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
