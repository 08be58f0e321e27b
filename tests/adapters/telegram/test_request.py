"""The adapter's HTTP transport for python-telegram-bot (`AiohttpRequest`): what HTTPXRequest did,
kept. The everyday calls (forms, answers, errors, cut polls) run through it in every other test of
this folder against the fake Bot API; here, what those do not reach: a file sent as multipart, a
silent server, a full pool, and the proxy the environment names.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot
from telegram.constants import ParseMode
from telegram.error import BadRequest, RetryAfter, TimedOut

from adapters.telegram.bot import TelegramBot
from adapters.telegram.errors import retry_after_seconds
from adapters.telegram.request import AiohttpRequest
from adapters.telegram.stop import stop_keyboard

TOKEN = "123:secret-token"
ME = {"id": 123, "is_bot": True, "first_name": "Bot", "username": "direct_bot"}


def transport(connections: int = 2, **timeouts: float) -> AiohttpRequest:
    return AiohttpRequest(connection_pool_size=connections, connect_timeout=timeouts.get("connect", 5.0),
                          read_timeout=timeouts.get("read", 5.0), pool_timeout=timeouts.get("pool", 1.0))


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Awaitable[str]]]:
    """Serves an app on a loopback port; gives its base URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


def answering(username: str, seen: list[web.Request] | None = None) -> web.Application:
    """A Bot API that answers getMe as `username`, recording each request."""
    async def handle(request: web.Request) -> web.Response:
        if seen is not None:
            seen.append(request)
        return web.json_response({"ok": True, "result": {**ME, "username": username}})

    app = web.Application()
    app.router.add_post(f"/bot{TOKEN}/getMe", handle)
    return app


async def test_a_file_goes_as_multipart_with_the_other_parameters(serve: Any) -> None:
    received: dict[str, Any] = {}

    async def send_document(request: web.Request) -> web.Response:
        form = await request.post()
        document = form["document"]
        assert isinstance(document, web.FileField)
        received.update(chat_id=form["chat_id"], caption=form["caption"], name=document.filename,
                        type=document.content_type, data=document.file.read())
        return web.json_response({"ok": True, "result": {
            "message_id": 7, "date": 0, "chat": {"id": 42, "type": "private"}, "document": {
                "file_id": "f", "file_unique_id": "u", "file_name": document.filename}}})

    app = answering("direct_bot")  # getMe, when the bot starts
    app.router.add_post(f"/bot{TOKEN}/sendDocument", send_document)
    url = await serve(app)
    async with Bot(TOKEN, base_url=f"{url}/bot", request=transport()) as bot:
        sent = await bot.send_document(42, b"one,two\n", filename="table.csv", caption="the table")
    assert sent.message_id == 7
    assert received == {"chat_id": "42", "caption": "the table", "name": "table.csv", "type": "text/csv",
                        "data": b"one,two\n"}


async def test_a_reply_s_call_goes_as_one_json_body_and_its_refusals_as_python_telegram_bot_raises_them(
        serve: Any) -> None:
    """The texts, edits, drafts and typing of every reply (`TelegramBot.call`): one JSON body, which the
    Bot API takes for any method without a file (PTB's own form cost a third of each call's CPU)."""
    bodies: list[tuple[str, Any]] = []
    refusals = [{"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 3",
                 "parameters": {"retry_after": 3}},
                {"ok": False, "error_code": 400, "description": "Bad Request: message is not modified"}]

    async def edit(request: web.Request) -> web.Response:
        bodies.append((request.content_type, await request.json()))
        if len(bodies) > 1:
            return web.json_response(refusals[len(bodies) - 2], status=refusals[len(bodies) - 2]["error_code"])
        return web.json_response({"ok": True, "result": {"message_id": 7}})

    app = answering("direct_bot")  # getMe, when the bot starts
    app.router.add_post(f"/bot{TOKEN}/editMessageText", edit)
    url = await serve(app)
    async with TelegramBot(TOKEN, base_url=f"{url}/bot", request=transport()) as bot:
        answer = await bot.call("editMessageText", chat_id=42, message_id=7, text="<b>Grüße</b> 🚀",
                                parse_mode=ParseMode.HTML, reply_markup=stop_keyboard("run-1"), message_thread_id=None)
        with pytest.raises(RetryAfter) as waited:
            await bot.call("editMessageText", chat_id=42, message_id=7, text="again")
        with pytest.raises(BadRequest, match="(?i)message is not modified"):
            await bot.call("editMessageText", chat_id=42, message_id=7, text="again")
    assert answer == {"message_id": 7}
    assert retry_after_seconds(waited.value) == 3
    content_type, body = bodies[0]
    assert content_type == "application/json"
    assert body == {"chat_id": 42, "message_id": 7, "text": "<b>Grüße</b> 🚀", "parse_mode": "HTML",
                    "reply_markup": {"inline_keyboard": [[{"text": "⏹ Stop", "callback_data": "stop:run-1"}]]}}
    # no message_thread_id: None is left out


async def test_the_poll_goes_as_one_json_body_on_its_own_transport(serve: Any) -> None:
    """getUpdates (`get_updates_raw`): one JSON body too, with no offset before the first update is known,
    on the bot's getUpdates transport (the adapter gives it its own connection and long read timeout)."""
    bodies: list[tuple[str, Any]] = []
    update = {"update_id": 5, "message": {"message_id": 1, "date": 0, "chat": {"id": 42, "type": "private"}}}

    async def get_updates(request: web.Request) -> web.Response:
        bodies.append((request.content_type, await request.json()))
        return web.json_response({"ok": True, "result": [update]})

    app = answering("direct_bot")  # getMe, when the bot starts
    app.router.add_post(f"/bot{TOKEN}/getUpdates", get_updates)
    url = await serve(app)
    async with TelegramBot(TOKEN, base_url=f"{url}/bot", request=transport(),
                           get_updates_request=transport(connections=1)) as bot:
        assert await bot.get_updates_raw(None) == [update]
        assert await bot.get_updates_raw(6) == [update]
    asked = {"timeout": 30, "allowed_updates": ["message", "edited_message", "callback_query"]}
    assert bodies == [("application/json", asked), ("application/json", {**asked, "offset": 6})]


async def test_a_server_that_never_answers_is_a_timeout(serve: Any) -> None:
    release = asyncio.Event()  # the server's answer, held until the client gave up

    async def silent(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"ok": True, "result": ME})

    app = web.Application()
    app.router.add_post(f"/bot{TOKEN}/getMe", silent)
    url = await serve(app)
    bot = Bot(TOKEN, base_url=f"{url}/bot", request=transport(read=0.2))
    try:
        with pytest.raises(TimedOut):
            await bot.initialize()  # getMe
    finally:
        release.set()
        await bot.shutdown()


async def test_a_call_that_waits_too_long_for_the_pool_is_a_timeout_that_does_not_carry_the_token(
        serve: Any) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    async def slow(request: web.Request) -> web.Response:
        calls.append(request.path)
        await release.wait()
        return web.json_response({"ok": True, "result": True})

    app = answering("direct_bot")
    app.router.add_post(f"/bot{TOKEN}/sendChatAction", slow)
    url = await serve(app)
    bot = Bot(TOKEN, base_url=f"{url}/bot", request=transport(connections=1, connect=0.1, pool=0.1))
    await bot.initialize()
    try:
        first = asyncio.create_task(bot.send_chat_action(42, "typing"))  # holds the one connection
        while not calls:
            await asyncio.sleep(0.01)
        with pytest.raises(TimedOut) as caught:
            await bot.send_chat_action(42, "typing")
        # aiohttp's own error says "Connection timeout to host <the URL>": a logged traceback would show it
        assert TOKEN not in "".join(traceback.format_exception(caught.value))
        release.set()
        assert await first is True
    finally:
        release.set()
        await bot.shutdown()


async def test_the_proxy_the_environment_names_is_used_unless_no_proxy_covers_the_host(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    direct = await serve(answering("direct_bot"))
    via_proxy: list[web.Request] = []
    proxy = await serve(answering("proxied_bot", via_proxy))
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)

    async with Bot(TOKEN, base_url=f"{direct}/bot", request=transport()) as bot:
        assert bot.username == "proxied_bot"
    assert str(via_proxy[0].url) == f"{direct}/bot{TOKEN}/getMe"  # the absolute form a proxy is asked

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with Bot(TOKEN, base_url=f"{direct}/bot", request=transport()) as bot:
        assert bot.username == "direct_bot"
