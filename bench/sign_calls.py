#!/usr/bin/env python3
"""What one first sign costs the loop: Slack's assistant.threads.setStatus and Telegram's sendChatAction.

Issue 37, Round 16. The sign is the adapter's `show_typing`, as the gateway calls it
(`gateway.outbound.typing_indicator.show_typing`, inside `impatient`), against the fakes in another
process (so nothing of the server side is counted), one sign at a time, each in a chat of its own
(no budget wait; the daemon's bench runs with budgets off too, `platform_budget_scale: 0`).
Per sign, on the loop thread (the only thread that works here):
- its first step's CPU (what `TypingIndicator.show` pays before the caller goes on),
- the whole sign's CPU until its answer is handled (every task and callback of it, the loop's epoll
  included: nothing else runs),
- cProfile's function calls, by library (a count: the machine's load does not move it).

With `--other`, a second checkout is measured in the same minutes, rounds interleaved A B B A; each
round is a fresh process with that checkout on its PYTHONPATH (this script and the fakes stay this
checkout's).

    .venv/bin/python bench/sign_calls.py --other /work/main --rounds 4 --signs 300
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Coroutine, Generator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHATS = 4000  # chats (Telegram) and channels (Slack) the fakes know: one per sign
LIBRARIES = (("slack_sdk", "/slack_sdk/"), ("telegram", "/telegram/"), ("aiohttp", "/aiohttp/"),
             ("yarl/multidict", "/yarl/"), ("yarl/multidict", "/multidict/"), ("adapters", "/adapters/"),
             ("gateway", "/gateway/"), ("asyncio", "/asyncio/"), ("json", "/json/"))
BOT_TOKEN_TG = "123456:TEST-fake-token"


# --- the fakes' process --------------------------------------------------------------------------

async def serve_fakes() -> None:
    """FakeSlack and FakeTelegram with their budgets off; prints their URLs, runs until stdin closes."""
    sys.path.insert(0, str(ROOT))
    from tests.fakes.slack import FakeSlack
    from tests.fakes.telegram import FakeTelegram

    async with FakeSlack(budget_scale=0.0) as slack, FakeTelegram(BOT_TOKEN_TG, budget_scale=0.0) as telegram:
        for n in range(CHATS):
            telegram.add_chat(-1000 - n, "group", title=f"group {n}")
        print(json.dumps({"slack": slack.api_url, "telegram": telegram.api_url}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        # The fakes keep every call: a few thousand signs are a few MB.


# --- one measuring process (the checkout under test on its PYTHONPATH) -----------------------------

class Stepped:
    """Awaits `coro`, keeping the thread CPU of its first step."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.first = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value, error, first = self._coro, None, None, True
        while True:
            start = time.thread_time()
            try:
                step = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                if first:
                    self.first = time.thread_time() - start
                return done.value
            if first:
                self.first, first = time.thread_time() - start, False
            try:
                value, error = (yield step), None
            except BaseException as e:  # noqa: BLE001 - handed to the coroutine, as a Task would
                value, error = None, e


async def open_adapters(urls: dict[str, str]) -> dict[str, Any]:
    from adapters.slack.adapter import SlackAdapter
    from adapters.telegram.adapter import TelegramAdapter
    from bindings.models import BindingSpec, GatewayConfig
    from gateway.adapter_registry import AdapterContext

    os.environ.update(SIGN_SLACK_BOT="xoxb-fake-bot-token", SIGN_SLACK_APP="xapp-fake-app-token",
                      SIGN_TELEGRAM=BOT_TOKEN_TG)
    context = AdapterContext(gateway=GatewayConfig.model_validate({"limits": {"platform_budget_scale": 0}}))
    slack = SlackAdapter(BindingSpec.model_validate({"id": "acme", "platform": "slack", "agent": "assistant", "slack": {
        "bot_token": "env:SIGN_SLACK_BOT", "app_token": "env:SIGN_SLACK_APP", "api_url": urls["slack"]}}), context)
    telegram = TelegramAdapter(BindingSpec.model_validate({"id": "tg", "platform": "telegram", "agent": "assistant",
                                                           "telegram": {"token": "env:SIGN_TELEGRAM",
                                                                        "api_url": urls["telegram"]}}), context)
    await slack._open()
    await telegram._open()
    await telegram._bot._request[1].initialize()  # the transport the sign takes; no getMe, no polling
    return {"slack": slack, "telegram": telegram}


def targets(platform: str) -> Generator[Any, None, None]:
    from gateway.messages import ChatKind
    from gateway.outbound.adapter import ReplyTarget

    for n in range(CHATS):
        if platform == "slack":  # a mention in a channel: its thread's status
            yield ReplyTarget("slack", "acme", "T0TEAM", f"C{n:06d}", f"1700000000.{n:06d}", ChatKind.CHANNEL)
        else:
            yield ReplyTarget("telegram", "tg", "", str(-1000 - n), None, ChatKind.GROUP)


def library(filename: str) -> str:
    return next((name for name, part in LIBRARIES if part in filename), "other")


async def measure(urls: dict[str, str], signs: int, profiled: int) -> dict[str, Any]:
    from gateway.outbound.typing_indicator import show_typing

    adapters = await open_adapters(urls)
    out: dict[str, Any] = {}
    for platform, adapter in adapters.items():
        where = targets(platform)
        for _ in range(30):  # warm: the pool's connections open, every code path run once
            await show_typing(adapter, next(where))
        first, whole = [], []
        for _ in range(signs):
            stepped = Stepped(show_typing(adapter, next(where)))
            start = time.thread_time()
            await stepped
            whole.append(time.thread_time() - start)
            first.append(stepped.first)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(profiled):
            await show_typing(adapter, next(where))
        profile.disable()
        by_library: Counter[str] = Counter()
        for (filename, _, _), (_, calls, _, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            by_library[library(filename)] += calls
        out[platform] = {"first_us": statistics.median(first) * 1e6, "whole_us": statistics.median(whole) * 1e6,
                         "calls": {k: v / profiled for k, v in by_library.items()}}
    await adapters["slack"]._close()
    await adapters["telegram"]._close()
    return out


# --- the driver ------------------------------------------------------------------------------------

def run_round(src: str, urls: dict[str, str], signs: int, profiled: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run([sys.executable, __file__, "--measure", json.dumps(urls), "--signs", str(signs),
                           "--profiled", str(profiled)], env=env, cwd=src, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    fakes = subprocess.Popen([sys.executable, __file__, "--serve-fakes"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    try:
        assert fakes.stdout is not None
        urls = json.loads(fakes.stdout.readline())
        sides = {"A": args.src} | ({"B": args.other} if args.other else {})
        order = ["A", "B", "B", "A"] if args.other else ["A"]
        results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in order:
                results[side].append(run_round(sides[side], urls, args.signs, args.profiled))
    finally:
        fakes.stdin.close()  # type: ignore[union-attr]
        fakes.wait(10)
    print(f"load {os.getloadavg()[0]:.1f}; {args.signs} signs a round, {args.profiled} profiled; " +
          ", ".join(f"{side} = {src}" for side, src in sides.items()))
    for platform in ("slack", "telegram"):
        print(f"\n{platform}: per sign (median of the round's signs; min-max over {args.rounds * len(order) // len(sides)} rounds)")
        for side, rounds in results.items():
            first = [r[platform]["first_us"] for r in rounds]
            whole = [r[platform]["whole_us"] for r in rounds]
            calls: Counter[str] = Counter()
            for r in rounds:
                calls.update(r[platform]["calls"])
            calls = Counter({k: v / len(rounds) for k, v in calls.items()})
            print(f"  {side}: first step {statistics.median(first):.0f} µs ({min(first):.0f}-{max(first):.0f}), "
                  f"whole sign {statistics.median(whole):.0f} µs ({min(whole):.0f}-{max(whole):.0f}), "
                  f"{sum(calls.values()):.0f} function calls: " +
                  ", ".join(f"{k} {v:.0f}" for k, v in calls.most_common()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default=str(ROOT), help="the checkout measured as A")
    parser.add_argument("--other", help="a second checkout, B, in the same rounds (A B B A)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--signs", type=int, default=300, help="signs timed a round and platform")
    parser.add_argument("--profiled", type=int, default=100, help="signs under cProfile a round and platform")
    parser.add_argument("--serve-fakes", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fakes:
        asyncio.run(serve_fakes())
    elif args.measure:
        print(json.dumps(asyncio.run(measure(json.loads(args.measure), args.signs, args.profiled))))
    else:
        main(args)
