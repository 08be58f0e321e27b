#!/usr/bin/env python3
"""The gateway under a streaming load, on fakes that enforce the platforms' rate budgets.

500 conversations at once across Slack and Telegram (Slack: 200 assistant threads in DMs, which
stream natively, and 50 channel threads, edited in place; Telegram: 200 private chats, which
stream as drafts, and 50 conversations in 5 groups, edited in place under the group budget).
The model (an OpenAI-compatible fake in a helper process) streams 300 tokens over 6 s per answer.
The daemon runs as its own process with real budgets (`limits.platform_budget_scale: 1`) and
`limits.concurrent_runs: 500`; the fakes (`tests/fakes/`) answer 429 to any call over budget.
The setup (fakes, daemon, process figures) is bench/platforms.py's.

    .venv/bin/python bench/streaming.py            # 500 conversations
    .venv/bin/python bench/streaming.py --quick    # 100

Prints gateway CPU per answer and per streamed token, RSS per in-flight run, draft calls (edits,
appends, drafts) per message per second, the share of the tightest budgets used, and 429s caused
(target 0). Exit status 0 when every answer landed and no 429 was caused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from platforms import Proc, Slack, Telegram, start_gateway  # noqa: E402

TOKENS = 300
SECONDS = 6.0
CHUNKS = ["t0"] + [f" t{i}" for i in range(1, TOKENS)]
FINAL = "".join(CHUNKS)


async def serve_model() -> None:
    from tests.fakes.openai import FakeOpenAI

    fake = await FakeOpenAI(chunks=CHUNKS, delay=SECONDS / TOKENS).start()
    print(fake.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()


async def start_model_server() -> tuple[Proc, str]:
    import subprocess

    popen = subprocess.Popen([sys.executable, __file__, "--serve-model"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert popen.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline), 60)
    return Proc("model", popen), f"http://127.0.0.1:{int(line)}/v1"


class Load:
    """Who talks where, and how many answers have landed."""

    def __init__(self, slack: Slack, telegram: Telegram, conversations: int) -> None:
        self.slack, self.telegram = slack.fake, telegram.fake
        quarter = conversations // 4
        self.dm_threads = int(quarter * 1.6)  # per platform: 80% DMs, 20% channels / groups
        self.channel_threads = quarter * 2 - self.dm_threads
        self.total = 2 * (self.dm_threads + self.channel_threads)

    def prepare(self) -> None:
        from tests.fakes.telegram import FakeTelegram

        for i in range(self.dm_threads):
            self.slack.add_user(f"U{i:04d}", f"person{i}")
            self.slack.add_channel(f"D{i:04d}", "", kind="im", members=[f"U{i:04d}"])
            self.telegram.private_chat(FakeTelegram.user(20_000 + i, f"Person{i}"))
        for g in range(5):
            self.slack.add_channel(f"C{g:04d}", f"team{g}", members=["U0000", self.slack.bot_user_id])
            self.telegram.add_chat(-100_000 - g, "group", title=f"Team {g}")

    async def send_all(self) -> None:
        from tests.fakes.telegram import FakeTelegram

        for i in range(self.dm_threads):
            root, _ = self.slack.user_posts(f"D{i:04d}", f"U{i:04d}", "New assistant thread")
            _, events = self.slack.user_posts(f"D{i:04d}", f"U{i:04d}", "tell me", thread_ts=root.ts)
            for event in events:
                await self.slack.send_event(event)
            self.telegram.push_message(20_000 + i, FakeTelegram.user(20_000 + i, f"Person{i}"), "tell me")
        for i in range(self.channel_threads):
            g = i % 5
            _, events = self.slack.user_posts(f"C{g:04d}", "U0000", f"<@{self.slack.bot_user_id}> tell me {i}")
            for event in events:
                await self.slack.send_event(event)
            text = f"@gateway_bot tell me {i}"
            self.telegram.push_message(-100_000 - g, FakeTelegram.user(20_000 + i, f"Person{i}"), text,
                                       entities=self.telegram.mention(text))

    def by_kind(self) -> dict[str, int]:
        done = [m for m in self.slack.messages if m.bot_id and m.text == FINAL and not m.streaming]
        sent = [m for m in self.telegram.sent() if m.text == FINAL]
        return {"slack dm": sum(1 for m in done if m.channel.startswith("D")),
                "slack channel": sum(1 for m in done if m.channel.startswith("C")),
                "telegram dm": sum(1 for m in sent if m.chat_id > 0),
                "telegram group": sum(1 for m in sent if m.chat_id < 0)}

    def landed(self) -> int:
        slack = sum(1 for m in self.slack.messages if m.bot_id and m.text == FINAL and not m.streaming)
        telegram = sum(1 for m in self.telegram.sent() if m.text == FINAL)
        return slack + telegram


async def main(args: argparse.Namespace) -> int:
    conversations = args.conversations or (100 if args.quick else 500)
    Slack.budget_scale = Telegram.budget_scale = 1.0  # the platforms' published budgets, enforced
    slack, telegram = Slack("gateway"), Telegram("gateway")
    await slack.start()
    await telegram.start()
    model, model_url = await start_model_server()
    procs = [model]
    try:
        with tempfile.TemporaryDirectory(prefix="gw-streaming-bench-") as tmp:
            gateway = await start_gateway(ROOT, Path(tmp), model_url, [slack, telegram],
                                          {"platform_budget_scale": 1, "concurrent_runs": conversations,
                                           "queued_messages_per_conversation": 5})
            procs.append(gateway)
            load = Load(slack, telegram, conversations)
            load.prepare()
            await asyncio.sleep(1.0)  # connected, polling
            rss0, cpu0, started = gateway.rss_mib(), gateway.cpu(), time.monotonic()
            print(f"{load.total} conversations at once, {TOKENS} tokens over {SECONDS:.0f} s each ...", flush=True)
            await load.send_all()
            peak_rss = rss0
            while load.landed() < load.total and time.monotonic() - started < args.budget:
                peak_rss = max(peak_rss, gateway.rss_mib())
                await asyncio.sleep(0.25)
            took, cpu = time.monotonic() - started, gateway.cpu() - cpu0
            landed = load.landed()
            print("landed by kind:", load.by_kind())
            report(load, landed, took, cpu, peak_rss - rss0)
            ok = landed == load.total and not slack.fake.throttled and not telegram.fake.throttled
            print("targets:", "all met" if ok else "NOT all met")
            if args.keep_log:
                Path(args.keep_log).write_bytes((Path(tmp) / "gateway.log").read_bytes())
            return 0 if ok else 1
    finally:
        for proc in reversed(procs):
            proc.stop()
        for p in (slack, telegram):
            with contextlib.suppress(Exception):
                await p.stop()


def busiest_minute(times: list[float]) -> int:
    """The most calls in any 60 s window (what a per-minute budget counts)."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u < t + 60) for i, t in enumerate(times)), default=0)


def report(load: Load, landed: int, took: float, cpu: float, rss_growth: float) -> None:
    s, t = load.slack, load.telegram
    drafts_slack = len(s.calls_to("chat.update")) + len(s.calls_to("chat.appendStream"))
    drafts_tg = len(t.calls_to("editMessageText")) + len(t.calls_to("sendMessageDraft"))
    per_platform = load.total // 2
    group_sends = [busiest_minute([c.at for c in t.calls if c.method in ("sendMessage", "editMessageText")
                                   and str(c.params.get("chat_id")) == str(-100_000 - g)]) for g in range(5)]
    updates = busiest_minute([c.at for c in s.calls if c.method == "chat.update" and c.status == 200])
    print()
    print("| figure | value | target |")
    print("| --- | --- | --- |")
    print(f"| answers landed | {landed} / {load.total} in {took:.1f} s | all |")
    print(f"| gateway CPU per answer | {cpu / max(landed, 1) * 1000:.1f} ms | (figure) |")
    print(f"| gateway CPU per streamed token | {cpu / max(landed * TOKENS, 1) * 1e6:.0f} µs | (figure) |")
    print(f"| RSS growth per in-flight run | {rss_growth / load.total * 1024:.0f} KiB ({rss_growth:.0f} MiB for {load.total}) | (figure) |")
    print(f"| Slack draft calls (chat.update + appendStream) per message per second | "
          f"{drafts_slack / per_platform / SECONDS:.3f} | about 1 at most (paced per message) |")
    print(f"| Telegram draft calls (edits + drafts) per message per second | {drafts_tg / per_platform / SECONDS:.3f} | about 1 at most (paced per message) |")
    print(f"| Slack chat.update, busiest minute, of its tier's 50 | {updates / 50:.0%} | (>= 80% under load) |")
    print(f"| Telegram busiest group, busiest minute, of its 20 | {max(group_sends) / 20:.0%} | (>= 80% under load) |")
    print(f"| 429s caused (Slack / Telegram) | {len(s.throttled)} / {len(t.throttled)} | 0 |")
    print("| event-loop lag p99 | not measured (the daemon exports no loop-lag figure yet) | |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 conversations instead of 500")
    parser.add_argument("--conversations", type=int, help="how many (instead of 500 or 100)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds the load may take at most")
    parser.add_argument("--keep-log", help="copy the daemon's log here")
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        asyncio.run(serve_model())
    else:
        sys.exit(asyncio.run(main(args)))
