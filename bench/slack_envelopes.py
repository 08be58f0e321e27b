#!/usr/bin/env python3
"""What each Socket Mode envelope costs the Slack adapter, old path and new alternating in one process.

Issue 37, Round 10: Slack's path to the model request. A gateway runs in this process
(`tests.conftest.running_gateway`) with the bench's Slack binding on the fake Slack (the real
slack_sdk and slack-bolt, loopback) and the bench agent against the fake OpenAI server, on a SQLite
file; mentions are sent one at a time, each starting a thread, as `bench/platforms.py` sends them
(its `message` event, then its `app_mention`), and each is waited for until its answer is final and
its envelopes are handled. Each envelope is one of: the mention's first event, its twin, or the
bot's own post echoed back (the fake echoes `chat.postMessage` as real Slack does).

Measured per envelope kind, for each variant in turn, blocks of `--block` messages alternating:
the thread CPU (`time.thread_time()`) of the adapter's `_on_socket_request` coroutine, summed over
its own steps only (what runs between its awaits: other tasks' steps in between are not counted),
and with `--profile` cProfile's function calls per message by library (which load does not move).

Variants: `bolt` hands every envelope to Bolt's dispatch (main before this round); `unread, bolt`
acks a stored message's twin and the bot's own echoes unread, the rest through Bolt (this round's
first cut); `unread, no bolt` is this checkout (events over Socket Mode without Bolt's dispatch).

    .venv/bin/python bench/slack_envelopes.py --rounds 6 --block 25
    .venv/bin/python bench/slack_envelopes.py --rounds 2 --block 50 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import Slack, write_gateway_config  # noqa: E402

SETTLE = 0.05  # seconds after a message's answer is final: its reply's echo comes then
LIBRARIES = (("slack_bolt", "/slack_bolt/"), ("slack_sdk", "/slack_sdk/"), ("aiohttp", "/aiohttp/"),
             ("the gateway", "/gateway/"), ("adapters", "/adapters/"), ("asyncio", "/asyncio/"))


class Stepped:
    """Awaits `coro`, adding the thread CPU of each of its steps to `sink[key]`."""

    def __init__(self, coro: Coroutine[Any, Any, Any], sink: defaultdict[str, list[float]], key: str) -> None:
        self._coro, self._sink, self._key = coro, sink, key

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, spent, value, error = self._coro, 0.0, None, None
        while True:
            start = time.thread_time()
            try:
                step = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                self._sink[self._key].append(spent + time.thread_time() - start)
                return done.value
            spent += time.thread_time() - start
            try:
                value, error = (yield step), None
            except BaseException as e:  # noqa: BLE001 - handed to the coroutine, as a Task would
                value, error = None, e


def kind_of(payload: Any, seen: set[str]) -> str:
    event = payload.get("event") if isinstance(payload, dict) else None
    if not isinstance(event, dict):
        return "other"
    if event.get("bot_id"):
        return "echo"
    key = f"{event.get('channel')}:{event.get('ts')}"
    if key in seen:
        return "twin"
    seen.add(key)
    return "first"


def variants(adapter: Any) -> dict[str, Callable[[], None]]:
    """Each variant's switch: the adapter's methods as main had them, or as this checkout has them."""
    from slack_bolt.adapter.socket_mode.async_internals import send_async_response
    from slack_bolt.adapter.socket_mode.internals import build_headers
    from slack_bolt.request.async_request import AsyncBoltRequest

    real_unread, real_event = adapter._settled_unread, adapter._on_socket_event

    async def through_bolt(socket: Any, req: Any, key: Any) -> None:  # main's path: every event to Bolt's dispatch
        response = await adapter._require_app().async_dispatch(
            AsyncBoltRequest(mode="socket_mode", body=req.payload, headers=build_headers(req)))
        await adapter._ack(send_async_response(socket, req, response, time.time()), req)

    def set_to(unread: Any, event: Any) -> Callable[[], None]:
        def switch() -> None:
            adapter._settled_unread, adapter._on_socket_event = unread, event
        return switch

    return {"bolt": set_to(lambda body, key: False, through_bolt),
            "unread, bolt": set_to(real_unread, through_bolt),
            "unread, no bolt": set_to(real_unread, real_event)}


async def until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


async def main(args: argparse.Namespace) -> None:
    from tests.conftest import running_gateway
    from tests.fakes.openai import FakeOpenAI
    from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

    p = Slack("gateway")
    model = await FakeOpenAI().start()
    await p.start()
    os.environ.update({"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "not-needed",
                       "BENCH_SLACK_BOT_TOKEN": BOT_TOKEN, "BENCH_SLACK_APP_TOKEN": APP_TOKEN,
                       "BENCH_SLACK_SIGNING_SECRET": SIGNING_SECRET})
    cpu: dict[str, defaultdict[str, list[float]]] = {}
    envelopes: dict[str, Counter[str]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    messages: Counter[str] = Counter()
    methods: dict[str, Counter[str]] = {}  # the Web API calls the fake saw, by method
    seen: set[str] = set()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "config"
            write_gateway_config(config, 0, [p])
            async with running_gateway(config) as gw:
                adapter = gw.adapters["slack"]
                await until(lambda: adapter.health().connected, "the socket")
                choose = variants(adapter)
                current = {"variant": "warm-up"}
                handled = [0]
                real_request = adapter._on_socket_request

                async def timed(socket: Any, req: Any) -> None:
                    variant, kind = current["variant"], kind_of(req.payload, seen)
                    envelopes.setdefault(variant, Counter())[kind] += 1
                    try:
                        await Stepped(real_request(socket, req), cpu.setdefault(variant, defaultdict(list)), kind)
                    finally:
                        handled[0] += 1

                listeners = adapter_socket_listeners(adapter)
                listeners[listeners.index(real_request)] = timed

                async def one(text: str) -> None:
                    before = handled[0]
                    _, record = await p.send(None, text, new=True)
                    await until(lambda: (p.scan(), record.final)[1] is not None, text)
                    await asyncio.sleep(SETTLE)
                    await until(lambda: handled[0] >= before + 3, f"{text}: its envelopes")

                for i in range(10):  # first contact, caches, the first runs
                    await one(f"warm {i}")
                for r in range(args.rounds):
                    order = list(choose) if r % 2 == 0 else list(reversed(choose))
                    for name in order:
                        choose[name]()
                        current["variant"] = name
                        profiler = profiles.setdefault(name, cProfile.Profile()) if args.profile else None
                        for i in range(args.block):
                            if profiler is not None:
                                profiler.enable()
                            sent = len(p.fake.calls)
                            await one(f"{name} {r}.{i}")
                            methods.setdefault(name, Counter()).update(c.method for c in p.fake.calls[sent:])
                            if profiler is not None:
                                profiler.disable()
                            messages[name] += 1
    finally:
        await p.stop()
        await model.stop()
    report(cpu, envelopes, profiles, messages, args.profile)
    print('\nWeb API calls per message: ' + '; '.join(
        f"{v}: " + ', '.join(f'{m} {n / messages[v]:.2f}' for m, n in sorted(c.items())) for v, c in methods.items()))


def adapter_socket_listeners(adapter: Any) -> list[Any]:
    """The live Socket Mode client's request listeners (the adapter's `_on_socket_request` among them)."""
    import gc

    from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient

    clients = [o for o in gc.get_objects() if isinstance(o, AsyncBaseSocketModeClient) and not o.closed]
    if len(clients) != 1:
        raise RuntimeError(f"expected one live Socket Mode client, found {len(clients)}")
    return clients[0].socket_mode_request_listeners


def report(cpu: dict[str, defaultdict[str, list[float]]], envelopes: dict[str, Counter[str]],
           profiles: dict[str, cProfile.Profile], messages: Counter[str], profiled: bool) -> None:
    load = os.getloadavg()[0]
    print(f"\nload average {load:.1f}; messages per variant: {dict(messages)}"
          f"{' (profiled: CPU inflated)' if profiled else ''}")
    print("\n| envelope | " + " | ".join(f"{v}: per message, CPU µs (median / mean)" for v in messages) + " |")
    print("| --- |" + " --- |" * len(messages))
    for kind in ("first", "twin", "echo", "other"):
        cells = []
        for v in messages:
            xs = cpu.get(v, {}).get(kind, [])
            n = envelopes.get(v, Counter())[kind] / max(1, messages[v])
            cells.append(f"{n:.2f}, {statistics.median(xs) * 1e6:.0f} / {statistics.fmean(xs) * 1e6:.0f}" if xs else "-")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    totals = {v: sum(sum(xs) for xs in cpu.get(v, {}).values()) / max(1, messages[v]) * 1e6 for v in messages}
    print("| all, per message | " + " | ".join(f"{totals[v]:.0f} µs" for v in messages) + " |")
    if not profiles:
        return
    print("\n| cProfile, calls per message | " + " | ".join(profiles) + " |")
    print("| --- |" + " --- |" * len(profiles))
    counts: dict[str, Counter[str]] = {}
    for v, prof in profiles.items():
        c: Counter[str] = Counter()
        for (filename, _line, _fn), (_cc, nc, _tt, _ct, _callers) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
            lib = next((name for name, marker in LIBRARIES if marker in filename), "the rest")
            c[lib] += nc
            c["all"] += nc
        counts[v] = c
    for lib in (*(name for name, _ in LIBRARIES), "the rest", "all"):
        print(f"| {lib} | " + " | ".join(f"{counts[v][lib] / messages[v]:,.0f}" for v in profiles) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds; each runs every variant's block once")
    parser.add_argument("--block", type=int, default=25, help="messages per variant per round")
    parser.add_argument("--profile", action="store_true", help="cProfile each variant's messages (calls per message)")
    asyncio.run(main(parser.parse_args()))
