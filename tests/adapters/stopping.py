"""The daemon with a Slack, a Telegram and a Mattermost binding, as an operator runs it, stopped by SIGTERM.

Shared by tests/adapters/test_stop.py (exits 0 within a generous bound) and bench/stop.py (the
exact time from SIGTERM to exit). The three fake servers run in the caller's event loop on
loopback; the daemon is `agent-gateway run --config DIR` in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, write_config
from tests.fakes.mattermost import FakeMattermost
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.fakes.telegram import FakeTelegram

MM_TOKEN = "mm-stop-bot-token"
TELEGRAM_TOKEN = "123456:TEST-fake-token"
ENV = {
    "STOP_SLACK_BOT_TOKEN": BOT_TOKEN,
    "STOP_SLACK_APP_TOKEN": APP_TOKEN,
    "STOP_SLACK_SIGNING_SECRET": SIGNING_SECRET,
    "STOP_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
    "STOP_MM_TOKEN": MM_TOKEN,
}


@dataclass
class Platforms:
    slack: FakeSlack
    telegram: FakeTelegram
    mattermost: FakeMattermost

    def bindings(self) -> dict[str, dict[str, Any]]:
        return {
            "slack": {"platform": "slack", "agent": "assistant", "slack": {
                "bot_token": "env:STOP_SLACK_BOT_TOKEN", "app_token": "env:STOP_SLACK_APP_TOKEN",
                "signing_secret": "env:STOP_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": self.slack.api_url}},
            "telegram": {"platform": "telegram", "agent": "assistant", "telegram": {
                "token": "env:STOP_TELEGRAM_TOKEN", "api_url": self.telegram.api_url, "mode": "polling"}},
            "mattermost": {"platform": "mattermost", "agent": "assistant", "mattermost": {
                "url": self.mattermost.url, "token": "env:STOP_MM_TOKEN"}},
        }


@contextlib.asynccontextmanager
async def fake_platforms(*, answer_close: bool = True) -> AsyncIterator[Platforms]:
    """The three fake servers, each with the bot in it, on loopback in this event loop.

    `answer_close=False`: the Slack and Mattermost servers never answer a websocket close frame
    (as a connection that died without a word does not), so the client must drop it itself.
    """
    mattermost = FakeMattermost()
    mattermost.answer_close = answer_close
    await mattermost.start()
    try:
        mattermost.add_user("agentbot", is_bot=True, token=MM_TOKEN)
        async with FakeSlack() as slack, FakeTelegram(TELEGRAM_TOKEN) as telegram:
            slack.answer_close = answer_close
            yield Platforms(slack, telegram, mattermost)
    finally:
        await mattermost.stop()



class Daemon:
    """`agent-gateway run --config DIR` in a subprocess, its log in a file inside DIR.

    It listens on a port the system picks (`--listen 127.0.0.1:0`) and writes it to a port file,
    read by `wait_ready` (so daemons started side by side never race for a port); a restart
    listens on the port it had, which clients hold on to."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.env = env or {}
        self.port = 0  # known once `wait_ready` (or `bound_port`) has read the port file
        self.port_file = config / "daemon.port"
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path = config / "daemon.log"
        self.killed_at: list[float] = []  # monotonic times of each SIGKILL (tests/chaos/harness.py)

    async def start(self) -> Daemon:
        # `agent-gateway run`, as `python -m` from this checkout: the console script would run
        # whichever checkout the virtualenv was installed from.
        command = [sys.executable, "-m", "gateway.ops.cli"]
        env = {**os.environ, **ENV, **self.env}
        env.pop("NOTIFY_SOCKET", None)
        self.port_file.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:  # a file, not a pipe nobody reads; a restart appends
            self.proc = await asyncio.create_subprocess_exec(
                *command, "run", "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}",
                "--port-file", str(self.port_file), cwd=ROOT, env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=log,
            )
        return self

    async def bound_port(self, timeout: float = 60.0) -> int:
        """The port this start listens on, from its port file."""
        self.port = await port_from(self.port_file, self.proc, timeout, self.log)
        return self.port

    async def readiness(self) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                return json.loads(e.read() or b"null")
            except OSError:
                return None
        return await asyncio.to_thread(get)

    async def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        """Until /readyz says every binding is connected."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        await self.bound_port(timeout)
        state: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise AssertionError(f"the daemon exited with {self.proc.returncode}:\n{self.log()}")
            state = await self.readiness()
            if state and state.get("ready"):
                return state
            await asyncio.sleep(0.05)
        raise AssertionError(f"not ready after {timeout}s: {state}\n{self.log()}")

    async def sigterm(self, timeout: float) -> tuple[int | None, float]:
        """SIGTERM, then wait up to `timeout` s: (exit code or None if still running, seconds taken)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            code = None
        return code, time.monotonic() - started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def port_from(path: Path, proc: asyncio.subprocess.Process | None, timeout: float,
                    log: Callable[[], str]) -> int:
    """The port a daemon started with `--port-file path` wrote, once it listens."""
    assert proc is not None
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.returncode is not None:
            raise AssertionError(f"the daemon exited with {proc.returncode}:\n{log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no port file after {timeout}s:\n{log()}")
        await asyncio.sleep(0.02)
    return int(path.read_text())


def config_for(directory: Path, platforms: Platforms, port: int) -> Path:
    return write_config(directory, bindings=platforms.bindings(), gateway={"http": {"listen": f"127.0.0.1:{port}"}})


async def connected_daemon(directory: Path, platforms: Platforms) -> Daemon:
    """A daemon on a fresh config directory, started and connected on all three bindings."""
    directory.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(directory)
    config_for(directory, platforms, daemon.port)
    await daemon.start()
    try:
        await daemon.wait_ready()
    except BaseException:
        await daemon.close()
        raise
    return daemon
