"""The daemon under faults: a steady stream of messages in many conversations, SIGKILL at random.

Shared by tests/chaos/ (a short stream, a few kills, run in CI) and bench/chaos.py (longer,
prints the table). The daemon is `agent-gateway run` in its own process (tests/adapters/
stopping.py's `Daemon`); the fake Slack (Socket Mode, redelivering unacked envelopes as real
Slack does) and the scripted OpenAI-compatible model run in the caller's event loop on loopback;
web API clients retry as a real client would (same Idempotency-Key until 202 or 409).

Every figure is read where a person would see it: the bot's posts in each Slack thread, the
assistant turns of each web conversation. A message is sent only after the answer to the one
before it in its conversation arrived (or its wait ran out: then it counts as lost), so an
answer maps to one message, and any extra post in a thread is a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.adapters.stopping import Daemon
from tests.conftest import database_url, write_config
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.support.settled import daemon_parts, settled

ANSWER = "Hello from the fake model."  # FakeOpenAI's scripted answer
CHANNEL = "C0CHAOS"
PERSON = "U0ADA"
LEASE_S = 6.0


@dataclass
class Tally:
    """What a person would count, per store."""

    store: str = ""
    kills: int = 0
    sent: int = 0
    admitted: int = 0
    answered: int = 0
    duplicated: int = 0
    lost: int = 0
    wrong: int = 0  # an answer whose final text is not the model's
    redelivered: int = 0
    parked: int = 0  # gated calls whose card showed (tests/chaos/parked.py)
    resumed: int = 0  # of those, decided and answered
    # Approved calls a kill stopped between their start mark and the call: not run, and not run
    # again, the model told so (docs/approvals.md: an approved call starts at most once).
    unstarted: int = 0
    problems: list[str] = field(default_factory=list)
    threads: list[tuple[str, int]] = field(default_factory=list, repr=False)  # Slack thread, messages sent
    webs: list[tuple[str, int]] = field(default_factory=list, repr=False)  # web conversation, messages sent


@dataclass
class World:
    """The fakes, the daemon's config, and the daemon itself (restartable)."""

    slack: FakeSlack
    model: FakeOpenAI
    daemon: Daemon
    url: str = ""  # the database's
    ops_log: Path | None = None  # with `gated`: one line per call of the gated `deploy` tool

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"

    def parts(self) -> list[Any]:
        """What `settled()` waits on: the daemon's runs and outbound queue, the fakes."""
        return [daemon_parts(self.api, self.url), self.slack, self.model]


@contextlib.asynccontextmanager
async def world(directory: Path, store: str, *, model_delay: float = 0.08, gated: bool = False,
                delegated: int = 0, busy_timeout: float | None = None) -> AsyncIterator[World]:
    """`gated`: the agent also has the gated `deploy` tool (tests/support/plugin_ops.py), which
    the model calls for a message "deploy NAME" (tests/chaos/parked.py drives those).
    `delegated` (with `gated`): the tool is a sync delegate's instead, `delegated` levels down
    (1: the agent's delegate "ops" holds it; 2: through "middle" to "ops"), and the model calls
    `task(AGENT, REST)` for a message "delegate AGENT REST".
    `busy_timeout`: the database's `busy_timeout_seconds` (its default when None)."""
    from tests.adapters.stopping import ENV  # the Slack tokens the daemon's env names

    directory.mkdir(parents=True, exist_ok=True)
    model = await FakeOpenAI(delay=model_delay).start()
    ops_log = directory / "ops.log" if gated else None
    env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "not-needed"}
    agent: dict[str, Any] = {"name": "Chaos agent", "model": "openai-chat:chaos-model",
                             "instructions": "You are a test agent."}
    agents = {"assistant": agent}
    extra: dict[str, Any] = {}
    if gated:
        model.tool_call = deploy_call
        env["OPS_LOG"] = str(ops_log)
        extra["plugins"] = ["tests.support.plugin_ops"]
        holder = agent
        for level, name in enumerate(["middle", "ops"][2 - delegated:]):  # the chain down to the tool's holder
            holder.update(subagents=[name],
                          capabilities=[{"id": "subagents", "config": {"max_depth": delegated - level}}])
            holder = agents[name] = {"name": name.title(), "description": f"The {name} delegate",
                                     "model": "openai-chat:chaos-model"}
        holder["capabilities"] = [{"id": "test_ops"}]
    database: dict[str, Any] = {"run_lease_seconds": LEASE_S}
    if busy_timeout is not None:
        database["busy_timeout_seconds"] = busy_timeout
    try:
        async with FakeSlack() as slack, database_url(store, directory) as url:
            slack.redeliver = True
            slack.add_user(PERSON, "ada", real_name="Ada")
            slack.add_channel(CHANNEL, "chaos", members=[PERSON, slack.bot_user_id])
            daemon = Daemon(directory, env=env)
            assert ENV["STOP_SLACK_BOT_TOKEN"]
            write_config(
                directory,
                agents=agents,
                bindings={
                    "slack": {"platform": "slack", "agent": "assistant", "slack": {
                        "bot_token": "env:STOP_SLACK_BOT_TOKEN", "app_token": "env:STOP_SLACK_APP_TOKEN",
                        "signing_secret": "env:STOP_SLACK_SIGNING_SECRET", "mode": "socket",
                        "api_url": slack.api_url}},
                    "web": {"platform": "web", "agent": "assistant"},
                },
                # A killed process's runs wait out their lease on PostgreSQL: short here, so the
                # drain is seconds (the default is 60 s).
                gateway={"database": {"url": url, **database},
                         "http": {"listen": f"127.0.0.1:{daemon.port}"}, **extra},
            )
            await daemon.start()
            try:
                await daemon.wait_ready()
                yield World(slack, model, daemon, url, ops_log)
            finally:
                await daemon.close()
    finally:
        await model.stop()


_DEPLOY = re.compile(r"\bdeploy (\S+)")
_DELEGATE = re.compile(r"\bdelegate (\S+) (.+)", re.S)


def deploy_call(request: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The fake model's script with `gated`: "deploy NAME" in the person's last message calls `deploy`;
    "delegate AGENT REST", to an agent offered `task`, hands REST to AGENT."""
    content = request["messages"][-1].get("content")
    text = content if isinstance(content, str) else " ".join(
        str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
    offered = {t.get("function", {}).get("name") for t in request.get("tools") or []}
    found = _DELEGATE.search(text)
    if found and "task" in offered:
        return "task", {"agent": found.group(1), "prompt": found.group(2)}
    found = _DEPLOY.search(text)
    return ("deploy", {"service": found.group(1)}) if found else None


async def kill_and_restart(w: World) -> None:
    """SIGKILL (no shutdown of any kind), then start again on the same config and port."""
    assert w.daemon.proc is not None
    w.daemon.killed_at.append(time.monotonic())
    w.daemon.proc.kill()
    await w.daemon.proc.wait()
    await w.daemon.start()
    await w.daemon.wait_ready(timeout=90)


class KillWindow:
    """While the stream sends and the killer kills: `duration` s, or longer until `min_kills` kills
    (a slow machine restarts slowly); `stop()` ends it early. The killer asks as the senders do: when
    it waited for a sender to find the time up, a loaded machine (a restart of 10-15 s, each process
    killed 2-5 s after it was ready, before its first answer) kept every sender waiting for an answer
    and so the killer killing, until each sender's wait ran out: ten messages "lost" on PostgreSQL."""

    def __init__(self, tally: Tally, duration: float, min_kills: int) -> None:
        self._tally, self._until, self._min_kills = tally, time.monotonic() + duration, min_kills
        self._stopped = asyncio.Event()

    def going(self) -> bool:
        if not self._stopped.is_set() and (time.monotonic() < self._until or self._tally.kills < self._min_kills):
            return True
        self._stopped.set()  # kills stop when sending does; the conversations then drain
        return False

    def stop(self) -> None:
        self._stopped.set()

    async def pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the window is stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)


async def killer(w: World, tally: Tally, window: KillWindow, *, every: tuple[float, float], rng: random.Random) -> None:
    while window.going():
        await window.pause(rng.uniform(*every))
        if not window.going():
            return
        await kill_and_restart(w)
        tally.kills += 1


# --- the senders ----------------------------------------------------------------------------


def thread_answers(slack: FakeSlack, thread: str) -> list[str]:
    return [m.text for m in slack.bot_messages(CHANNEL) if m.thread_ts == thread]


async def _until(check: Any, wait: float) -> bool:
    """Whether `check()` came true within `wait` seconds."""
    deadline = time.monotonic() + wait
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


Until = float | Callable[[], bool]  # a monotonic deadline, or whether to go on sending


def _going(until: Until) -> bool:
    return until() if callable(until) else time.monotonic() < until


async def slack_conversation(w: World, tally: Tally, until: Until, *, wait: float, tag: str) -> None:
    """A thread: a mention starts it, follow-ups in it, each after the previous one's answer."""
    thread: str | None = None
    sent = 0
    while _going(until):
        msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> {tag} message {sent}",
                                         thread_ts=thread)
        thread = thread or msg.ts
        sent += 1
        tally.sent += 1
        tally.admitted += 1  # the fake delivers it until the daemon acks it (after storing it)
        for event in events:
            await w.slack.send_event(event)

        async def answered(thread: str = thread, n: int = sent) -> bool:
            return sum(t.strip() == ANSWER for t in thread_answers(w.slack, thread)) >= n
        if not await _until(answered, wait):
            tally.lost += 1
            tally.problems.append(f"slack {tag}: no answer to message {sent - 1} within {wait:g}s")
            break
        tally.answered += 1
    if thread is not None:
        tally.threads.append((thread, sent))


async def _request(http: aiohttp.ClientSession, method: str, url: str, *, deadline: float, **kw: Any) -> tuple[int, Any]:
    """As a client does: retried while the daemon is down or busy, until `deadline`; a POST is
    JSON, as the API takes every state-changing request (an empty object when there is no body)."""
    if method == "POST" and "json" not in kw and "data" not in kw:
        kw["json"] = {}
    while True:
        try:
            async with http.request(method, url, timeout=aiohttp.ClientTimeout(total=10), **kw) as r:
                if r.status not in (502, 503):
                    return r.status, await r.json()
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        if time.monotonic() > deadline:
            return 0, None
        await asyncio.sleep(0.2)


async def web_conversation(w: World, tally: Tally, until: Until, *, wait: float, tag: str) -> None:
    async with aiohttp.ClientSession() as http:
        status, body = await _request(http, "POST", f"{w.api}/api/v1/conversations", json={}, deadline=time.monotonic() + wait)
        if status != 201:
            tally.problems.append(f"web {tag}: could not create a conversation ({status})")
            return
        conv = body["id"]
        url = f"{w.api}/api/v1/conversations/{conv}/messages"
        sent = 0
        while _going(until):
            tally.sent += 1
            status, body = await _request(http, "POST", url, json={"text": f"{tag} message {sent}"},
                                          headers={"Idempotency-Key": uuid.uuid4().hex},
                                          deadline=time.monotonic() + wait)
            if status not in (202, 409):  # 409: admitted by a try whose answer was lost in a kill
                tally.problems.append(f"web {tag}: message {sent} not admitted ({status} {body})")
                break
            sent += 1
            tally.admitted += 1

            async def answered(n: int = sent) -> bool:
                status, body = await _request(http, "GET", url, deadline=time.monotonic() + wait)
                turns = body["messages"] if status == 200 else []
                return sum(t["role"] == "assistant" and t["status"] == "final" for t in turns) >= n
            if not await _until(answered, wait):
                tally.lost += 1
                tally.problems.append(f"web {tag}: no answer to message {sent - 1} within {wait:g}s")
                break
            tally.answered += 1
        tally.webs.append((conv, sent))


# --- the count ------------------------------------------------------------------------------


async def count_after_drain(w: World, tally: Tally) -> None:
    """Once every conversation ended and nothing is left that could post: extra posts are
    duplicates, other texts are wrong."""
    await settled(*w.parts())
    for thread, n in tally.threads:
        texts = thread_answers(w.slack, thread)
        tally.duplicated += max(0, len(texts) - n)
        tally.wrong += sum(t.strip() != ANSWER for t in texts)
        if len(texts) != n or any(t.strip() != ANSWER for t in texts):
            tally.problems.append(f"slack thread {thread}: {n} messages, answers {texts}")
    async with aiohttp.ClientSession() as http:
        for conv, n in tally.webs:
            status, body = await _request(http, "GET", f"{w.api}/api/v1/conversations/{conv}/messages",
                                          deadline=time.monotonic() + 30)
            turns = body["messages"] if status == 200 else []
            answers = [t for t in turns if t["role"] == "assistant"]
            users = [t for t in turns if t["role"] == "user"]
            tally.duplicated += max(0, len(answers) - n) + max(0, len(users) - n)
            tally.wrong += sum(not t["text"].endswith(ANSWER) for t in answers)
            if len(answers) != n or len(users) != n:
                tally.problems.append(f"web {conv}: {n} messages, turns {[(t['role'], t['status']) for t in turns]}")
    tally.redelivered = w.slack.redelivered


async def stream_under_kills(
    w: World, tally: Tally, *, slack_threads: int, web_conversations: int, duration: float,
    every: tuple[float, float], wait: float = 60.0, seed: int = 22, min_kills: int = 0,
) -> Tally:
    """The stream (conversations started a little apart) with the killer running until it ends:
    after `duration` s, or later, once `min_kills` kills happened (a slow machine restarts slowly)."""
    rng = random.Random(seed)
    window = KillWindow(tally, duration, min_kills)
    kill = asyncio.create_task(killer(w, tally, window, every=every, rng=rng))

    async def later(delay: float, coro: Any) -> None:
        await asyncio.sleep(delay)
        await coro

    going = window.going
    senders = [later(i * 0.3, slack_conversation(w, tally, going, wait=wait, tag=f"s{i}")) for i in range(slack_threads)]
    senders += [later(i * 0.3 + 0.15, web_conversation(w, tally, going, wait=wait, tag=f"w{i}"))
                for i in range(web_conversations)]
    try:
        await asyncio.gather(*senders)
    finally:
        window.stop()
        await kill
    await count_after_drain(w, tally)
    return tally
