"""`agent-gateway doctor` as an operator runs it: against fake Slack, a fake model server, an MCP
server of its own and the database on disk; a good deployment in a real process, the problems each
is told of through `cli.main` in this process (the same command, without the libraries' imports again)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, write_config
from .fakes.openai import FakeOpenAI
from .fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from .test_cli import run_cli
from .test_mcp import SERVER

ENV = {"DOCTOR_SLACK_BOT": BOT_TOKEN, "DOCTOR_SLACK_APP": APP_TOKEN, "DOCTOR_MODEL_KEY": "sk-test"}


async def doctor(config: Path, *flags: str) -> tuple[int, list[str], str]:
    """`agent-gateway doctor FLAGS --config CONFIG` in a process of its own, ENV in its environment."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.ops.cli", "doctor", *flags, "--config", str(config), cwd=ROOT,
        env={**os.environ, **ENV}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines(), err.decode()


async def doctor_here(monkeypatch: pytest.MonkeyPatch, config: Path, *flags: str,
                      env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """The same through `cli.main` in this process (tests/test_cli.py:run_cli), off the test's loop (the
    fakes run on it), ENV and `env` in this process's environment for the call."""
    with monkeypatch.context() as patched:
        for name, value in {**ENV, **(env or {})}.items():
            patched.setenv(name, value)
        done = await asyncio.to_thread(run_cli, "doctor", *flags, "--config", str(config))
    return done.returncode, done.stdout.splitlines(), done.stderr


def deployment(tmp_path: Path, slack: FakeSlack, model: FakeOpenAI, *, bot_token: str = "env:DOCTOR_SLACK_BOT",
               api_key: str = "env:DOCTOR_MODEL_KEY", mcp_url: str | None = None) -> Path:
    servers: list[dict[str, Any]] = [{"name": "tracker", "command": sys.executable, "args": [str(SERVER)],
                                      "tools": {"status": "allow"}}]
    if mcp_url:
        servers.append({"name": "wiki", "url": mcp_url})
    return write_config(
        tmp_path,
        agents={"assistant": {"name": "A", "model": "local:llama", "instructions": "Be brief.", "mcp_servers": servers}},
        bindings={"web": {"platform": "web", "agent": "assistant"},
                  "acme": {"platform": "slack", "agent": "assistant",
                           "slack": {"bot_token": bot_token, "app_token": "env:DOCTOR_SLACK_APP", "api_url": slack.api_url}}},
        gateway={"providers": {"local": {"kind": "openai-chat", "base_url": model.base_url, "api_key": api_key}}},
    )


async def test_a_good_deployment_is_ok_on_every_line(tmp_path: Path) -> None:
    model = await FakeOpenAI().start()
    try:
        async with FakeSlack() as slack:
            config = deployment(tmp_path / "c", slack, model)  # its database migrated to this version's head
            code, lines, err = await doctor(config, "--online")
    finally:
        await model.stop()
    assert code == 0, (lines, err)
    assert all(line.startswith("ok: ") for line in lines), lines
    text = "\n".join(lines)
    assert re.search(r"^ok: database sqlite\+aiosqlite:///.*: schema \w+, up to date$", text, re.M)
    assert "ok: binding acme (slack): the platform took its credentials" in text
    assert "ok: model local:llama (agents assistant): the provider answered" in text
    assert "ok: MCP servers: 1 started" in text
    assert [c.method for c in slack.calls] == ["auth.test", "apps.connections.open"]  # asked, never connected
    assert len(model.requests) == 1 and 1 in (model.requests[0].get("max_tokens"), model.requests[0].get("max_completion_tokens"))


async def test_a_broken_deployment_names_each_problem_and_what_to_change(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model = await FakeOpenAI().start()
    model.status = 404  # the model is not served there (a 5xx is retried by the SDK, with backoff, before the doctor hears)
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    try:
        async with FakeSlack() as slack:
            slack.scopes = [s for s in slack.scopes if s not in ("files:read", "users:read")]
            config = deployment(tmp_path / "c", slack, model, mcp_url=closed)
            # A second Slack binding whose token is not in the environment.
            (config / "bindings" / "beta.yaml").write_text(
                (config / "bindings" / "acme.yaml").read_text().replace("env:DOCTOR_SLACK_BOT", "env:DOCTOR_UNSET"))
            with sqlite3.connect(config / "gateway.db") as db:  # as a newer version would leave it
                db.execute("UPDATE alembic_version SET version_num = '0099_newer'")
            code, lines, err = await doctor_here(monkeypatch, config, "--online")
            offline_code, offline, _ = await doctor_here(monkeypatch, config)
    finally:
        await model.stop()
    assert code == 1 and "problems found" in err
    problems = [line for line in lines if line.startswith("problem: ")]
    assert all(" fix: " in line for line in problems), problems

    def one(prefix: str) -> str:
        [line] = [line for line in problems if line.startswith(prefix)]
        return line

    assert "0099_newer" in one("problem: database ") and "agent-gateway db restore FILE" in one("problem: database ")
    unset = one("problem: binding beta (slack): ")
    assert "bot_token (env:DOCTOR_UNSET): environment variable DOCTOR_UNSET is not set" in unset
    scopes = one("problem: binding acme (slack): ")
    assert "lacks the scopes users:read, files:read" in scopes and "reinstall the app" in scopes
    assert "the provider did not answer" in one("problem: model local:llama ")
    assert "wiki" in one("problem: MCP ") and "cannot be reached" in one("problem: MCP ")
    assert len(problems) == 5, problems
    # Without --online: what needs no connection, and nothing else.
    assert offline_code == 1
    assert [line.split(":")[1].strip() for line in offline if line.startswith("problem:")] == [
        "database sqlite+aiosqlite", "binding beta (slack)"]
    assert BOT_TOKEN not in "\n".join(lines + offline) + err  # a secret never printed


async def test_an_unusable_model_key_is_found_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = await FakeOpenAI().start()
    try:
        async with FakeSlack() as slack:
            config = deployment(tmp_path / "c", slack, model, api_key="env:DOCTOR_NO_KEY")
            (config / "gateway.db").unlink(missing_ok=True)  # a new deployment: no database file yet
            code, lines, _ = await doctor_here(monkeypatch, config)
    finally:
        await model.stop()
    assert code == 1
    [line] = [line for line in lines if line.startswith("problem: model")]
    assert "DOCTOR_NO_KEY is not set" in line and "fix: " in line
    assert "ok: database" in "\n".join(lines) and "does not exist yet" in "\n".join(lines)


async def test_telegram_and_mattermost_tokens_are_asked_online(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from .fakes.mattermost import FakeMattermost
    from .fakes.telegram import FakeTelegram

    mattermost = FakeMattermost()
    url = await mattermost.start()
    mattermost.add_user("agentbot", is_bot=True, token="mm-bot-token")
    mattermost.add_user("alice", token="mm-alice-token")
    try:
        async with FakeTelegram() as telegram:
            config = write_config(tmp_path / "c", bindings={
                "tg": {"platform": "telegram", "agent": "assistant",
                       "telegram": {"token": "env:DOCTOR_TG", "api_url": telegram.api_url}},
                "mm": {"platform": "mattermost", "agent": "assistant",
                       "mattermost": {"url": url, "token": "env:DOCTOR_MM"}},
                "mm-person": {"platform": "mattermost", "agent": "assistant",
                              "mattermost": {"url": url, "token": "env:DOCTOR_MM_ALICE"}},
            })
            code, lines, _ = await doctor_here(monkeypatch, config, "--online", env={
                "DOCTOR_TG": "999:not-the-bots-token", "DOCTOR_MM": "mm-bot-token", "DOCTOR_MM_ALICE": "mm-alice-token"})
    finally:
        await mattermost.stop()
    assert code == 1
    text = "\n".join(lines)
    assert "ok: binding mm (mattermost): the platform took its credentials" in text
    [person] = [line for line in lines if line.startswith("problem: binding mm-person")]
    assert "'alice''s, not a bot account's" in person
    [tg] = [line for line in lines if line.startswith("problem: binding tg (telegram): ")]
    assert "token (env:DOCTOR_TG): Telegram refused it" in tg and "@BotFather" in tg
    assert "not-the-bots-token" not in text  # the token never printed
