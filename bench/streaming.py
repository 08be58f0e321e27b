#!/usr/bin/env python3
"""The gateway under a streaming load, on fakes that enforce the platforms' rate budgets.

500 conversations at once across Slack and Telegram (Slack: 200 assistant threads in DMs, which
stream natively, and 50 channel threads, edited in place; Telegram: 200 private chats, which
stream as message drafts (`telegram.drafts`, on by default), and 50 conversations in 5 forum
groups, a topic each, edited in place under the group budget: a group without topics is one
conversation, where later messages join one queued turn).
The model (an OpenAI-compatible fake in a helper process) streams 300 tokens over 6 s per answer.
The daemon runs as its own process with real budgets (`limits.platform_budget_scale: 1`) and
`limits.concurrent_runs: 500`; the fakes (`tests/fakes/`) answer 429 to any call over budget.
The setup (fakes, daemon, process figures) is bench/platforms.py's.

Charts under the same load: every other Slack channel thread and Telegram forum topic asks for a
chart, so its answer is a `create_chart` call first (the agent has the `charts` capability): the
PNG is drawn off the loop and posted into that thread through Slack's external upload
(files.getUploadURLExternal, the upload, files.completeUploadExternal) or Telegram's sendPhoto,
within the same budgets as the streaming text, and then the answer streams as the others do.

    .venv/bin/python bench/streaming.py            # 500 conversations
    .venv/bin/python bench/streaming.py --quick    # 100

Prints gateway CPU per answer and per streamed token, the daemon's event-loop lag p99 (from its
own /metrics), RSS per in-flight run, edits (and appends) per message per second, the share of
the tightest budgets used in their busiest window, the charts posted in their threads and their
latency (from the model's create_chart call to the file in the thread, p50 and max), and 429s
caused, on all calls and on the file calls alone (target 0, with the tightest budget at 80% or
more). Exit status 0 when every answer and every chart landed and that target holds.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from platforms import Proc, Slack, Telegram, start_gateway  # noqa: E402

TOKENS = 300
SECONDS = 6.0
CHUNKS = ["t0"] + [f" t{i}" for i in range(1, TOKENS)]
FINAL = "".join(CHUNKS)


CHART_WORD = "chart"  # a message "chart <key>" asks for a chart titled "Signups <key>"


def chart_args(key: str) -> dict[str, Any]:
    return {"kind": "bar", "title": f"Signups {key}", "x_values": ["Mon", "Tue", "Wed", "Thu", "Fri"],
            "series": [{"name": "signups", "values": [12, 30, 18, 44, 25]}], "x_label": "day", "y_label": "signups"}


def chart_name(key: str) -> str:
    return f"signups-{key}.png"  # how create_chart names the file after its title


async def serve_model(times_file: str) -> None:
    """The model: streams the answer; asked for a chart, first calls create_chart, and notes when
    (time.monotonic, one clock for every process of the machine) in `times_file`."""

    from tests.fakes.openai import FakeOpenAI

    fake = await FakeOpenAI(chunks=CHUNKS, delay=SECONDS / TOKENS).start()
    log = open(times_file, "a", buffering=1)  # noqa: SIM115 (one line a call, read by the bench meanwhile)

    def tool_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        text = str(body["messages"][-1].get("content") or "")
        words = text.split()
        if CHART_WORD not in words or not any(t["function"]["name"] == "create_chart" for t in body.get("tools", [])):
            return None
        key = words[words.index(CHART_WORD) + 1]
        log.write(json.dumps({"key": key, "at": time.monotonic()}) + "\n")
        return "create_chart", chart_args(key)

    fake.tool_call = tool_call
    print(fake.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()


async def start_model_server(times_file: Path) -> tuple[Proc, str]:
    import subprocess

    popen = subprocess.Popen([sys.executable, __file__, "--serve-model", str(times_file)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
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
        self.topics: list[int] = []  # per Telegram group conversation: its forum topic
        # Every other channel thread / topic asks for a chart: key -> (channel or chat, thread) it belongs in.
        self.charts: dict[str, tuple[str, str]] = {}

    def prepare(self) -> None:
        from tests.fakes.telegram import FakeTelegram

        for i in range(self.dm_threads):
            self.slack.add_user(f"U{i:04d}", f"person{i}")
            self.slack.add_channel(f"D{i:04d}", "", kind="im", members=[f"U{i:04d}"])
            self.telegram.private_chat(FakeTelegram.user(20_000 + i, f"Person{i}"))
        for g in range(5):
            self.slack.add_channel(f"C{g:04d}", f"team{g}", members=["U0000", self.slack.bot_user_id])
            self.telegram.add_chat(-100_000 - g, "supergroup", title=f"Team {g}", is_forum=True)
        self.topics = [self.telegram.add_topic(-100_000 - i % 5, f"topic {i}", FakeTelegram.user(20_000 + i, f"Person{i}"))
                       for i in range(self.channel_threads)]

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
            ask = f"{CHART_WORD} s{i}" if i % 2 == 0 else f"tell me {i}"
            root, events = self.slack.user_posts(f"C{g:04d}", "U0000", f"<@{self.slack.bot_user_id}> {ask}")
            if i % 2 == 0:
                self.charts[f"s{i}"] = (f"C{g:04d}", root.ts)  # a top-level mention is answered in its thread
            for event in events:
                await self.slack.send_event(event)
            ask = f"{CHART_WORD} t{i}" if i % 2 == 0 else f"tell me {i}"
            if i % 2 == 0:
                self.charts[f"t{i}"] = (str(-100_000 - g), str(self.topics[i]))
            text = f"@gateway_bot {ask}"
            self.telegram.push_message(-100_000 - g, FakeTelegram.user(20_000 + i, f"Person{i}"), text,
                                       entities=self.telegram.mention(text), thread_id=self.topics[i])

    def charts_posted(self) -> dict[str, tuple[float, bool]]:
        """key -> (when its file reached the platform, whether it is in the thread it was asked in)."""

        names = {chart_name(k): k for k in self.charts}
        out: dict[str, tuple[float, bool]] = {}
        shared = {f.title: f for f in self.slack.shared_files}
        for c in self.slack.calls_to("files.completeUploadExternal"):
            if c.status != 200:
                continue
            files = c.args.get("files")
            for f in json.loads(files) if isinstance(files, str) else files or []:
                key = names.get(str(f.get("title")))
                if key is not None and f.get("title") in shared:
                    got = shared[f["title"]]
                    out[key] = (c.at, (got.channel, got.thread_ts) == self.charts[key])
        sent = {(m.files[0][1], m.chat_id): m for m in self.telegram.sent() if m.files}
        refused = {id(c) for c in self.telegram.throttled}
        for c in self.telegram.calls:
            if c.method != "sendPhoto" or id(c) in refused:
                continue
            name = (c.params.get("__files__", {}).get("photo") or ("", b""))[0]
            key = names.get(name)
            msg = sent.get((name, int(c.params.get("chat_id") or 0)))
            if key is not None and msg is not None:
                out[key] = (c.at, (str(msg.chat_id), str(msg.thread_id)) == self.charts[key])
        return out

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
    procs: list[Proc] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gw-streaming-bench-") as tmp:
            times_file = Path(tmp) / "chart-calls.jsonl"
            model, model_url = await start_model_server(times_file)
            procs.append(model)
            gateway = await start_gateway(ROOT, Path(tmp), model_url, [slack, telegram],
                                          {"platform_budget_scale": 1, "concurrent_runs": conversations,
                                           "queued_messages_per_conversation": 5}, capabilities=[{"id": "charts"}])
            procs.append(gateway)
            load = Load(slack, telegram, conversations)
            load.prepare()
            await asyncio.sleep(1.0)  # connected, polling
            print("load average at the start: %.2f %.2f %.2f on %d CPUs" % (*os.getloadavg(), os.cpu_count() or 0))
            lag0 = await loop_lag(gateway.port)
            rss0, cpu0, started = gateway.rss_mib(), gateway.cpu(), time.monotonic()
            print(f"{load.total} conversations at once, {TOKENS} tokens over {SECONDS:.0f} s each ...", flush=True)
            await load.send_all()
            peak_rss = rss0
            while ((load.landed() < load.total or len(load.charts_posted()) < len(load.charts))
                   and time.monotonic() - started < args.budget):
                peak_rss = max(peak_rss, gateway.rss_mib())
                await asyncio.sleep(0.25)
            took, cpu = time.monotonic() - started, gateway.cpu() - cpu0
            lag = lag_p99(lag0, await loop_lag(gateway.port))
            landed = load.landed()
            print("landed by kind:", load.by_kind())
            asked = {}
            for line in times_file.read_text().splitlines():
                entry = json.loads(line)
                asked.setdefault(entry["key"], entry["at"])  # the first call (a retried run asks again)
            ok = report(load, landed, took, cpu, peak_rss - rss0, lag, asked)
            print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
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


async def loop_lag(port: int) -> dict[float, float]:
    """The daemon's event-loop lag histogram (`gateway_event_loop_lag_seconds`): bucket bound -> count."""
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("gateway_event_loop_lag_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets[float(le)] = float(line.rsplit(" ", 1)[1])
    return buckets


def lag_p99(before: dict[float, float], after: dict[float, float]) -> tuple[float, float, int]:
    """(p99 as its bucket's upper bound, the highest bucket reached, observations) over the load."""
    delta = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = delta.get(float("inf"), 0.0)
    p99 = next((le for le, n in delta.items() if n >= 0.99 * total), float("inf"))
    top = next((le for le, n in delta.items() if n >= total), float("inf"))
    return p99, top, int(total)


def _rate(times: list[float]) -> float:
    """Drafts a second of one message, over the time between its first and last (one: none a second)."""
    return (len(times) - 1) / (max(times) - min(times)) if len(times) > 1 else 0.0


def busiest(times: list[float], window: float) -> int:
    """The most calls in any `window` seconds (what a budget over that window counts)."""
    times = sorted(times)
    return max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)


FILE_CALLS = ("files.getUploadURLExternal", "files.completeUploadExternal", "sendPhoto", "sendDocument",
              "sendMediaGroup")


def report(load: Load, landed: int, took: float, cpu: float, rss_growth: float,
           lag: tuple[float, float, int], asked: dict[str, float]) -> bool:
    s, t = load.slack, load.telegram
    refused = {id(c) for c in t.throttled}
    tg_ok = [c for c in t.calls if id(c) not in refused]
    sl_ok = [c for c in s.calls if c.status == 200]

    def tg_chat(c: Any) -> int:
        return int(c.params.get("chat_id") or 0)

    # Calls that show a growing answer, per message: how many a second while it grew (from the
    # message's first draft to its last), by kind of conversation. The final edit is not a draft
    # (it is not paced: it goes out when the answer ends), so the last edit of a message is left
    # out; a native stream's final is chat.stopStream, not an append.
    rates: dict[str, list[float]] = {"Slack DM (native stream: appendStream)": [],
                                     "Slack channel thread (chat.update)": [],
                                     "Telegram private chat (sendMessageDraft, editMessageText)": [],
                                     "Telegram group (editMessageText)": []}
    kinds = list(rates)
    by_message: dict[tuple[str, str], list[float]] = {}
    for c in sl_ok:
        if c.method in ("chat.startStream", "chat.postMessage", "chat.appendStream", "chat.update"):
            key = (str(c.args.get("channel")), str(c.args.get("ts") or ""))
            if c.method in ("chat.appendStream", "chat.update"):
                by_message.setdefault(key, []).append(c.at)
    for (channel, _), times in by_message.items():
        native = channel.startswith("D")
        rates[kinds[0] if native else kinds[1]].append(_rate(times if native else times[:-1]))
    tg_messages: dict[tuple[int, int], list[float]] = {}
    tg_drafts: dict[tuple[int, int], list[float]] = {}
    for c in tg_ok:
        if c.method == "editMessageText":
            tg_messages.setdefault((tg_chat(c), int(c.params.get("message_id") or 0)), []).append(c.at)
        elif c.method == "sendMessageDraft":  # every draft is a draft: the final is a sendMessage
            tg_drafts.setdefault((tg_chat(c), int(c.params.get("draft_id") or 0)), []).append(c.at)
    for (chat, _), times in tg_messages.items():
        rates[kinds[2] if chat > 0 else kinds[3]].append(_rate(times[:-1]))
    for times in tg_drafts.values():
        rates[kinds[2]].append(_rate(times))
    # The tightest budgets, in their busiest window: how close the gateway ran to what the platform allows.
    groups = [[c.at for c in tg_ok if c.method in ("sendMessage", "editMessageText") and tg_chat(c) == -100_000 - g]
              for g in range(5)]
    use = {
        "Slack chat.update (Tier 3: 50 a minute)": busiest([c.at for c in sl_ok if c.method == "chat.update"], 60) / 50,
        "Slack chat.startStream (Tier 2: 20 a minute)": busiest(
            [c.at for c in sl_ok if c.method == "chat.startStream"], 60) / 20,
        "Slack chat.appendStream (Tier 4: 100 a minute)": busiest(
            [c.at for c in sl_ok if c.method == "chat.appendStream"], 60) / 100,
        "Slack files.completeUploadExternal (Tier 4: 100 a minute)": busiest(
            [c.at for c in sl_ok if c.method == "files.completeUploadExternal"], 60) / 100,
        "Telegram busiest group (20 a minute)": max(busiest(g, 60) for g in groups) / 20,
        "Telegram bot (30 a second)": busiest([c.at for c in tg_ok if c.method in
                                               ("sendMessage", "editMessageText", "sendMessageDraft",
                                                "sendChatAction")], 1) / 30,
    }
    loaded = max(use.values()) >= 0.8
    caused = len(s.throttled) + len(t.throttled)
    file_429s = (sum(1 for c in s.throttled if c.method in FILE_CALLS),
                 sum(1 for c in t.throttled if c.method in FILE_CALLS))
    posted = load.charts_posted()
    in_place = sum(1 for _, right in posted.values() if right)
    waits = sorted(at - asked[k] for k, (at, _) in posted.items() if k in asked)
    complete = landed == load.total and in_place == len(load.charts)
    p99, top, observed = lag
    print()
    print("| figure | value | target |")
    print("| --- | --- | --- |")
    print(f"| answers landed | {landed} / {load.total} in {took:.1f} s | all {'PASS' if complete else 'MISS'} |")
    print(f"| gateway CPU per answer | {cpu / max(landed, 1) * 1000:.1f} ms | (figure) |")
    print(f"| gateway CPU per streamed token | {cpu / max(landed * TOKENS, 1) * 1e6:.0f} µs | (figure) |")
    print(f"| event-loop lag p99 (the daemon's own probe, {observed} samples) | <= {p99 * 1000:g} ms "
          f"(worst <= {top * 1000:g} ms) | (figure) |")
    print(f"| RSS growth per in-flight run | {rss_growth / load.total * 1024:.0f} KiB ({rss_growth:.0f} MiB for "
          f"{load.total}) | (figure) |")
    for kind, values in rates.items():
        shown = (f"p50 {statistics.median(values):.2f}, max {max(values):.2f} ({len(values)} messages edited)"
                 if values else "none edited")
        print(f"| edits per message per second: {kind} | {shown} | <= 1 (paced per message; fewer under a tight "
              "budget) |")
    print(f"| charts posted in the thread asked in (Slack / Telegram) | {in_place} / {len(load.charts)} "
          f"({sum(1 for k in posted if k.startswith('s'))} / {sum(1 for k in posted if k.startswith('t'))}) | all "
          f"{'PASS' if in_place == len(load.charts) else 'MISS'} |")
    if waits:
        print(f"| chart latency: create_chart called -> file in the thread (drawn, uploaded, paced) | p50 "
              f"{statistics.median(waits):.2f} s, max {waits[-1]:.2f} s ({len(waits)} charts) | (figure) |")
    print(f"| 429s caused on file calls (Slack files.* / Telegram sendPhoto) | {file_429s[0]} / {file_429s[1]} | 0 "
          f"{'PASS' if sum(file_429s) == 0 else 'MISS'} |")
    for budget, share in use.items():
        print(f"| budget used, busiest window: {budget} | {share:.0%} | (>= 80% on the tightest) |")
    print(f"| 429s caused (Slack / Telegram) | {len(s.throttled)} / {len(t.throttled)} | 0 "
          f"{'PASS' if caused == 0 and loaded else 'MISS'}{'' if loaded else ' (no budget reached 80%)'} |")
    return complete and caused == 0 and loaded


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 conversations instead of 500")
    parser.add_argument("--conversations", type=int, help="how many (instead of 500 or 100)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds the load may take at most")
    parser.add_argument("--keep-log", help="copy the daemon's log here")
    parser.add_argument("--serve-model", metavar="TIMES_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        asyncio.run(serve_model(args.serve_model))
    else:
        sys.exit(asyncio.run(main(args)))
