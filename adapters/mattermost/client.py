"""A small typed client for Mattermost's REST v4 API and websocket, on aiohttp.

mattermostdriver was tried and dropped (synchronous, its websocket cannot start inside a running
loop, it parses JSON only for an exact `application/json`), so this speaks the wire directly:
only the calls the adapter makes, with Mattermost's own field names.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypedDict, cast
from urllib.parse import quote

import aiohttp

from adapters.base import CLOSE_TIMEOUT, read_capped
from gateway.clock import Clock
from gateway.outbound.adapter import FileTooLarge, NotVisible, PlatformError, RateLimited

from .budget import ServerLimit

log = logging.getLogger("adapters.mattermost.client")


class User(TypedDict, total=False):
    id: str
    username: str
    first_name: str
    last_name: str
    nickname: str
    is_bot: bool
    delete_at: int


class Team(TypedDict, total=False):
    id: str
    name: str
    display_name: str


class Channel(TypedDict, total=False):
    id: str
    team_id: str
    type: str  # O public, P private, D direct, G group
    name: str
    display_name: str
    header: str
    purpose: str
    last_post_at: int  # ms


class ChannelStats(TypedDict, total=False):
    channel_id: str
    member_count: int


class ChannelMember(TypedDict, total=False):
    channel_id: str
    user_id: str


class SlashCommand(TypedDict, total=False):
    id: str
    token: str
    team_id: str
    trigger: str
    url: str
    method: str
    delete_at: int


class Post(TypedDict, total=False):
    id: str
    create_at: int
    update_at: int
    edit_at: int
    delete_at: int
    user_id: str
    channel_id: str
    root_id: str
    message: str
    type: str
    props: dict[str, Any]
    file_ids: list[str]
    pending_post_id: str
    metadata: dict[str, Any]


class PostList(TypedDict, total=False):
    order: list[str]  # newest first
    posts: dict[str, Post]
    has_next: bool


class MattermostUnavailable(PlatformError):
    """The server could not be reached, or the connection broke before an answer came back."""


class MattermostAPIError(PlatformError):
    """A refused REST call, with Mattermost's own error id (`{id, message, status_code}`)."""

    def __init__(self, status: int, error_id: str, message: str, call: str) -> None:
        super().__init__(f"{call}: {status} {error_id or ''} {message}".strip())
        self.status = status
        self.error_id = error_id
        self.call = call


class MattermostNotVisible(MattermostAPIError, NotVisible):
    """403 or 404: the bot's token may not see this (a channel it is not in, or one that is gone)."""


MISSING_MEMBER = "app.channel.get_member.missing.app_error"  # the server's id for "not in this channel"


def retry_after(headers: Mapping[str, str]) -> float:
    """Seconds to wait after a 429: `Retry-After`, else `X-Ratelimit-Reset` (both in seconds)."""
    for name in ("Retry-After", "X-Ratelimit-Reset"):
        value = headers.get(name)
        if value:
            try:
                return max(float(value), 0.0)
            except ValueError:
                continue
    return 1.0


class MattermostClient:
    """REST v4 calls made with one bot token. Owns its HTTP session unless given one."""

    def __init__(self, base_url: str, token: str, *, session: aiohttp.ClientSession | None = None,
                 timeout: float = 30.0, clock: Clock | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._owns_session = session is None
        self._session = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))
        # Every REST call waits here for the server's limit, on the gateway's clock.
        self.server_limit = ServerLimit(clock)

    async def close(self) -> None:
        if self._owns_session:
            await self._session.close()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", "X-Requested-With": "XMLHttpRequest"}

    async def file(self, file_id: str, max_bytes: int, name: str) -> bytes:
        """`GET /files/{id}` with the bot token, read at most `max_bytes` (AttachmentTooLarge past it)."""
        if self._session.closed:
            raise MattermostUnavailable(f"file {name}: the adapter is stopped")
        return await read_capped(self._session, f"{self.base_url}/api/v4/files/{quote(file_id, safe='')}",
                                 self._headers(), max_bytes, name)

    async def request(self, method: str, path: str, *, body: Any = None, params: Mapping[str, Any] | None = None,
                      call: str = "") -> Any:
        """One call; JSON decoded whatever the Content-Type says. Every failure is a PlatformError:
        429 -> RateLimited, a refusal -> MattermostAPIError, no answer -> MattermostUnavailable."""
        call = call or f"{method} {path}"
        if self._session.closed:
            raise MattermostUnavailable(f"{call}: the adapter is stopped")
        try:
            return await self._request(method, path, body, params, call)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise MattermostUnavailable(f"{call}: {type(e).__name__}: {e}") from None

    async def _request(self, method: str, path: str, body: Any, params: Mapping[str, Any] | None, call: str) -> Any:
        # Paced by the limit the server announced on earlier answers (`budget`), so that the
        # gateway itself causes no 429; one that comes anyway is raised for the core to wait out.
        async with self.server_limit.call() as limited, self._session.request(
            method, f"{self.base_url}/api/v4{path}", json=body, params=params, headers=self._headers()
        ) as resp:
            limited.answered(resp.headers)
            raw = await resp.read()
            if resp.status == 429:
                raise RateLimited(retry_after(resp.headers), method=call)
            data: Any = None
            if raw:
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
            if resp.status >= 400:
                err = data if isinstance(data, dict) else {}
                kind = MattermostNotVisible if resp.status in (403, 404) else MattermostAPIError
                raise kind(resp.status, str(err.get("id", "")), str(err.get("message", "")), call)
            return data

    # --- users and teams -------------------------------------------------------------------

    async def me(self) -> User:
        return cast(User, await self.request("GET", "/users/me"))

    async def user(self, user_id: str) -> User:
        return cast(User, await self.request("GET", f"/users/{user_id}", call="GET /users/{id}"))

    async def users_by_ids(self, user_ids: list[str]) -> list[User]:
        if not user_ids:
            return []
        return cast(list[User], await self.request("POST", "/users/ids", body=user_ids))

    async def my_teams(self) -> list[Team]:
        return cast(list[Team], await self.request("GET", "/users/me/teams"))

    async def typing(self, user_id: str, channel_id: str, parent_id: str = "") -> None:
        await self.request("POST", f"/users/{user_id}/typing", body={"channel_id": channel_id, "parent_id": parent_id},
                           call="POST /users/{id}/typing")

    # --- slash commands --------------------------------------------------------------------

    async def team_commands(self, team_id: str) -> list[SlashCommand]:
        """The team's custom slash commands, tokens included (needs manage_slash_commands)."""
        return cast(list[SlashCommand], await self.request(
            "GET", "/commands", params={"team_id": team_id, "custom_only": "true"}, call="GET /commands"))

    async def create_command(self, command: Mapping[str, Any]) -> SlashCommand:
        return cast(SlashCommand, await self.request("POST", "/commands", body=dict(command), call="POST /commands"))

    async def command_response(self, response_url: str, answer: Mapping[str, Any]) -> None:
        """An answer to a slash command on its `response_url` (the server's own, checked by the caller):
        the URL is the credential, so the bot token is not sent."""
        if self._session.closed:
            raise MattermostUnavailable("POST response_url: the adapter is stopped")
        try:
            async with self._session.post(response_url, json=dict(answer)) as resp:
                await resp.read()
                if resp.status == 429:
                    raise RateLimited(retry_after(resp.headers), method="POST response_url")
                if resp.status >= 400:
                    raise MattermostAPIError(resp.status, "", "the command's response_url refused the answer",
                                             "POST response_url")
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise MattermostUnavailable(f"POST response_url: {type(e).__name__}") from None

    # --- channels --------------------------------------------------------------------------

    async def channel(self, channel_id: str) -> Channel:
        return cast(Channel, await self.request("GET", f"/channels/{channel_id}", call="GET /channels/{id}"))

    async def channel_stats(self, channel_id: str) -> ChannelStats:
        return cast(ChannelStats, await self.request("GET", f"/channels/{channel_id}/stats",
                                                     call="GET /channels/{id}/stats"))

    async def channel_members(self, channel_id: str, *, page: int = 0, per_page: int = 60) -> list[ChannelMember]:
        return cast(list[ChannelMember], await self.request(
            "GET", f"/channels/{channel_id}/members", params={"page": page, "per_page": per_page},
            call="GET /channels/{id}/members"))

    async def is_channel_member(self, channel_id: str, user_id: str) -> bool:
        """Whether the server says `user_id` is in the channel now (`GET /channels/{id}/members/{user_id}`):
        False only on its 404 "not a member" (`MISSING_MEMBER`); any other refusal (403: the bot may not
        read the channel) is raised, so a caller that cannot be told fails closed and can say why."""
        try:
            await self.request("GET", f"/channels/{quote(channel_id, safe='')}/members/{quote(user_id, safe='')}",
                               call="GET /channels/{id}/members/{user_id}")
        except MattermostNotVisible as e:
            if e.status == 404 and e.error_id == MISSING_MEMBER:
                return False
            raise
        return True

    async def search_team_channels(self, team_id: str, term: str) -> list[Channel]:
        return cast(list[Channel], await self.request(
            "POST", f"/teams/{team_id}/channels/search", body={"term": term}, call="POST /teams/{id}/channels/search"))

    async def direct_channel(self, user_a: str, user_b: str) -> Channel:
        return cast(Channel, await self.request("POST", "/channels/direct", body=[user_a, user_b]))

    async def channel_posts(self, channel_id: str, *, per_page: int = 60) -> PostList:
        return cast(PostList, await self.request(
            "GET", f"/channels/{channel_id}/posts", params={"page": 0, "per_page": per_page},
            call="GET /channels/{id}/posts"))

    async def my_channels(self, user_id: str, team_id: str) -> list[Channel]:
        """The user's channels in a team, with its direct and group messages."""
        return cast(list[Channel], await self.request(
            "GET", f"/users/{user_id}/teams/{team_id}/channels", call="GET /users/{id}/teams/{id}/channels"))

    async def posts_since(self, channel_id: str, since_ms: int) -> PostList:
        """Every post of the channel created or changed since `since_ms` (the server does not page these)."""
        return cast(PostList, await self.request(
            "GET", f"/channels/{channel_id}/posts", params={"since": since_ms}, call="GET /channels/{id}/posts?since"))

    # --- posts -----------------------------------------------------------------------------

    async def upload_file(self, channel_id: str, name: str, data: bytes, media_type: str) -> str:
        """`POST /files`, multipart (channel_id and one file): the file's id, for a post's `file_ids`.
        Nobody sees the file until a post names it."""
        if self._session.closed:
            raise MattermostUnavailable(f"upload {name}: the adapter is stopped")
        form = aiohttp.FormData()
        form.add_field("channel_id", channel_id)
        form.add_field("files", data, filename=name, content_type=media_type)
        try:
            async with self.server_limit.call() as limited, self._session.post(
                    f"{self.base_url}/api/v4/files", data=form, headers=self._headers()) as resp:
                limited.answered(resp.headers)
                answer = await resp.json(content_type=None) if resp.status < 500 else {}
                if resp.status == 429:
                    raise RateLimited(retry_after(resp.headers), method="POST /files")
                if resp.status == 413:  # over this server's FileSettings.MaxFileSize
                    raise FileTooLarge(f"{name}: over this server's maximum file size, its admin's "
                                       "FileSettings.MaxFileSize: 100 MB unless changed")
                if resp.status >= 400:
                    err = answer if isinstance(answer, dict) else {}
                    raise MattermostAPIError(resp.status, str(err.get("id", "")), str(err.get("message", "")),
                                             "POST /files")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise MattermostUnavailable(f"POST /files: {type(e).__name__}: {e}") from None
        return str(answer["file_infos"][0]["id"])

    async def create_post(self, channel_id: str, message: str, *, root_id: str = "", props: dict[str, Any] | None = None,
                          pending_post_id: str = "", file_ids: list[str] | None = None) -> Post:
        """Create a post. A connection lost mid-call is retried once with the same
        `pending_post_id`, which the server answers with the post it already made."""
        body: dict[str, Any] = {"channel_id": channel_id, "message": message, "root_id": root_id,
                                "pending_post_id": pending_post_id or f"{int(time.time() * 1000)}"}
        if props is not None:
            body["props"] = props
        if file_ids:
            body["file_ids"] = file_ids
        try:
            return cast(Post, await self.request("POST", "/posts", body=body))
        except MattermostUnavailable as e:
            if self._session.closed:
                raise
            log.info("create post: %s; retrying once with the same pending_post_id", e)
            return cast(Post, await self.request("POST", "/posts", body=body))

    async def patch_post(self, post_id: str, *, message: str | None = None, props: dict[str, Any] | None = None) -> Post:
        body: dict[str, Any] = {}
        if message is not None:
            body["message"] = message
        if props is not None:
            body["props"] = props
        return cast(Post, await self.request("PUT", f"/posts/{post_id}/patch", body=body, call="PUT /posts/{id}/patch"))

    async def post(self, post_id: str) -> Post:
        return cast(Post, await self.request("GET", f"/posts/{post_id}", call="GET /posts/{id}"))

    async def thread(self, post_id: str) -> PostList:
        return cast(PostList, await self.request("GET", f"/posts/{post_id}/thread", call="GET /posts/{id}/thread"))

    # --- websocket -------------------------------------------------------------------------

    async def websocket(self, *, connection_id: str = "", sequence_number: int = 0,
                        heartbeat: float = 30.0) -> aiohttp.ClientWebSocketResponse:
        """Open `/api/v4/websocket` with Bearer auth on the upgrade, resuming when told how.

        Closing waits CLOSE_TIMEOUT, not aiohttp's 10 s, for the server to answer the close
        frame: a server that does not answer must not hold up a stop or a reload.
        """
        url = self.base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/api/v4/websocket"
        params = {"connection_id": connection_id, "sequence_number": str(sequence_number)} if connection_id else None
        try:
            return await self._session.ws_connect(url, params=params, headers=self._headers(), heartbeat=heartbeat,
                                                  timeout=aiohttp.ClientWSTimeout(ws_close=CLOSE_TIMEOUT))
        except aiohttp.WSServerHandshakeError as e:
            raise MattermostAPIError(e.status, "", "websocket upgrade refused", "GET /websocket") from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise MattermostUnavailable(f"GET /websocket: {type(e).__name__}: {e}") from None


class SequenceGap(Exception):
    """The server's event stream skipped a sequence number: reconnect to resume or resync."""


class MattermostSocket:
    """The event stream of one websocket, across reconnects.

    The server numbers its events (`seq`); a reconnect that names the last connection and the
    next unprocessed number gets the missed events replayed. `next_seq` advances only when the
    caller says an event is processed, so an event lost to a drop mid-processing is replayed.
    """

    def __init__(self, client: MattermostClient) -> None:
        self._client = client
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self.connection_id = ""
        self.next_seq = 0
        self._action_seq = 0
        # Set when the server started a new stream where we asked to resume one: events sent
        # meanwhile are lost to the websocket, and the caller catches up over REST.
        self.new_stream = False

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    async def connect(self) -> None:
        self._ws = await self._client.websocket(connection_id=self.connection_id, sequence_number=self.next_seq)
        self._action_seq = 0

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Events in order, each checked against the sequence. Ends when the socket closes."""
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                if msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                    break
                continue
            try:
                frame = json.loads(msg.data)
            except ValueError:
                log.warning("websocket: undecodable frame dropped")
                continue
            if not isinstance(frame, dict):
                continue
            if "seq_reply" in frame or "event" not in frame:
                if frame.get("status") == "FAIL":
                    log.info("websocket action failed: %s", (frame.get("error") or {}).get("id", ""))
                continue
            seq = frame.get("seq")
            if frame["event"] == "hello":
                new_id = str((frame.get("data") or {}).get("connection_id", ""))
                if self.connection_id and new_id != self.connection_id:
                    log.warning("websocket: the server could not resume the stream; catching up over REST")
                    self.new_stream = True
                self.connection_id = new_id
                self.next_seq = 0
            if seq != self.next_seq:
                raise SequenceGap(f"expected seq {self.next_seq}, got {seq}")
            yield frame

    def processed(self, frame: Mapping[str, Any]) -> None:
        self.next_seq = int(frame["seq"]) + 1

    async def send_action(self, action: str, data: dict[str, Any]) -> bool:
        """Send a client action (e.g. `user_typing`); False when there is no live socket."""
        if not self.connected:
            return False
        assert self._ws is not None
        self._action_seq += 1
        try:
            await self._ws.send_str(json.dumps({"action": action, "seq": self._action_seq, "data": data}))
        except (ConnectionError, RuntimeError):
            return False
        return True

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None and not ws.closed:
            await ws.close()
