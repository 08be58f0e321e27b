#!/usr/bin/env python3
"""The bare echo bots `bench/platforms.py` compares the gateway with: one process, the platform SDKs
with their defaults, each bot replying once to each message it is meant to answer.

- Slack: slack-bolt's AsyncApp with an AsyncSocketModeHandler; an app_mention is answered in its
  thread (`say`).
- Telegram: a python-telegram-bot Application polling; a text message is answered (`reply_text`).
- Mattermost: an aiohttp websocket for events and the REST API to post; a post mentioning the bot is
  answered in its thread.

    python bench/bare_bots.py '<json: slack_api, slack_bot_token, slack_app_token, telegram_api,
                               telegram_token, mattermost_url, mattermost_token, mattermost_bot_id>'

Prints `ready` once all three are connected; runs until stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from typing import Any

import aiohttp


def reply_text(text: str) -> str:
    return f"echo: {text}"


async def slack_bot(cfg: dict[str, Any]) -> Any:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    app = AsyncApp(client=AsyncWebClient(token=cfg["slack_bot_token"], base_url=cfg["slack_api"]))

    @app.event("app_mention")
    async def mention(event: dict[str, Any], say: Any) -> None:
        await say(text=reply_text(event["text"]), thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def message(event: dict[str, Any]) -> None:
        return None  # the mention's `message` twin: nothing to do

    handler = AsyncSocketModeHandler(app, cfg["slack_app_token"],
                                     web_client=AsyncWebClient(token=cfg["slack_app_token"], base_url=cfg["slack_api"]))
    await handler.connect_async()
    return handler


async def telegram_bot(cfg: dict[str, Any]) -> Any:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await update.message.reply_text(reply_text(update.message.text))

    application = Application.builder().token(cfg["telegram_token"]).base_url(cfg["telegram_api"]).build()
    application.add_handler(MessageHandler(filters.TEXT, echo))
    await application.initialize()
    await application.start()
    assert application.updater is not None
    await application.updater.start_polling(poll_interval=0.0, timeout=10)
    return application


async def mattermost_bot(cfg: dict[str, Any], session: aiohttp.ClientSession) -> asyncio.Task[None]:
    url, token, me = cfg["mattermost_url"], cfg["mattermost_token"], cfg["mattermost_bot_id"]
    headers = {"Authorization": f"Bearer {token}"}
    connected = asyncio.Event()

    async def answer(post: dict[str, Any]) -> None:
        body = {"channel_id": post["channel_id"], "message": reply_text(post["message"]),
                "root_id": post.get("root_id") or post["id"]}
        async with session.post(f"{url}/api/v4/posts", json=body, headers=headers) as r:
            await r.read()

    async def listen() -> None:
        replies: set[asyncio.Task[None]] = set()
        async with session.ws_connect(f"{url}/api/v4/websocket", headers=headers) as ws:
            connected.set()
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(frame.data)
                if event.get("event") != "posted":
                    continue
                post = json.loads(event["data"]["post"])
                if post["user_id"] != me and me in json.loads(event["data"].get("mentions", "[]")):
                    task = asyncio.create_task(answer(post))
                    replies.add(task)
                    task.add_done_callback(replies.discard)

    task = asyncio.create_task(listen())
    await asyncio.wait_for(connected.wait(), 10)
    return task


def _read_to_end() -> str:
    # bench/cpu_diff.py's profile hook is switched by SIGUSR1/SIGUSR2: they must reach the loop's thread,
    # not this one (where they would wait for the loop's next wake-up to run).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})
    return sys.stdin.read()


async def main(cfg: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.WARNING)
    async with aiohttp.ClientSession() as session:
        slack = await slack_bot(cfg)
        telegram = await telegram_bot(cfg)
        mattermost = await mattermost_bot(cfg, session)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _read_to_end)  # until the bench closes our stdin
        mattermost.cancel()
        await asyncio.gather(mattermost, return_exceptions=True)
        await slack.close_async()
        assert telegram.updater is not None
        await telegram.updater.stop()
        await telegram.stop()
        await telegram.shutdown()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
