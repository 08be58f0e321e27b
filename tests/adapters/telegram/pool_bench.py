"""How big the adapter's HTTP pool should be: sendMessage throughput against the fake Bot API.

Not a test (no assertions on speed): run it by hand and read the figures.
    PYTHONPATH=$PWD .venv/bin/python tests/adapters/telegram/pool_bench.py [CONCURRENCIES [POOLS]]
    (e.g. `... pool_bench.py 32,200 8,16,256`)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time

from telegram import Bot

from adapters.telegram.request import AiohttpRequest
from tests.fakes.telegram import FakeTelegram

SENDS = 2000


async def measure(api_url: str, token: str, pool: int, concurrency: int) -> float:
    bot = Bot(token, base_url=api_url,
              request=AiohttpRequest(connection_pool_size=pool, pool_timeout=30.0, connect_timeout=10.0,
                                     read_timeout=20.0))
    async with bot:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(SENDS):
            queue.put_nowait(n)

        async def worker() -> None:
            while not queue.empty():
                n = queue.get_nowait()
                await bot.send_message(42, f"message {n}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return SENDS / (time.perf_counter() - start)


def _serve(port_out: multiprocessing.Queue[tuple[str, str]]) -> None:
    async def serve() -> None:
        fake = await FakeTelegram(budget_scale=0).start()  # no 429s: this measures the client
        fake.private_chat(fake.user(42, "Ada"))
        port_out.put((fake.api_url, fake.token))
        while True:  # keep the fake's memory flat across thousands of sends
            await asyncio.sleep(0.5)
            fake.messages.clear()
            fake.calls.clear()

    asyncio.run(serve())


def serve_elsewhere() -> tuple[str, str, multiprocessing.Process]:
    """The fake in its own process, so the figures are the client's, not a shared GIL's."""
    out: multiprocessing.Queue[tuple[str, str]] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_serve, args=(out,), daemon=True)
    proc.start()
    api_url, token = out.get(timeout=30)
    return api_url, token, proc


async def main() -> None:
    api_url, token, proc = serve_elsewhere()
    print("pool  concurrency  sends/s (best of 3)")
    concurrencies = [int(c) for c in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 32, 200]
    pools = [int(p) for p in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 4, 8, 16, 64, 256]
    for concurrency in concurrencies:
        for pool in pools:
            rate = max([await measure(api_url, token, pool, concurrency) for _ in range(3)])
            print(f"{pool:4d}  {concurrency:11d}  {rate:7.0f}", flush=True)
    proc.terminate()


if __name__ == "__main__":
    asyncio.run(main())
