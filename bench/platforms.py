#!/usr/bin/env python3
"""The gateway as a user runs it, beside bare echo bots written with the same SDKs.

The daemon runs as its own process (`agent-gateway run --config <tmp>`) with a Slack (Socket
Mode), a Telegram (polling) and a Mattermost (websocket) binding on the fake platform servers of
`tests/fakes/`, and its agent on `openai-chat:bench-model` against an OpenAI-compatible fake server
on loopback (`OPENAI_BASE_URL`, in a helper process) that answers at once. The bare bots
(`bench/bare_bots.py`, one process) are slack-bolt, python-telegram-bot and aiohttp, on their own
instances of the same fakes. Every time is taken on the fakes' side, in this process: when the
event is handed to the bot, and when the fake received the bot's calls.

    .venv/bin/python bench/platforms.py            # the full run, a few minutes
    .venv/bin/python bench/platforms.py --quick    # smaller
    .venv/bin/python bench/platforms.py --gateway-src /tmp/old-checkout   # another checkout's daemon

What it prints, per platform: event -> first sign of work (typing / status / first post), -> first
text, -> final answer (p50/p99, rounds interleaved between the two bots); a burst of messages at
once (msg/s, CPU per message of the bot's process, open fds and RSS before and after); pydantic-ai
alone running the same agent against the same model server at the same concurrency; and the
gateway / bare ratios against the targets. Exit status 0 when every target holds.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

ANSWER = "Hello from the fake model."  # tests/fakes/openai.py's default answer
INSTRUCTIONS = "You are a benchmark agent. Be brief."
MODEL = "openai-chat:bench-model"
CONCURRENT_RUNS = 32  # the gateway's default limits.concurrent_runs
# Messages per conversation in the latency rounds. A run sends the conversation's history, and
# the OpenAI SDK's request transform costs ~0.2 ms per message of it (pydantic-ai alone pays the
# same): longer conversations would measure the SDK, not the bots (see bench/README.md).
CONVERSATION_LENGTH = 5
STEP_TIMEOUT = 30.0
READY_WITHIN = 180.0  # seconds for the daemon to report ready (a machine loaded tenfold takes minutes)
TARGET_SIGN = 2.0  # first sign p50 <= 2x the bare bot's reply
# Final answer p50 <= 1.5x a bare bot running the same agent (the bare echo's reply + pydantic-ai
# alone's result on the same conversation). The issue said 5x the bare echo; see report_latency.
TARGET_FINAL = 1.5
TARGET_FDS = 20  # open fds may grow by at most this over the burst
TARGET_RSS_MIB = 20.0  # and RSS by at most this much ("flat")
TARGET_THROUGHPUT = 0.9  # of pydantic-ai alone at the same concurrency (issue 37)
TARGET_SHARE_MS = 2.0  # the gateway's share of the final answer (final - pydantic-ai alone), p50
# Event -> the model server receiving the run's request, p50, less pydantic-ai alone's own run start ->
# request (the gateway's part of it). The issue asked <= 6 ms of the whole, which pydantic-ai alone's own
# part exceeds on this kind of machine (5.8-8.4 ms: bench/README.md, Round 10), so the part that is ours
# is judged, against the same 2 ms as the final answer's share; the whole is printed.
TARGET_TO_MODEL_PART_MS = 2.0
TARGET_CPU = 1.2  # the daemon's CPU per message, at most this times pydantic-ai alone's per run
PROFILE_MESSAGES = 150  # messages one at a time per platform under the sampling profiler (--profile)


# =========================================================================================
# Helper processes: the model server, pydantic-ai alone.
# =========================================================================================


async def serve_model() -> None:
    """The instant model server; after its port, one line per completion: when its request arrived
    and when its answer was written (time.monotonic, the same clock in every process here), and 1 if it
    came on a connection new to the server (else 0): connections opened per message."""
    from aiohttp import web

    from tests.fakes.openai import FakeOpenAI

    class Timed(FakeOpenAI):
        async def _completions(self, request: web.Request) -> web.StreamResponse:
            at = time.monotonic()
            response = await super()._completions(request)
            print(f"{at:.6f} {time.monotonic():.6f} {int(self.peers.count(self.peers[-1]) == 1)}", flush=True)
            return response

    fake = await Timed().start()
    print(fake.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await fake.stop()


def _bench_agent() -> Any:
    """The agent as the gateway builds it (its output may be a request for approval), built once."""
    from pydantic_ai import Agent, DeferredToolRequests

    return Agent(MODEL, instructions=INSTRUCTIONS, output_type=[str, DeferredToolRequests])


def _model_env(model_url: str) -> dict[str, str]:
    """pydantic-ai's own OpenAI provider, pointed at the fake model server."""
    return {**os.environ, "OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "not-needed"}


async def run_to_answer(agent: Any, prompt: str) -> None:
    """One run of pydantic-ai alone, streamed to its result, which must be the fake model's answer."""
    from pydantic_ai import AgentRunResultEvent

    async with agent.run_stream_events(prompt) as events:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                assert event.result.output == ANSWER


async def pydantic_ai_alone(concurrency: int) -> None:
    """The same agent (model, instructions) against the same model server, one process kept for the
    whole bench: after a warm-up, 50 runs one at a time (its latency line), then one burst per line read
    ("<n>": n runs at `concurrency`), answered with its runs/s and this process's CPU per run (all its
    threads). Kept warm and driven burst by burst so its bursts sit between the bots' in the same minutes."""
    agent = _bench_agent()
    loop = asyncio.get_running_loop()
    async with agent:
        await agent.run("warm-up")
        # One run at a time first: its latency is the floor under any bot's answer from this model.
        first: list[float] = []
        final: list[float] = []
        for i in range(50):
            t0 = time.perf_counter()
            async with agent.run_stream_events(f"message {i}") as events:
                async for event in events:
                    if not first or len(first) == i:
                        if _is_text(event):
                            first.append(time.perf_counter() - t0)
            final.append(time.perf_counter() - t0)
        print(json.dumps({"first_ms": statistics.median(first) * 1000, "final_ms": statistics.median(final) * 1000}),
              flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            queue = list(range(int(line)))
            ends: list[float] = []

            async def worker() -> None:
                while queue:
                    await run_to_answer(agent, f"message {queue.pop()}")
                    ends.append(time.perf_counter())

            t0 = time.perf_counter()
            cpu0 = time.process_time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            cpu = time.process_time() - cpu0
            print(json.dumps({"rate": len(ends) / (max(ends) - t0), "cpu_ms": cpu * 1000 / len(ends)}), flush=True)


async def pydantic_ai_rounds() -> None:
    """The latency rounds' third side: one run per line read ("<n>": the run continues a
    conversation of n earlier exchanges, as the gateway's run of that round does), answered with
    its time to the result in ms and when it began (time.monotonic, the model server's clock). The gateway's run sends its conversation's history, and the
    OpenAI SDK's request costs grow with it: compared at the same length, the difference is the
    gateway's own."""
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

    agent = _bench_agent()
    loop = asyncio.get_running_loop()
    async with agent:
        await agent.run("warm-up")
        print("ready", flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            history: list[ModelMessage] = []
            for i in range(int(line)):
                history += [ModelRequest(parts=[UserPromptPart(content=f"message {i}")]),
                            ModelResponse(parts=[TextPart(content=ANSWER)])]
            began, t0 = time.monotonic(), time.perf_counter()
            async with agent.run_stream_events("message", message_history=history) as events:
                async for _ in events:
                    pass
            print(f"{(time.perf_counter() - t0) * 1000:.3f} {began:.6f}", flush=True)


def _is_text(event: Any) -> bool:
    from pydantic_ai import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

    return ((isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and bool(event.part.content))
            or (isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta)))


# =========================================================================================
# What a bot did for one message, read off the fakes.
# =========================================================================================


@dataclass
class Record:
    event: float
    expected: str
    sign: float | None = None  # first typing / status / post
    text: float | None = None  # first post with text
    final: float | None = None  # the answer as it ends up
    model: float | None = None  # the model server received the run's request (gateway only)
    answered: float | None = None  # and had written its answer


class Tracker:
    """Outbound calls attributed to the message waiting on their conversation key."""

    def __init__(self) -> None:
        self.pending: dict[Any, Record] = {}
        self.done: list[Record] = []
        self.orphans: dict[Any, list[tuple[float, str | None]]] = {}

    def expect(self, key: Any, expected: str, at: float) -> Record:
        record = self.pending[key] = Record(at, expected)
        return record

    def saw(self, key: Any, at: float, text: str | None) -> None:
        record = self.pending.get(key)
        if record is None:
            # A call for a conversation whose key is not known yet (a Mattermost post's id is
            # learnt when the post is created): kept until `adopt`.
            self.orphans.setdefault(key, []).append((at, text))
            return
        if at < record.event:
            return
        if record.sign is None:
            record.sign = at
        if text:
            if record.text is None:
                record.text = at
            if text.strip() == record.expected:
                record.final = at
                del self.pending[key]
                self.done.append(record)

    def adopt(self, placeholder: Any, key: Any) -> None:
        self.pending[key] = self.pending.pop(placeholder)
        for at, text in self.orphans.pop(key, []):
            self.saw(key, at, text)


class Platform:
    name = ""
    budget_scale = 0.0  # the fakes' rate budgets: 0 enforces none (bench/streaming.py sets 1, the platforms' own)

    def __init__(self, bot: str) -> None:
        self.bot = bot  # "gateway" | "bare"
        self.tracker = Tracker()
        self._seen = 0
        self.serial = 0

    def expected(self, text: str) -> str:
        return ANSWER if self.bot == "gateway" else f"echo: {text}"

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def scan(self) -> None: ...

    async def send(self, key: Any, text: str, *, new: bool) -> tuple[Any, Record]: ...

    def new_key(self) -> Any:
        self.serial += 1
        return self.serial


class Slack(Platform):
    name = "Slack"

    async def start(self) -> None:
        from tests.fakes.slack import FakeSlack

        self.fake = await FakeSlack(budget_scale=self.budget_scale).__aenter__()
        self.fake.add_user("U0ADA", "ada", real_name="Ada")
        self.fake.add_channel("C0GEN", "general", members=["U0ADA", self.fake.bot_user_id])

    async def stop(self) -> None:
        await self.fake.__aexit__(None, None, None)

    def binding(self) -> dict[str, Any]:
        return {"platform": "slack", "agent": "assistant", "slack": {
            "bot_token": "env:BENCH_SLACK_BOT_TOKEN", "app_token": "env:BENCH_SLACK_APP_TOKEN",
            "signing_secret": "env:BENCH_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": self.fake.api_url}}

    def scan(self) -> None:
        calls = self.fake.calls
        while self._seen < len(calls):
            c = calls[self._seen]
            self._seen += 1
            if c.method == "assistant.threads.setStatus":
                self.tracker.saw(c.args.get("thread_ts"), c.at, None)
            elif c.method == "chat.postMessage":
                self.tracker.saw(c.args.get("thread_ts"), c.at, str(c.args.get("text") or ""))
            elif c.method == "chat.update":
                msg = self.fake.message(str(c.args.get("channel")), str(c.args.get("ts")))
                if msg is not None:
                    self.tracker.saw(msg.thread_ts, c.at, str(c.args.get("text") or ""))

    async def send(self, key: Any, text: str, *, new: bool) -> tuple[Any, Record]:
        body = f"<@{self.fake.bot_user_id}> {text}"
        msg, events = self.fake.user_posts("C0GEN", "U0ADA", body, thread_ts=None if new else key)
        key = msg.ts if new else key
        record = self.tracker.expect(key, self.expected(body), time.monotonic())
        for event in events:
            await self.fake.send_event(event)
        return key, record


class Telegram(Platform):
    name = "Telegram"

    async def start(self) -> None:
        from tests.fakes.telegram import FakeTelegram

        self.fake = await FakeTelegram(budget_scale=self.budget_scale).start()
        self.users = 0

    async def stop(self) -> None:
        await self.fake.stop()

    def binding(self) -> dict[str, Any]:
        return {"platform": "telegram", "agent": "assistant", "admission": {"dm": "open"},
                "telegram": {"token": "env:BENCH_TELEGRAM_TOKEN", "api_url": self.fake.api_url, "mode": "polling"}}

    def scan(self) -> None:
        calls = self.fake.calls
        while self._seen < len(calls):
            c = calls[self._seen]
            self._seen += 1
            if c.method == "sendChatAction":
                self.tracker.saw(int(c.params["chat_id"]), c.at, None)
            elif c.method in ("sendMessage", "editMessageText"):
                self.tracker.saw(int(c.params["chat_id"]), c.at, str(c.params.get("text") or ""))

    async def send(self, key: Any, text: str, *, new: bool) -> tuple[Any, Record]:
        from tests.fakes.telegram import FakeTelegram

        if new:
            self.users += 1
            user = FakeTelegram.user(10_000 + self.users, f"Person{self.users}")
            self.fake.private_chat(user)
            key = user["id"]
        user = {"id": key, "is_bot": False, "first_name": f"Person{key}"}
        record = self.tracker.expect(key, self.expected(text), time.monotonic())
        self.fake.push_message(key, user, text)
        return key, record


class Mattermost(Platform):
    name = "Mattermost"
    TOKEN = "mm-bench-bot-token"

    async def start(self) -> None:
        from tests.fakes.mattermost import FakeMattermost

        self.fake = FakeMattermost()
        self.url = await self.fake.start()
        self.bot_user = self.fake.add_user("agentbot", is_bot=True, token=self.TOKEN, first_name="Agent")
        self.alice = self.fake.add_user("alice", token="mm-bench-alice", first_name="Alice")
        team = self.fake.add_team("acme")
        self.town = self.fake.add_channel(team["id"], "town-square", members=[self.bot_user["id"], self.alice["id"]])
        self._typing_seen = 0

    async def stop(self) -> None:
        await self.fake.stop()

    def binding(self) -> dict[str, Any]:
        return {"platform": "mattermost", "agent": "assistant",
                "mattermost": {"url": self.url, "token": "env:BENCH_MM_TOKEN"}}

    def scan(self) -> None:
        fake = self.fake
        while self._typing_seen < len(fake.typing):
            t, at = fake.typing[self._typing_seen], fake.typing_times[self._typing_seen]
            self._typing_seen += 1
            self.tracker.saw(t["parent_id"] or None, at, None)
        while self._seen < len(fake.requests):
            (method, path, body), at = fake.requests[self._seen], fake.request_times[self._seen]
            self._seen += 1
            if not isinstance(body, dict):
                continue
            if method == "POST" and path == "/api/v4/posts":
                self.tracker.saw(body.get("root_id") or None, at, str(body.get("message") or ""))
            elif method == "PUT" and path.endswith("/patch"):
                post = fake.posts.get(path.split("/")[-2])
                if post is not None and "message" in body:
                    self.tracker.saw(post["root_id"] or None, at, str(body["message"]))

    async def send(self, key: Any, text: str, *, new: bool) -> tuple[Any, Record]:
        body = f"@agentbot {text}"
        if not new:
            record = self.tracker.expect(key, self.expected(body), time.monotonic())
            await self.fake.user_post(self.alice["id"], self.town["id"], body, root_id=key)
            return key, record
        # A new post's id is known once it is created (and broadcast): the record waits under a
        # placeholder, and the calls that came meanwhile are attributed when it gets its key.
        placeholder = ("new", self.new_key())
        record = self.tracker.expect(placeholder, self.expected(body), time.monotonic())
        post = await self.fake.user_post(self.alice["id"], self.town["id"], body)
        self.tracker.adopt(placeholder, post["id"])
        return post["id"], record


# =========================================================================================
# The processes under test.
# =========================================================================================


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    port: int = 0  # the daemon's HTTP port (/metrics, /readyz)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, seconds

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(Exception):
                if self.popen.stdin is not None:
                    self.popen.stdin.close()
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def write_gateway_config(directory: Path, port: int, platforms: list[Platform], limits: dict[str, Any] | None = None,
                         database_url: str | None = None, model: str = MODEL, runtime: dict[str, Any] | None = None,
                         capabilities: list[dict[str, Any]] | None = None) -> None:
    """`platforms`' bindings (none: the web API alone, a web binding), the bench agent on `model` with
    `capabilities` (none by default)."""
    (directory / "agents").mkdir(parents=True)
    (directory / "bindings").mkdir()
    # The fakes here do not enforce the platforms' budgets (budget_scale=0), and the daemon does
    # not pace by them: this bench measures the bots, not Slack's one post a second in a channel.
    gateway = {"database": {"url": database_url or f"sqlite+aiosqlite:///{directory / 'gateway.db'}"},
               "http": {"listen": f"127.0.0.1:{port}"}, "limits": {"platform_budget_scale": 0, **(limits or {})},
               **({"runtime": runtime} if runtime else {})}  # only when set: an older checkout has no `runtime`
    (directory / "gateway.yaml").write_text(json.dumps(gateway))
    (directory / "agents" / "assistant.yaml").write_text(json.dumps(
        {"name": "Bench agent", "model": model, "instructions": INSTRUCTIONS, "capabilities": capabilities or []}))
    for p in platforms:
        (directory / "bindings" / f"{p.name.lower()}.yaml").write_text(json.dumps(p.binding()))
    if not platforms:
        (directory / "bindings" / "web.yaml").write_text(json.dumps({"platform": "web", "agent": "assistant"}))


async def start_gateway(src: Path, tmp: Path, model_url: str, platforms: list[Platform],
                        limits: dict[str, Any] | None = None, *,
                        database_url: str | None = None, model: str = MODEL, runtime: dict[str, Any] | None = None,
                        capabilities: list[dict[str, Any]] | None = None) -> Proc:
    """The daemon in its own process, ready (`/readyz`)."""
    from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

    port = free_port()
    config = tmp / "config"
    write_gateway_config(config, port, platforms, limits, database_url, model, runtime, capabilities)
    pythonpath = os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)
    env = {**_model_env(model_url), "PYTHONPATH": pythonpath,
           "BENCH_SLACK_BOT_TOKEN": BOT_TOKEN, "BENCH_SLACK_APP_TOKEN": APP_TOKEN,
           "BENCH_SLACK_SIGNING_SECRET": SIGNING_SECRET, "BENCH_MM_TOKEN": Mattermost.TOKEN,
           "BENCH_TELEGRAM_TOKEN": next((p.fake.token for p in platforms if isinstance(p, Telegram)), "")}
    log = open(tmp / "gateway.log", "wb")  # noqa: SIM115 (closed with the process)
    popen = subprocess.Popen([sys.executable, "-m", "gateway.ops.cli", "run", "--config", str(config)], cwd=src,
                             env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    proc = Proc("gateway", popen, port)
    deadline = time.monotonic() + READY_WITHIN
    try:
        async with aiohttp.ClientSession() as http:
            while True:
                if popen.poll() is not None:
                    raise RuntimeError(f"the gateway exited: see {tmp / 'gateway.log'}")
                with contextlib.suppress(aiohttp.ClientError, ValueError):
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if (await r.json()).get("ready"):
                            return proc
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not get ready in {READY_WITHIN:g} s: see {tmp / 'gateway.log'}")
                await asyncio.sleep(0.1)
    except BaseException:
        proc.stop()  # a daemon that never got ready is no caller's to stop: it would outlive the bench
        raise


async def start_bare(platforms: dict[str, Platform]) -> Proc:
    from tests.fakes.slack import APP_TOKEN, BOT_TOKEN

    slack, telegram, mm = platforms["Slack"], platforms["Telegram"], platforms["Mattermost"]
    cfg = {"slack_api": slack.fake.api_url, "slack_bot_token": BOT_TOKEN, "slack_app_token": APP_TOKEN,  # type: ignore[attr-defined]
           "telegram_api": telegram.fake.api_url, "telegram_token": telegram.fake.token,  # type: ignore[attr-defined]
           "mattermost_url": mm.url, "mattermost_token": Mattermost.TOKEN,  # type: ignore[attr-defined]
           "mattermost_bot_id": mm.bot_user["id"]}  # type: ignore[attr-defined]
    popen = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_bots.py"), json.dumps(cfg)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert popen.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline), 60)
    if line.strip() != b"ready":
        raise RuntimeError("the bare bots did not start")
    return Proc("bare", popen)


class ModelTimes:
    """When the model server received each completion request and wrote its answer (`serve_model`'s
    lines, read in a thread of their own: the pipe must never fill, or the server would block)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.times: list[tuple[float, float]] = []
        self.opened = 0  # connections the model server accepted so far
        self._popen = popen
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._popen.stdout is not None
        for line in self._popen.stdout:
            arrived, answered, new = line.split()
            self.times.append((float(arrived), float(answered)))
            self.opened += int(new)

    def attribute(self, records: list[Record]) -> None:
        """Each record's model request: the first arrival between its event and its final answer
        (the latency rounds send one message at a time, and only the gateway calls this server then)."""
        times = sorted(self.times)
        for r in records:
            i = bisect.bisect_left(times, (r.event, 0.0))
            if i < len(times) and r.final is not None and times[i][0] <= r.final:
                r.model, r.answered = times[i]

    def attribute_alone(self, alone: AloneRounds) -> None:
        """pydantic-ai alone's run start -> its request at the server, the same way (alone's runs in the
        latency rounds go one at a time too, between the bots' messages)."""
        times = sorted(self.times)
        for began, final in zip(alone.began, alone.final):
            i = bisect.bisect_left(times, (began, 0.0))
            if i < len(times) and times[i][0] <= began + final / 1000:
                alone.to_model.append((times[i][0] - began) * 1000)


async def start_model_server() -> tuple[Proc, str, ModelTimes]:
    popen = subprocess.Popen([sys.executable, __file__, "--serve-model"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert popen.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline), 60)
    return Proc("model", popen), f"http://127.0.0.1:{int(line)}/v1", ModelTimes(popen)


class AloneRounds:
    """pydantic-ai alone in the latency rounds (`pydantic_ai_rounds`, its own process)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.proc = Proc("pydantic-ai alone", popen)
        self.final: list[float] = []
        self.began: list[float] = []  # each run's start, on the model server's clock
        self.to_model: list[float] = []  # each run's start -> the model server had its request, ms

    @classmethod
    async def start(cls, model_url: str) -> AloneRounds:
        popen = subprocess.Popen([sys.executable, __file__, "--pydantic-ai-rounds"], env=_model_env(model_url),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        alone = cls(popen)
        try:
            if await alone._line() != "ready":
                raise RuntimeError("pydantic-ai alone did not start")
        except BaseException:
            alone.proc.stop()
            raise
        return alone

    async def _line(self) -> str:
        return await _read_line(self.proc.popen, STEP_TIMEOUT)

    async def run(self, earlier: int) -> None:
        """One run continuing a conversation of `earlier` exchanges."""
        assert self.proc.popen.stdin is not None
        self.proc.popen.stdin.write(f"{earlier}\n".encode())
        self.proc.popen.stdin.flush()
        final, began = (await self._line()).split()
        self.final.append(float(final))
        self.began.append(float(began))


class AloneBursts:
    """pydantic-ai alone at the gateway's concurrency (`pydantic_ai_alone`, its own process, kept warm):
    one burst per call, so they interleave with the bots' bursts."""

    def __init__(self, popen: subprocess.Popen[bytes], latency: dict[str, float]) -> None:
        self.proc = Proc("pydantic-ai alone", popen)
        self.first_ms, self.final_ms = latency["first_ms"], latency["final_ms"]

    @classmethod
    async def start(cls, model_url: str, concurrency: int) -> AloneBursts:
        popen = subprocess.Popen([sys.executable, __file__, "--pydantic-ai-alone", str(concurrency)],
                                 env=_model_env(model_url), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            return cls(popen, json.loads(await _read_line(popen, 300)))
        except BaseException:
            Proc("pydantic-ai alone", popen).stop()
            raise

    async def burst(self, messages: int, budget: float) -> Burst:
        assert self.proc.popen.stdin is not None
        await asyncio.sleep(0.5)  # as `burst`: what the last burst left behind settles first
        self.proc.popen.stdin.write(f"{messages}\n".encode())
        self.proc.popen.stdin.flush()
        out = json.loads(await _read_line(self.proc.popen, budget))
        return Burst(messages, out["rate"], out["cpu_ms"])


async def _read_line(popen: subprocess.Popen[bytes], timeout: float) -> str:
    assert popen.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, popen.stdout.readline), timeout)
    if not line:
        raise RuntimeError(f"{popen.args!r} exited")
    return line.decode().strip()


# =========================================================================================
# The measurements.
# =========================================================================================


async def poll(platforms: list[Platform], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for p in platforms:
            p.scan()
        await asyncio.sleep(0.001)


async def one_message(p: Platform, key: Any, text: str, *, new: bool) -> tuple[Any, Record]:
    key, record = await p.send(key, text, new=new)
    deadline = time.monotonic() + STEP_TIMEOUT
    while record.final is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{p.name} ({p.bot}): no final answer within {STEP_TIMEOUT:g} s to {text!r}")
        await asyncio.sleep(0.001)
    return key, record


@dataclass
class Latency:
    sign: list[float] = field(default_factory=list)
    text: list[float] = field(default_factory=list)
    final: list[float] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    def add(self, r: Record) -> None:
        assert r.sign is not None and r.text is not None and r.final is not None
        self.sign.append((r.sign - r.event) * 1000)
        self.text.append((r.text - r.event) * 1000)
        self.final.append((r.final - r.event) * 1000)
        self.records.append(r)

    @property
    def to_model(self) -> list[float]:
        """Event -> the model server received the run's request, ms (after `ModelTimes.attribute`)."""
        return [(r.model - r.event) * 1000 for r in self.records if r.model is not None]

    @property
    def after_model(self) -> list[float]:
        """The model server's answer written -> the final answer seen on the platform, ms."""
        return [(r.final - r.answered) * 1000 for r in self.records if r.answered is not None and r.final is not None]


async def latency_rounds(pairs: list[tuple[Platform, Platform]], rounds: int, pause: float,
                         alone: AloneRounds) -> dict[tuple[str, str], Latency]:
    """Each platform's two bots in turn, one message each per round (order alternating), and
    pydantic-ai alone once beside each pair, at the same point of its conversation. Each bot
    talks in one conversation (a Slack or Mattermost thread, a Telegram DM) at a time, a new one
    every CONVERSATION_LENGTH messages; the very first message is a warm-up."""
    out: dict[tuple[str, str], Latency] = {}
    keys: dict[int, Any] = {}
    for gw, bare in pairs:
        for p in (gw, bare):
            keys[id(p)], _ = await one_message(p, None, "warm-up", new=True)
            out[(p.name, p.bot)] = Latency()
    for i in range(rounds):
        new = (i + 1) % CONVERSATION_LENGTH == 0
        for gw, bare in pairs:
            await alone.run((i + 1) % CONVERSATION_LENGTH)  # the warm-up began the first conversation
            await asyncio.sleep(pause)
            for p in ((gw, bare) if i % 2 == 0 else (bare, gw)):
                keys[id(p)], record = await one_message(p, None if new else keys[id(p)], f"message {i}", new=new)
                out[(p.name, p.bot)].add(record)
                await asyncio.sleep(pause)
    return out


# Where a sample's time goes, by the first of these frames found in its stack (outbound first: the reply
# is streamed from inside pydantic-ai's event loop), and by the file its innermost frame is in.
PHASES = (("outbound: posting the reply", ("gateway/outbound/",)),
          ("the run's end", ("end_run (",)),
          ("claim", ("claim_next_run (",)),
          ("inbound: admission, identity, ingest", ("gateway/inbound/",)),
          ("the model run (pydantic-ai, the OpenAI SDK)", ("run_agent (",)),
          ("the run's preparation (prepare, the agent)", ("gateway/runs/",)),
          ("the adapter receiving the event", ("adapters/",)))
# The first match wins: ours before the SDKs', whose "telegram/" is in adapters/telegram/'s path too.
KINDS = (("pydantic-ai", ("pydantic_ai/", "pydantic_ai_harness/", "pydantic_graph/", "pydantic/", "pydantic_core/")),
         ("OpenAI SDK, httpx, anyio", ("openai/", "httpx/", "httpcore/", "anyio/", "h11/")),
         ("the store (our SQL, SQLite, SQLAlchemy)", ("gateway/store/", "sqlalchemy/", "aiosqlite/", "sqlite3/")),
         ("the gateway's own Python", ("gateway/", "adapters/", "capabilities/", "bindings/")),
         ("platform SDKs, aiohttp", ("slack_sdk/", "slack_bolt/", "telegram/", "aiohttp/", "yarl/", "multidict/")),
         ("the event loop (asyncio, selectors)", ("asyncio/", "selectors.py")))


async def profile_platforms(platforms: list[Platform], proc: Proc, directory: Path, messages: int, pause: float) -> None:
    """Each platform in turn, `messages` messages one at a time (a new conversation every
    CONVERSATION_LENGTH), while py-spy samples the daemon: DIR/<platform>.svg (a flame graph) and
    DIR/<platform>.txt (the collapsed stacks), and a summary printed of where the time went."""
    directory.mkdir(parents=True, exist_ok=True)
    # Installed into the venv (`pip install py-spy`): a development tool, not a dependency.
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    for p in platforms:
        name = p.name.lower()
        # --gil: only the thread holding the GIL is sampled, so a thread waiting (the loop in epoll, the
        # SQLite thread on its queue) is not counted as work.
        spies = [subprocess.Popen([py_spy, "record", "--nonblocking", "--gil", "-r", "500", "-p", str(proc.pid), "-f", kind,
                                   "-o", str(directory / f"{name}.{ext}")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for kind, ext in (("flamegraph", "svg"), ("raw", "txt"))]
        await asyncio.sleep(1.0)  # py-spy attached
        cpu0 = proc.cpu()
        key = None
        for i in range(messages):
            key, _ = await one_message(p, key if i % CONVERSATION_LENGTH else None, f"profiled {i}",
                                       new=i % CONVERSATION_LENGTH == 0)
            await asyncio.sleep(pause)
        cpu_ms = (proc.cpu() - cpu0) * 1000 / messages
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(30)
        summarise_profile(p.name, directory / f"{name}.txt", messages, cpu_ms)


IDLE = ("EpollSelector.select (", "Condition.wait (", "_connection_worker_thread (")  # a thread waiting, not working


def summarise_profile(platform: str, collapsed: Path, messages: int, cpu_ms: float, how: str = "one at a time") -> None:
    """py-spy's collapsed stacks ("frame;frame;... count"), by phase of a message and by kind of code;
    each share also as ms of the daemon's CPU per message (its /proc CPU over the profiled messages)."""
    phases: dict[str, int] = {}
    kinds: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if frames[-1].startswith(IDLE):
            continue
        total += n
        phase = next((label for label, marks in PHASES if any(m in stack for m in marks)), "other (the loop between)")
        phases[phase] = phases.get(phase, 0) + n
        # The innermost frame that is not the standard library says whose work it is (the daemon's
        # entry point, below every task the loop runs, says nothing: its loop's own steps are the loop's).
        kind = next((label for f in reversed(frames) if "gateway/ops/cli.py" not in f for label, marks in KINDS
                     if label != KINDS[-1][0] and any(m in f for m in marks)), None)
        if kind is None:
            kind = KINDS[-1][0] if "asyncio/" in stack else "the standard library, the rest"
        kinds[kind] = kinds.get(kind, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    if not total:
        print(f"  {platform}: no samples in {collapsed}")
        return
    print(f"\nprofile, {platform}: {total} samples over {messages} messages {how}, {cpu_ms:.2f} ms of the "
          f"daemon's CPU per message; {collapsed.with_suffix('.svg')}")
    for title, table in (("phase of a message", phases), ("whose code", kinds)):
        print(f"| {title} | share | CPU ms per message |\n| --- | --- | --- |")
        for label, n in sorted(table.items(), key=lambda kv: -kv[1]):
            print(f"| {label} | {n / total:.0%} | {n / total * cpu_ms:.2f} |")
    print("top own time: " + "; ".join(f"{f} {n / total:.1%}" for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:12]))


@dataclass
class Burst:
    messages: int
    rate: float
    cpu_ms: float


async def burst(p: Platform, proc: Proc, messages: int, budget: float) -> Burst:
    """`messages` new conversations at once; msg/s from the first event to the last final answer."""
    await asyncio.sleep(0.5)
    cpu0 = proc.cpu()
    records = [(await p.send(None, f"burst {i}", new=True))[1] for i in range(messages)]
    deadline = time.monotonic() + budget
    while len([r for r in records if r.final is not None]) < messages and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    finished = [r for r in records if r.final is not None]
    cpu = proc.cpu() - cpu0
    await asyncio.sleep(1.0)  # settle: connections opened for the burst may close
    t0 = min(r.event for r in records)
    t1 = max((r.final for r in finished), default=t0 + 1)  # type: ignore[type-var]
    if len(finished) < messages:
        print(f"  ! {p.name} ({p.bot}): {messages - len(finished)} of {messages} unanswered within {budget:g} s")
    return Burst(len(finished), len(finished) / (t1 - t0), cpu * 1000 / max(1, len(finished)))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def main(args: argparse.Namespace) -> int:
    rounds = 15 if args.quick else 50
    messages = args.burst or (150 if args.quick else 300)
    burst_rounds = args.burst_rounds or (3 if args.quick else 5)
    warm_up = 100
    src = Path(args.gateway_src).resolve()
    names = (Slack, Telegram, Mattermost)
    gw_side = [cls("gateway") for cls in names]
    bare_side = [cls("bare") for cls in names]
    for p in gw_side + bare_side:
        await p.start()
    stop = asyncio.Event()
    poller = asyncio.create_task(poll(gw_side + bare_side, stop))
    model, model_url, model_times = await start_model_server()
    procs = [model]
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="gw-platform-bench-") as tmp:
            runtime = {**({"event_loop": args.event_loop} if args.event_loop != "asyncio" else {}),
                       **({"eager_tasks": True} if args.eager_tasks else {})}
            gateway = await start_gateway(src, Path(tmp), model_url, gw_side, runtime=runtime)
            procs.append(gateway)
            bare = await start_bare({p.name: p for p in bare_side})
            procs.append(bare)
            print(f"gateway from {src} (pid {gateway.pid}, Python {sys.version.split()[0]}, runtime {runtime}); "
                  f"bare bots pid {bare.pid}; model server {model_url}")
            print("load average at the start: %.2f %.2f %.2f on %d CPUs (other work on the machine skews every "
                  "figure; the ratios less)" % (*os.getloadavg(), os.cpu_count() or 0))
            print(f"latency: {rounds} rounds, interleaved ...", flush=True)
            rounds_alone = await AloneRounds.start(model_url)
            procs.append(rounds_alone.proc)
            lat = await latency_rounds(list(zip(gw_side, bare_side)), rounds, args.pause, rounds_alone)
            rounds_alone.proc.stop()
            model_times.attribute([r for (_, bot), la in lat.items() if bot == "gateway" for r in la.records])
            model_times.attribute_alone(rounds_alone)
            if args.profile:
                await profile_platforms(gw_side, gateway, Path(args.profile), PROFILE_MESSAGES, args.pause)
            if args.latency_only:
                return 0 if report_latency(lat, rounds_alone.final, rounds_alone.to_model) else 1
            # Each platform: a warm-up burst to each bot (not counted: a fresh daemon's first burst costs
            # more), then `burst_rounds` rounds of pydantic-ai alone, the gateway and the bare bot in turn
            # (the order reversed every round, so alone's burst is always next to the gateway's), each
            # ratio taken within its round and the median judged: the machine's drift over minutes, and
            # the other processes sharing the cores, fall on both sides of a ratio alike.
            alone = await AloneBursts.start(model_url, CONCURRENT_RUNS)
            procs.append(alone.proc)
            await alone.burst(messages, args.budget)
            rounds_of: dict[str, list[tuple[Burst, Burst, Burst]]] = {}
            spans: dict[str, tuple[tuple[int, int], tuple[float, float]]] = {}
            for gw, b in zip(gw_side, bare_side):
                print(f"{gw.name}: warm-up bursts, then {burst_rounds} rounds of {messages} to pydantic-ai alone, "
                      "the gateway and the bare bot ...", flush=True)
                await burst(gw, gateway, messages, args.budget)
                await burst(b, bare, warm_up, args.budget)
                fds0, rss0 = gateway.fds(), gateway.rss_mib()
                rounds_of[gw.name] = []
                for k in range(burst_rounds):
                    got: dict[str, Burst] = {}
                    for side in (("alone", "gateway", "bare") if k % 2 == 0 else ("bare", "gateway", "alone")):
                        got[side] = (await alone.burst(messages, args.budget) if side == "alone" else
                                     await burst(gw if side == "gateway" else b, gateway if side == "gateway" else bare,
                                                 messages, args.budget))
                    rounds_of[gw.name].append((got["alone"], got["gateway"], got["bare"]))
                spans[gw.name] = ((fds0, gateway.fds()), (rss0, gateway.rss_mib()))
            throttled = {p.name: len(p.fake.throttled) for p in gw_side}  # type: ignore[attr-defined]
            ok = report(lat, rounds_alone.final, rounds_alone.to_model, rounds_of, spans, alone, messages, throttled)
            if args.keep_log:
                Path(args.keep_log).write_bytes((Path(tmp) / "gateway.log").read_bytes())
    finally:
        stop.set()
        await poller
        for proc in reversed(procs):
            proc.stop()
        for p in gw_side + bare_side:
            with contextlib.suppress(Exception):
                await p.stop()
    return 0 if ok else 1


def report_latency(lat: dict[tuple[str, str], Latency], alone: list[float], alone_to_model: list[float]) -> bool:
    """The latency tables, each judged figure beside its target (issue 37).

    The final answer is judged against a bare bot that runs the same agent: the bare echo bot's reply
    plus pydantic-ai alone's result on the same conversation (measured in the same rounds), and the
    gateway's share of it is the final answer minus pydantic-ai alone's result. Against the echo alone
    (the issue's first wording) the ratio is printed but not judged: pydantic-ai's own run is 4-5x a
    Slack or Telegram echo and 10x a Mattermost one on this fake model (bench/README.md). The time to
    the model request is read where the model server received it, and beside it pydantic-ai alone's own
    run start -> request at the server; the gateway's part, the difference, is judged (<= 2 ms, as the
    final answer's share), since pydantic-ai alone's own part is over the issue's 6 ms for the whole on
    this kind of machine (bench/README.md, Round 10: the targets restated)."""
    ok = True

    def judge(good: bool) -> str:
        nonlocal ok
        ok = ok and good
        return "PASS" if good else "MISS"

    alone50 = pct(alone, 0.5)
    print()
    print("| per message, ms (p50 / p99) | bare echo bot: reply | gateway: first sign | first text | final answer "
          "| sign / bare (<= 2x) | final / bare echo | final / (bare echo + pydantic-ai alone) (<= 1.5x) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in ("Slack", "Telegram", "Mattermost"):
        g, b = lat[(name, "gateway")], lat[(name, "bare")]
        bare50 = pct(b.final, 0.5)
        sign_ratio, final_ratio = pct(g.sign, 0.5) / bare50, pct(g.final, 0.5) / bare50
        agent_ratio = pct(g.final, 0.5) / (bare50 + alone50)
        print(f"| {name} | {bare50:.1f} / {pct(b.final, 0.99):.1f} | {pct(g.sign, 0.5):.1f} / {pct(g.sign, 0.99):.1f} "
              f"| {pct(g.text, 0.5):.1f} / {pct(g.text, 0.99):.1f} | {pct(g.final, 0.5):.1f} / {pct(g.final, 0.99):.1f} "
              f"| {sign_ratio:.2f}x {judge(sign_ratio <= TARGET_SIGN)} | {final_ratio:.2f}x "
              f"| {agent_ratio:.2f}x {judge(agent_ratio <= TARGET_FINAL)} |")
    print()
    alone_model50 = pct(alone_to_model, 0.5) if alone_to_model else float("nan")
    print(f"| gateway, ms (p50 / p99) | event -> model request [printed; the issue's 6 ms] "
          f"| minus pydantic-ai alone's run -> request ({alone_model50:.1f}): the gateway's part "
          f"(<= {TARGET_TO_MODEL_PART_MS:g} ms) | model answer -> final "
          f"| final - pydantic-ai alone: the gateway's share (<= {TARGET_SHARE_MS:g} ms) |")
    print("| --- | --- | --- | --- | --- |")
    for name in ("Slack", "Telegram", "Mattermost"):
        g = lat[(name, "gateway")]
        to_model, share = pct(g.to_model, 0.5), pct(g.final, 0.5) - alone50
        part = to_model - alone_model50
        print(f"| {name} | {to_model:.1f} / {pct(g.to_model, 0.99):.1f} "
              f"| {part:.1f} {judge(part <= TARGET_TO_MODEL_PART_MS)} "
              f"| {pct(g.after_model, 0.5):.1f} / {pct(g.after_model, 0.99):.1f} "
              f"| {share:.1f} {judge(share <= TARGET_SHARE_MS)} |")
    print(f"\npydantic-ai alone in the same rounds, the same agent on the same conversations: result {alone50:.1f} / "
          f"{pct(alone, 0.99):.1f} ms (p50 / p99); model requests timed: "
          + ", ".join(f"{n} {len(lat[(n, 'gateway')].to_model)}/{len(lat[(n, 'gateway')].records)}"
                      for n in ("Slack", "Telegram", "Mattermost")))
    return ok


def report(lat: dict[tuple[str, str], Latency], alone_rounds: list[float], alone_to_model: list[float],
           rounds_of: dict[str, list[tuple[Burst, Burst, Burst]]],
           spans: dict[str, tuple[tuple[int, int], tuple[float, float]]], alone: AloneBursts, messages: int,
           throttled: dict[str, int]) -> bool:
    """The latency tables, then the bursts: each ratio is taken within a round (alone's burst beside the
    gateway's), and the median over the rounds is judged, printed with the rounds' min-max beside it."""
    ok = report_latency(lat, alone_rounds, alone_to_model)

    def judge(good: bool) -> str:
        nonlocal ok
        ok = ok and good
        return "PASS" if good else "MISS"

    def spread(values: list[float], form: str) -> str:
        return f"{format(statistics.median(values), form)} ({format(min(values), form)}-{format(max(values), form)})"

    n = len(next(iter(rounds_of.values())))
    print()
    print(f"| {n} bursts of {messages}: median (min-max of the rounds) | pydantic-ai alone runs/s | bare msg/s "
          f"| gateway msg/s | gateway / pydantic-ai alone (>= {TARGET_THROUGHPUT:.0%}) "
          f"| CPU ms/msg alone / bare / gateway | gateway CPU / pydantic-ai alone's (<= {TARGET_CPU:g}x) "
          "| the gateway's own CPU ms (gateway - bare - alone) | a gateway adding nothing ((bare + alone) / alone) "
          "| gateway fds first -> last | gateway RSS MiB first -> last | 429s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in ("Slack", "Telegram", "Mattermost"):
        rs = rounds_of[name]
        share = [g.rate / a.rate for a, g, _ in rs]
        cpu = [g.cpu_ms / a.cpu_ms for a, g, _ in rs]
        own = [g.cpu_ms - b.cpu_ms - a.cpu_ms for a, g, b in rs]
        floor = [(b.cpu_ms + a.cpu_ms) / a.cpu_ms for a, _, b in rs]
        answered = all(g.messages == messages for _, g, _ in rs)
        (fds0, fds1), (rss0, rss1) = spans[name]
        flat = fds1 - fds0 <= TARGET_FDS and rss1 - rss0 <= TARGET_RSS_MIB and answered
        med = statistics.median
        print(f"| {name} | {spread([a.rate for a, _, _ in rs], '.0f')} | {spread([b.rate for _, _, b in rs], '.0f')} "
              f"| {spread([g.rate for _, g, _ in rs], '.0f')} "
              f"| {spread([x * 100 for x in share], '.0f')} % {judge(med(share) >= TARGET_THROUGHPUT and answered)} "
              f"| {med([a.cpu_ms for a, _, _ in rs]):.2f} / {med([b.cpu_ms for _, _, b in rs]):.2f} / "
              f"{med([g.cpu_ms for _, g, _ in rs]):.2f} | {spread(cpu, '.2f')}x {judge(med(cpu) <= TARGET_CPU)} "
              f"| {spread(own, '.2f')} | {spread(floor, '.2f')}x [printed] | {fds0} -> {fds1} "
              f"| {rss0:.0f} -> {rss1:.0f} {judge(flat)} | {throttled[name]} {judge(throttled[name] == 0)} |")
    print()
    print(f"pydantic-ai alone, same agent and model server, one process kept warm: one run at a time, first text "
          f"{alone.first_ms:.1f} ms, result {alone.final_ms:.1f} ms (p50); its bursts at concurrency {CONCURRENT_RUNS} "
          "above, CPU of its whole process; the gateway's, the daemon's process (all threads) from /proc, per message "
          "answered. 429s: calls the gateway's fakes refused (their budgets are off here, `budget_scale` 0; "
          "bench/streaming.py runs under the real ones)")
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print("targets:", "all met" if ok else "NOT all met")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, a burst of 300")
    parser.add_argument("--gateway-src", default=str(ROOT), help="the checkout whose daemon is measured")
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between messages in the latency rounds")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--burst", type=int, help="messages in a burst (default 150 with --quick, else 300)")
    parser.add_argument("--burst-rounds", type=int, help="rounds of bursts per platform, the median judged "
                        "(default 3 with --quick, else 5)")
    parser.add_argument("--keep-log", help="copy the daemon's log here")
    parser.add_argument("--latency-only", action="store_true", help="only the latency rounds (to try a change)")
    parser.add_argument("--profile", metavar="DIR", help="after the latency rounds, sample the daemon with py-spy over "
                        f"{PROFILE_MESSAGES} messages per platform: DIR/<platform>.svg and .txt, and a summary")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="the daemon's runtime.event_loop")
    parser.add_argument("--eager-tasks", action="store_true", help="the daemon's runtime.eager_tasks (Python 3.12+)")
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pydantic-ai-alone", type=int, metavar="CONCURRENCY", help=argparse.SUPPRESS)
    parser.add_argument("--pydantic-ai-rounds", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        asyncio.run(serve_model())
    elif args.pydantic_ai_alone:
        asyncio.run(pydantic_ai_alone(args.pydantic_ai_alone))
    elif args.pydantic_ai_rounds:
        asyncio.run(pydantic_ai_rounds())
    else:
        sys.exit(asyncio.run(main(args)))
