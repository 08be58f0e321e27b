"""A fake Telegram Bot API on loopback, speaking the wire protocol python-telegram-bot speaks.

Requests arrive at `/bot<token>/<method>`, form-encoded as python-telegram-bot sends them
(strings as is, everything else JSON-encoded: numbers, booleans, nested objects) or as JSON.
Replies are `{"ok": true, "result": ...}` or `{"ok": false, "error_code", "description",
"parameters"}`. Shapes follow the Bot API spec (PaulSonOfLars/telegram-bot-api-spec api.json).

What a test gets:
- a queue of updates it pushes (`push_message`, `push_callback`, `push_update`) served by a
  long-polling `getUpdates` that honours `offset` (confirming earlier updates), `limit` and
  `timeout`, or delivered to a webhook set with `setWebhook` (with its secret header);
- the chat as a user sees it: every message the bot sent, with its edit history, keyboard and
  topic (`sent`, `messages_in`), and every callback answer (`answers`);
- every call recorded (`calls`, `calls_to`) and faults on demand (`fail_next`: a 429 with
  `retry_after`, or any other error);
- Telegram's budgets enforced: a send or edit over one a second in a chat, twenty a minute in a
  group or thirty a second across the bot is refused with 429 and `retry_after`, as Telegram
  does (`budget_scale` shortens every period for tests that would otherwise wait minutes;
  `throttled` lists the calls refused). A call counts when it succeeds, at its arrival on `clock`
  (a test that runs the gateway on a `ManualClock` gives the fake the same one).

The checks real Telegram makes that an adapter must survive are made here too: HTML parse mode
rejects unknown or unbalanced tags with 400 "can't parse entities"; editing to identical
content is 400 "message is not modified"; `callback_data` over 64 bytes is refused; a reply
in a forum with an unknown `message_thread_id` is refused; texts over 4096 characters are refused.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from gateway.clock import Clock
from tests.fakes.inflight import InFlight
from tests.support.patience import PATIENCE

JSON = dict[str, Any]

# Parameters that are strings on the wire and must never be JSON-decoded ("123" stays text).
_STRING_PARAMS = frozenset(
    {"text", "parse_mode", "url", "secret_token", "callback_query_id", "action", "data", "ip_address", "query"}
)
# The tags Telegram's HTML parse mode knows (https://core.telegram.org/bots/api#html-style).
_HTML_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre",
     "blockquote", "tg-emoji", "tg-time"}
)
MAX_TEXT = 4096
# The methods that count against the budgets, and the budgets: (limit, seconds) per chat, per group, per bot.
_BUDGETED = frozenset({"sendMessage", "editMessageText", "editMessageReplyMarkup", "sendPhoto", "sendDocument",
                       "sendAudio", "sendVoice", "sendMediaGroup"})
# Uploads (core.telegram.org/bots/api#sending-files): a photo up to 10 MB, another file up to 50 MB;
# a caption up to 1,024 characters after entities are parsed; an album of 2-10 items of one family.
MAX_PHOTO_BYTES, MAX_FILE_BYTES, MAX_CAPTION = 10 * 1024 * 1024, 50 * 1024 * 1024, 1024
BUDGETS = {"chat": (1, 1.0), "group": (20, 60.0), "bot": (30, 1.0)}


class ApiError(Exception):
    """An error reply of the Bot API."""

    def __init__(self, code: int, description: str, parameters: JSON | None = None) -> None:
        super().__init__(description)
        self.code, self.description, self.parameters = code, description, parameters


@dataclass
class Call:
    """One request the fake received, parameters decoded as the Bot API reads them."""

    method: str
    params: JSON
    at: float = field(default_factory=time.monotonic)


@dataclass
class ChatMessage:
    """A message in a fake chat, as a user would see it."""

    chat_id: int
    message_id: int
    sender: JSON  # a User
    text: str  # the visible text (HTML parsed away)
    raw: str  # what was sent, before parsing
    parse_mode: str | None = None
    thread_id: int | None = None
    reply_markup: JSON | None = None
    edits: list[str] = field(default_factory=list)  # visible texts of earlier versions, oldest first
    files: list[tuple[str, str, bytes]] = field(default_factory=list)  # (photo|document|audio|voice, name, bytes)
    date: int = field(default_factory=lambda: int(time.time()))

    @property
    def from_bot(self) -> bool:
        return bool(self.sender.get("is_bot"))

    @property
    def buttons(self) -> list[JSON]:
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [b for row in rows for b in row]


@dataclass
class FakeChat:
    id: int
    type: str  # private | group | supergroup | channel
    title: str | None = None
    username: str | None = None
    first_name: str | None = None
    is_forum: bool = False
    description: str | None = None
    member_count: int = 2
    admins: list[JSON] = field(default_factory=list)  # ChatMember objects
    members: set[int] = field(default_factory=set)  # user ids in the chat besides its admins (getChatMember)
    topics: set[int] = field(default_factory=set)

    def as_chat(self) -> JSON:
        chat: JSON = {"id": self.id, "type": self.type}
        for key in ("title", "username", "first_name"):
            if getattr(self, key) is not None:
                chat[key] = getattr(self, key)
        if self.is_forum:
            chat["is_forum"] = True
        return chat


class _TelegramHtml(HTMLParser):
    """Validates Telegram HTML the way the Bot API does and extracts the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.error:
            return
        if tag not in _HTML_TAGS:
            self.error = f'Unsupported start tag "{tag}"'
            return
        if tag == "a" and not dict(attrs).get("href"):
            self.error = "Can't find end of a URL"  # close enough to what Telegram says
            return
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.error:
            self.error = f'Unsupported start tag "{tag}/"'

    def handle_endtag(self, tag: str) -> None:
        if self.error:
            return
        if not self.stack:
            self.error = f'Unexpected end tag "{tag}"'
        elif self.stack[-1] != tag:
            self.error = f'Can\'t find end tag corresponding to start tag "{self.stack[-1]}"'
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(raw: str) -> str:
    """The visible text of a Telegram-HTML message, or ApiError 400 as Telegram would answer."""
    # Telegram only knows &lt; &gt; &amp; &quot; and numeric references; a bare '<' that does
    # not open a tag is a parse error too.
    for i, ch in enumerate(raw):
        if ch == "&":
            rest = raw[i : i + 10]
            if not (rest.startswith(("&lt;", "&gt;", "&amp;", "&quot;", "&#"))):
                raise ApiError(400, f"Bad Request: can't parse entities: Unsupported entity at byte offset {i}")
        if ch == "<" and not (raw[i + 1 : i + 2].isalpha() or raw[i + 1 : i + 2] == "/"):
            raise ApiError(400, f"Bad Request: can't parse entities: Unexpected end of name token at byte offset {i}")
    parser = _TelegramHtml()
    parser.feed(raw)
    parser.close()
    if parser.error is None and parser.stack:
        parser.error = f'Can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
    if parser.error is None and parser.rawdata:  # something HTMLParser could not consume
        parser.error = "Unexpected end of name token"
    if parser.error:
        raise ApiError(400, f"Bad Request: can't parse entities: {parser.error} at byte offset 0")
    return html.unescape("".join(parser.text))


def _decode_form(form: dict[str, str]) -> JSON:
    """Form values as the Bot API reads them: strings stay strings, the rest is JSON."""
    out: JSON = {}
    for key, value in form.items():
        if key in _STRING_PARAMS:
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value  # e.g. chat_id "@channelusername"
    return out


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class FakeTelegram:
    """One fake Bot API server for one bot (the token in the URL must match)."""

    def __init__(self, token: str = "123456:TEST-fake-token", *, bot_id: int = 123456,
                 bot_username: str = "gateway_bot", bot_name: str = "Gateway", budget_scale: float = 1.0,
                 clock: Clock | None = None) -> None:
        self.token = token
        self.clock = clock or Clock()  # when calls arrive (`Call.at`) and what the budgets count in
        self.budgets = {name: (limit, per * budget_scale) for name, (limit, per) in BUDGETS.items()}
        self.drafts: dict[tuple[int, int], list[str]] = {}  # (chat, draft id) -> every text the draft showed
        self.throttled: list[Call] = []  # calls refused with 429 for going over a budget
        self._counted: dict[tuple[str, str], list[float]] = {}  # budget scope -> when its calls arrived
        self.bot_user: JSON = {"id": bot_id, "is_bot": True, "first_name": bot_name, "username": bot_username}
        self.calls: list[Call] = []
        self.commands: dict[str, list[tuple[str, str]]] = {}  # setMyCommands, by scope type
        self.chats: dict[int, FakeChat] = {}
        self.messages: dict[tuple[int, int], ChatMessage] = {}
        self.answers: dict[str, JSON] = {}  # callback_query_id -> answerCallbackQuery params
        self.callbacks: dict[str, JSON] = {}  # callback_query_id -> the CallbackQuery pushed
        self.webhook: JSON | None = None  # {"url", "secret_token", "allowed_updates"}
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status)
        self.confirmed_through = 0  # the highest update_id a getUpdates offset confirmed
        self._updates: list[JSON] = []
        self._update_ids = itertools.count(1000)
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._callback_ids = itertools.count(1)
        self._faults: list[tuple[str, int, str, JSON | None]] = []
        self._changed = asyncio.Event()  # replaced after each notification; waiters hold the old one
        self._poll_generation = 0
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._webhook_task: asyncio.Task[None] | None = None
        self.in_flight = InFlight(listening=("/getUpdates",))
        self._webhook_kick = asyncio.Event()
        self.files: dict[str, bytes] = {}  # file_id → contents: getFile, then /file/bot<token>/<file_path>
        # What a send takes (core.telegram.org/bots/api#sending-files); over it the Bot API answers 413
        # "Request Entity Too Large" (JSON, as api.telegram.org does). Lower them to test a smaller cap.
        self.max_photo_bytes, self.max_file_bytes = MAX_PHOTO_BYTES, MAX_FILE_BYTES
        self.downloads: list[str] = []  # file paths downloaded with the right token
        # A share of getUpdates long polls cut, as a proxy or a flaky network does: answered 502
        # (an HTML page, not the Bot API's JSON) or, after the poll took its updates, closed
        # unanswered. Either way the updates stay queued: only a later `offset` confirms them.
        # The share is kept exactly, not drawn at random: a loaded machine polls fewer times in a test's
        # span, and a random share of few polls was sometimes one cut (the drops test's own check failed).
        self.poll_cut_share = 0.0
        self.polls_cut = 0
        self._cut_credit = 0.0

    # --- server lifecycle ------------------------------------------------------------------

    def busy(self) -> list[str]:
        """What the fake is still doing (`tests.support.settled`): calls it is answering (a long
        poll is the bot listening, not counted) and, polled, updates no offset confirmed yet."""
        found = [f"telegram: {self.in_flight.calls} calls in flight"] if self.in_flight.calls else []
        if self.webhook is None and self._updates:  # getUpdates drops what its offset confirmed
            found.append("telegram: updates not confirmed by an offset")
        return found

    async def start(self) -> FakeTelegram:
        app = web.Application(client_max_size=8 * 1024 * 1024, middlewares=[self.in_flight.middleware])
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._webhook_task = asyncio.create_task(self._deliver_webhooks())
        return self

    async def stop(self) -> None:
        if self._webhook_task:
            self._webhook_task.cancel()
            await asyncio.gather(self._webhook_task, return_exceptions=True)
        self._poll_generation += 1  # wake long polls so the runner can close promptly
        self._notify()
        if self._runner:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        """What `base_url` / a binding's `api_url` should be: the token is appended to it."""
        return f"http://127.0.0.1:{self._port}/bot"

    @property
    def bot_id(self) -> int:
        return int(self.bot_user["id"])

    @property
    def bot_username(self) -> str:
        return str(self.bot_user["username"])

    # --- the world a test sets up ----------------------------------------------------------

    def add_chat(self, chat_id: int, type: str, **kw: Any) -> FakeChat:
        chat = FakeChat(id=chat_id, type=type, **kw)
        self.chats[chat_id] = chat
        return chat

    def private_chat(self, user: JSON) -> FakeChat:
        """The private chat between `user` and the bot (its id is the user's id)."""
        return self.chats.get(user["id"]) or self.add_chat(user["id"], "private", first_name=user["first_name"],
                                                           username=user.get("username"))

    def add_topic(self, chat_id: int, name: str, creator: JSON) -> int:
        """Create a forum topic: its id is the id of the `forum_topic_created` service message."""
        chat = self.chats[chat_id]
        assert chat.is_forum, "topics exist only in forum supergroups"
        service = self._store(chat_id, creator, "", thread_id=None)
        chat.topics.add(service.message_id)
        service.thread_id = service.message_id
        return service.message_id

    @staticmethod
    def user(user_id: int, first_name: str, username: str | None = None, *, last_name: str | None = None,
             is_bot: bool = False) -> JSON:
        u: JSON = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
        if last_name:
            u["last_name"] = last_name
        if username:
            u["username"] = username
        return u

    def admin_member(self, user: JSON, *, owner: bool = False) -> JSON:
        """A ChatMember as getChatAdministrators returns it (owner or administrator)."""
        if owner:
            return {"status": "creator", "user": user, "is_anonymous": False}
        rights = ("can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
                  "can_promote_members", "can_change_info", "can_invite_users", "can_post_stories",
                  "can_edit_stories", "can_delete_stories")
        return {"status": "administrator", "user": user, "can_be_edited": False, "is_anonymous": False,
                **{r: r in {"can_manage_chat", "can_delete_messages"} for r in rights}}

    # --- updates a test pushes ------------------------------------------------------------

    def push_update(self, kind: str, payload: JSON) -> int:
        """Queue an update of any kind; returns its update_id."""
        update_id = next(self._update_ids)
        self._updates.append({"update_id": update_id, kind: payload})
        self._notify()
        return update_id

    def push_raw(self, payload: JSON, *, numbered: bool = True) -> int | None:
        """Queue an update as given (to test malformed input), numbered in sequence unless told not to."""
        update_id = next(self._update_ids) if numbered else None
        self._updates.append({"update_id": update_id, **payload} if numbered else payload)
        self._notify()
        return update_id

    def push_message(self, chat_id: int, sender: JSON, text: str, *, entities: list[JSON] | None = None,
                     thread_id: int | None = None, reply_to: ChatMessage | None = None,
                     caption: bool = False, extra: JSON | None = None) -> tuple[int, ChatMessage]:
        """A person writes in a chat. Returns (update_id, the stored message).

        In a forum, a message in a topic carries `message_thread_id` and `is_topic_message`, and,
        as real Telegram does, a `reply_to_message` pointing at the topic's creation message when
        it is not a reply to anything else.
        """
        chat = self.chats[chat_id]
        msg = self._store(chat_id, sender, text, thread_id=thread_id)
        payload = self._message_json(msg)
        if caption:
            payload.pop("text")
            payload["caption"] = text
            payload["document"] = {"file_id": "F1", "file_unique_id": "U1", "file_name": "report.pdf",
                                   "mime_type": "application/pdf", "file_size": 1234}
        if entities:
            payload["caption_entities" if caption else "entities"] = entities
        if chat.is_forum and thread_id is not None:
            payload["message_thread_id"] = thread_id
            payload["is_topic_message"] = True
            if reply_to is None:
                reply_to = self.messages[(chat_id, thread_id)]
        if reply_to is not None:
            payload["reply_to_message"] = self._message_json(reply_to)
            if reply_to.message_id in chat.topics:
                payload["reply_to_message"]["forum_topic_created"] = {"name": "topic", "icon_color": 7322096}
                payload["reply_to_message"].pop("text", None)
        payload.update(extra or {})
        return self.push_update("message", payload), msg

    def add_file(self, data: bytes) -> str:
        """A file people can send; returns its file_id (`document` / `photo` payloads name it)."""
        file_id = f"BQAC{len(self.files) + 1:04d}"
        self.files[file_id] = data
        return file_id

    async def _api_getFile(self, p: JSON) -> JSON:
        data = self.files.get(str(p["file_id"]))
        if data is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if len(data) > 20 * 1024 * 1024:
            raise ApiError(400, "Bad Request: file is too big")
        return {"file_id": p["file_id"], "file_unique_id": f"u{p['file_id']}", "file_size": len(data),
                "file_path": f"documents/{p['file_id']}"}

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        file_id = request.match_info["path"].rsplit("/", 1)[-1]
        if file_id not in self.files:
            return web.Response(status=404, text="Not Found")
        self.downloads.append(request.match_info["path"])
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    def push_edit(self, message: ChatMessage, new_text: str) -> int:
        message.edits.append(message.text)
        message.text = message.raw = new_text
        payload = self._message_json(message)
        payload["edit_date"] = int(time.time())
        return self.push_update("edited_message", payload)

    def push_callback(self, sender: JSON, message: ChatMessage, data: str) -> str:
        """A person presses an inline button under `message`; returns the callback_query id."""
        query_id = f"{next(self._callback_ids)}{sender['id']}"
        query = {"id": query_id, "from": sender, "message": self._message_json(message),
                 "chat_instance": f"ci{message.chat_id}", "data": data}
        self.callbacks[query_id] = query
        self.push_update("callback_query", query)
        return query_id

    def mention(self, text: str, target: str | None = None) -> list[JSON]:
        """A `mention` entity for `@target` (default: the bot) in `text`, offsets in UTF-16 units."""
        handle = "@" + (target or self.bot_username)
        start = text.index(handle)
        return [{"type": "mention", "offset": utf16_len(text[:start]), "length": utf16_len(handle)}]

    # --- what a test asserts on ----------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def sent(self, chat_id: int | None = None) -> list[ChatMessage]:
        """Messages the bot sent (in one chat, or everywhere), oldest first."""
        return [m for (c, _), m in self.messages.items() if m.from_bot and (chat_id is None or c == chat_id)]

    def fail_next(self, method: str, *, error_code: int = 429, description: str | None = None,
                  retry_after: int | None = None, times: int = 1) -> None:
        """Make the next `times` calls of `method` fail as Telegram would."""
        params: JSON | None = {"retry_after": retry_after} if retry_after is not None else None
        if description is None:
            description = (f"Too Many Requests: retry after {retry_after}" if error_code == 429
                           else "Bad Request: injected failure")
        self._faults.extend([(method, error_code, description, params)] * times)

    @property
    def pending_updates(self) -> list[JSON]:
        return list(self._updates)

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = PATIENCE, what: str = "condition") -> Any:
        """Poll `predicate` until it returns something truthy (no fixed sleeps in tests)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.01)

    # --- the HTTP side --------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(ApiError(401, "Unauthorized"))
        method = request.match_info["method"]
        params = await _read_params(request)
        self.calls.append(Call(method, params, at=self.clock.monotonic()))
        for i, (name, code, description, parameters) in enumerate(self._faults):
            if name == method:
                del self._faults[i]
                return _error(ApiError(code, description, parameters))
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(ApiError(404, "Not Found"))
        arrived = self.clock.monotonic()
        scopes = self._scopes(method, params)
        wait = self._over_budget(scopes, arrived)
        if wait is not None:
            self.throttled.append(self.calls[-1])
            return _error(ApiError(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait}))
        cut = False
        if method == "getUpdates" and self.poll_cut_share:
            self._cut_credit += self.poll_cut_share
            cut = self._cut_credit >= 1.0
        if cut:
            self._cut_credit -= 1.0
        if cut and self.polls_cut % 2 == 0:  # the two ways alternate: a 502 page first, then a closed poll
            self.polls_cut += 1
            return web.Response(status=502, text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                                content_type="text/html")
        try:
            result = await handler(params)
        except ApiError as e:
            return _error(e)
        except (KeyError, TypeError, ValueError) as e:
            return _error(ApiError(400, f"Bad Request: {type(e).__name__}: {e}"))
        for scope in scopes:
            self._counted.setdefault(scope, []).append(arrived)
        if cut:
            self.polls_cut += 1
            assert request.transport is not None
            request.transport.close()  # the poll's answer never reaches the bot
            return web.Response(status=200)
        return web.json_response({"ok": True, "result": result})

    def _scopes(self, method: str, p: JSON) -> list[tuple[str, str]]:
        if method == "sendMessageDraft":
            return [("bot", "")]
        if method not in _BUDGETED or "chat_id" not in p:
            return []
        chat = str(p["chat_id"])
        return [("chat", chat), ("bot", "")] + ([("group", chat)] if chat.startswith("-") else [])

    def _over_budget(self, scopes: list[tuple[str, str]], now: float) -> int | None:
        """Seconds to wait (whole, at least 1, as Telegram says it) when a call would go over a budget."""
        for scope in scopes:
            limit, per = self.budgets[scope[0]]
            times = self._counted.get(scope, [])
            recent = [t for t in times if t > now - per]
            self._counted[scope] = recent
            if len(recent) >= limit:
                return max(1, int(recent[-limit] + per - now + 0.999))
        return None

    # --- Bot API methods ------------------------------------------------------------------

    async def _api_getMe(self, p: JSON) -> JSON:
        return {**self.bot_user, "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False, "can_connect_to_business": False, "has_main_web_app": False}

    async def _api_deleteWebhook(self, p: JSON) -> bool:
        self.webhook = None
        if p.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _api_setWebhook(self, p: JSON) -> bool:
        url = p["url"]
        if not url:
            self.webhook = None
            return True
        secret = p.get("secret_token")
        if secret is not None and not (1 <= len(secret) <= 256 and all(c.isalnum() or c in "_-" for c in secret)):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        self.webhook = {"url": url, "secret_token": secret, "allowed_updates": p.get("allowed_updates")}
        if p.get("drop_pending_updates"):
            self._updates.clear()
        self._webhook_kick.set()
        return True

    async def _api_setMyCommands(self, p: JSON) -> bool:
        """Bot API rules: 1-32 characters of a-z, 0-9 and _, a 1-256 character description, at most 100."""
        commands = p["commands"]
        if not isinstance(commands, list) or len(commands) > 100:
            raise ApiError(400, "Bad Request: commands must be an array of at most 100 BotCommand")
        for c in commands:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", c["command"]):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(c["description"]) <= 256:
                raise ApiError(400, "Bad Request: command description is too long or empty")
        scope = (p.get("scope") or {"type": "default"})["type"]
        self.commands[scope] = [(c["command"], c["description"]) for c in commands]
        return True

    async def _api_getWebhookInfo(self, p: JSON) -> JSON:
        return {"url": (self.webhook or {}).get("url", ""), "has_custom_certificate": False,
                "pending_update_count": len(self._updates)}

    async def _api_getUpdates(self, p: JSON) -> list[JSON]:
        if self.webhook:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                "use deleteWebhook to delete the webhook first")
        offset = int(p.get("offset") or 0)
        limit = max(1, min(100, int(p.get("limit") or 100)))
        timeout = max(0, int(p.get("timeout") or 0))
        allowed = p.get("allowed_updates")
        if offset > 0:
            self.confirmed_through = max(self.confirmed_through, offset - 1)
            self._updates = [u for u in self._updates if _update_id(u) >= offset]
        self._poll_generation += 1
        self._notify()  # an older poll is terminated by this one, as on Telegram
        generation = self._poll_generation
        deadline = time.monotonic() + timeout
        while True:
            changed = self._changed
            ready = [u for u in self._updates if _wanted(u, allowed)][:limit]
            if ready or time.monotonic() >= deadline:
                return ready
            if self._poll_generation != generation:
                raise ApiError(409, "Conflict: terminated by other getUpdates request; "
                                    "make sure that only one bot instance is running")
            try:
                await asyncio.wait_for(changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                pass

    async def _api_sendMessage(self, p: JSON) -> JSON:
        chat = self._chat(p["chat_id"])
        thread_id = p.get("message_thread_id")
        if thread_id is not None and chat.is_forum and thread_id not in chat.topics:
            raise ApiError(400, "Bad Request: message thread not found")
        visible = self._visible(p)
        markup = self._markup(p.get("reply_markup"))
        msg = self._store(chat.id, self.bot_user, visible, thread_id=thread_id if chat.is_forum else None,
                          raw=p["text"], parse_mode=p.get("parse_mode"), reply_markup=markup)
        return self._message_json(msg)

    def _upload(self, p: JSON, field: str, value: Any, kind: str) -> tuple[str, bytes]:
        """The file a send names: a multipart part (its field, or `attach://<part>`), within its kind's limit."""
        files = p.get("__files__", {})
        part = value[len("attach://"):] if isinstance(value, str) and value.startswith("attach://") else field
        if part not in files:
            raise ApiError(400, f"Bad Request: there is no {kind} in the request")
        name, data = files[part]
        if len(data) > (self.max_photo_bytes if kind == "photo" else self.max_file_bytes):
            raise ApiError(413, "Request Entity Too Large")
        return name, data

    def _caption(self, p: JSON) -> str:
        raw = p.get("caption") or ""
        visible = parse_html(raw) if raw and (p.get("parse_mode") or "").lower() == "html" else raw
        if len(visible) > MAX_CAPTION:
            raise ApiError(400, "Bad Request: message caption is too long")
        return visible

    def _file_message(self, p: JSON, files: list[tuple[str, str, bytes]], caption: str) -> ChatMessage:
        chat = self._chat(p["chat_id"])
        thread_id = p.get("message_thread_id")
        if thread_id is not None and chat.is_forum and thread_id not in chat.topics:
            raise ApiError(400, "Bad Request: message thread not found")
        msg = self._store(chat.id, self.bot_user, caption, thread_id=thread_id if chat.is_forum else None,
                          raw=p.get("caption") or "", parse_mode=p.get("parse_mode"))
        msg.files = files
        return msg

    async def _send_one(self, p: JSON, kind: str) -> JSON:
        caption = self._caption(p)
        name, data = self._upload(p, kind, p.get(kind), kind)
        out = self._message_json(self._file_message(p, [(kind, name, data)], caption))
        if kind == "voice":  # what Telegram answers for a voice note: the file as a Voice object
            out["voice"] = {"file_id": self.add_file(data), "file_unique_id": f"v{len(self.files)}", "duration": 1,
                            "mime_type": "audio/ogg", "file_size": len(data)}
        return out

    async def _api_sendPhoto(self, p: JSON) -> JSON:
        return await self._send_one(p, "photo")

    async def _api_sendDocument(self, p: JSON) -> JSON:
        return await self._send_one(p, "document")

    async def _api_sendAudio(self, p: JSON) -> JSON:
        return await self._send_one(p, "audio")

    async def _api_sendVoice(self, p: JSON) -> JSON:
        """A voice note: the Bot API wants OGG/Opus (or MP3 / M4A) and shows anything else as a file."""
        return await self._send_one(p, "voice")

    async def _api_sendMediaGroup(self, p: JSON) -> list[JSON]:
        media = p["media"] if isinstance(p["media"], list) else json.loads(p["media"])
        if not 2 <= len(media) <= 10:
            raise ApiError(400, "Bad Request: wrong number of media in the album: must be 2-10")
        kinds = {m["type"] for m in media}
        if len(kinds) > 1 and not kinds <= {"photo", "video"}:
            raise ApiError(400, "Bad Request: documents and audio can't be mixed with other media types")
        sent = []
        for i, m in enumerate(media):
            caption = self._caption({**m, "caption": m.get("caption")})
            name, data = self._upload(p, "", m["media"], m["type"])
            sent.append(self._message_json(self._file_message(p, [(m["type"], name, data)], caption)))
        return sent

    async def _api_editMessageText(self, p: JSON) -> JSON:
        msg = self._bot_message(p)
        visible = self._visible(p)
        markup = self._markup(p.get("reply_markup"))
        # An edit without reply_markup removes an inline keyboard, as on Telegram.
        if visible == msg.text and markup == msg.reply_markup:
            raise ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                "reply markup are exactly the same as a current content and reply markup "
                                "of the message")
        if visible != msg.text:
            msg.edits.append(msg.text)
        msg.text, msg.raw, msg.parse_mode, msg.reply_markup = visible, p["text"], p.get("parse_mode"), markup
        return self._message_json(msg)

    async def _api_editMessageReplyMarkup(self, p: JSON) -> JSON:
        msg = self._bot_message(p)
        markup = self._markup(p.get("reply_markup"))
        if markup == msg.reply_markup:
            raise ApiError(400, "Bad Request: message is not modified: specified new message content and "
                                "reply markup are exactly the same as a current content and reply markup "
                                "of the message")
        msg.reply_markup = markup
        return self._message_json(msg)

    async def _api_sendMessageDraft(self, p: JSON) -> bool:
        """A preview in a private chat while a message is written; only the last text of each draft id shows."""
        chat = self._chat(p["chat_id"])
        if chat.type != "private":
            raise ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if not int(p["draft_id"]):
            raise ApiError(400, "Bad Request: draft_id must be non-zero")
        text = self._visible(p) if p.get("text") else ""
        self.drafts.setdefault((chat.id, int(p["draft_id"])), []).append(text)
        return True

    async def _api_sendChatAction(self, p: JSON) -> bool:
        self._chat(p["chat_id"])
        actions = {"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
                   "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note"}
        if p["action"] not in actions:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_answerCallbackQuery(self, p: JSON) -> bool:
        query_id = p["callback_query_id"]
        if query_id not in self.callbacks or query_id in self.answers:
            raise ApiError(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        if len(p.get("text") or "") > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self.answers[query_id] = p
        return True

    async def _api_getChat(self, p: JSON) -> JSON:
        chat = self._chat(p["chat_id"])
        info = {**chat.as_chat(), "accent_color_id": 0, "max_reaction_count": 11,
                "accepted_gift_types": {"unlimited_gifts": False, "limited_gifts": False,
                                        "unique_gifts": False, "premium_subscription": False,
                                        "gifts_from_channels": False}}
        if chat.description is not None:
            info["description"] = chat.description
        return info

    async def _api_getChatMemberCount(self, p: JSON) -> int:
        return self._chat(p["chat_id"]).member_count

    async def _api_getChatMember(self, p: JSON) -> JSON:
        """As Telegram answers: the admin's entry, "member", or "left" for anyone not in the chat now."""
        chat = self._chat(p["chat_id"])
        user_id = int(p["user_id"])
        for admin in chat.admins:
            if admin["user"]["id"] == user_id:
                return admin
        user = {"id": user_id, "is_bot": False, "first_name": str(user_id)}
        return {"status": "member" if user_id in chat.members else "left", "user": user}

    async def _api_getChatAdministrators(self, p: JSON) -> list[JSON]:
        chat = self._chat(p["chat_id"])
        if chat.type == "private":
            raise ApiError(400, "Bad Request: there are no administrators in the private chat")
        return list(chat.admins)

    # --- internals ----------------------------------------------------------------------

    def _chat(self, chat_id: Any) -> FakeChat:
        try:
            return self.chats[int(chat_id)]
        except (KeyError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None

    def _bot_message(self, p: JSON) -> ChatMessage:
        chat = self._chat(p["chat_id"])
        msg = self.messages.get((chat.id, int(p["message_id"])))
        if msg is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if not msg.from_bot:
            raise ApiError(400, "Bad Request: message can't be edited")
        return msg

    @staticmethod
    def _visible(p: JSON) -> str:
        raw = p["text"]
        visible = parse_html(raw) if (p.get("parse_mode") or "").lower() == "html" else raw
        if not visible.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if len(visible) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        return visible

    @staticmethod
    def _markup(markup: Any) -> JSON | None:
        if not markup:
            return None
        rows = markup.get("inline_keyboard")
        if rows is None:
            return markup  # reply keyboards are not modelled
        for row in rows:
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(data.encode()) <= 64:
                    raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        return markup if any(rows) else None  # an empty keyboard removes it

    def _store(self, chat_id: int, sender: JSON, text: str, *, thread_id: int | None, raw: str | None = None,
               parse_mode: str | None = None, reply_markup: JSON | None = None) -> ChatMessage:
        ids = self._message_ids.setdefault(chat_id, itertools.count(1))
        msg = ChatMessage(chat_id=chat_id, message_id=next(ids), sender=sender, text=text,
                          raw=text if raw is None else raw, parse_mode=parse_mode, thread_id=thread_id,
                          reply_markup=reply_markup)
        self.messages[(chat_id, msg.message_id)] = msg
        return msg

    def _message_json(self, msg: ChatMessage) -> JSON:
        out: JSON = {"message_id": msg.message_id, "from": msg.sender, "chat": self.chats[msg.chat_id].as_chat(),
                     "date": msg.date, "text": msg.text}
        if msg.thread_id is not None:
            out["message_thread_id"] = msg.thread_id
            out["is_topic_message"] = True
        if msg.reply_markup:
            out["reply_markup"] = msg.reply_markup
        return out

    def _notify(self) -> None:
        """Wake every long poll and the webhook sender."""
        self._changed.set()
        self._changed = asyncio.Event()
        self._webhook_kick.set()

    async def _deliver_webhooks(self) -> None:
        """Deliver queued updates to the webhook, one at a time, retrying as Telegram does."""
        async with ClientSession(timeout=ClientTimeout(total=10)) as http:
            while True:
                await self._webhook_kick.wait()
                self._webhook_kick.clear()
                while self.webhook and self._updates:
                    update = self._updates[0]
                    headers = {}
                    if self.webhook.get("secret_token"):
                        headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
                    try:
                        async with http.post(self.webhook["url"], json=update, headers=headers) as resp:
                            status = resp.status
                    except OSError:
                        status = 0
                    self.webhook_deliveries.append((_update_id(update), status))
                    if 200 <= status < 300:
                        self._updates.pop(0)
                    else:
                        await asyncio.sleep(0.05)


async def _read_params(request: web.Request) -> JSON:
    """Query string, form or JSON body: python-telegram-bot sends a form."""
    params: JSON = _decode_form(dict(request.query))
    if request.content_type == "application/json":
        body = await request.json()
        params.update(body if isinstance(body, dict) else {})
    elif request.can_read_body:
        form = await request.post()
        params.update(_decode_form({k: v if isinstance(v, str) else bytes(v).decode()
                                    for k, v in form.items() if isinstance(v, (str, bytes, bytearray))}))
        # Files come as multipart parts: (filename, bytes), by field name, as `attach://<name>` refers to them.
        uploads = {k: (v.filename, v.file.read()) for k, v in form.items() if isinstance(v, web.FileField)}
        if uploads:
            params["__files__"] = uploads
    return params


def _error(e: ApiError) -> web.Response:
    body: JSON = {"ok": False, "error_code": e.code, "description": e.description}
    if e.parameters:
        body["parameters"] = e.parameters
    return web.json_response(body, status=e.code)


def _update_id(update: JSON) -> int:
    value = update.get("update_id")
    return value if isinstance(value, int) else 0


def _wanted(update: JSON, allowed: list[str] | None) -> bool:
    if not allowed:
        return True
    return any(kind in update for kind in allowed) or not any(k != "update_id" for k in update)
