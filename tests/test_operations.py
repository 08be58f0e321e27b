"""The daemon as an operator runs it: a real process, signals, sd_notify on a real socket."""

from __future__ import annotations

import asyncio
import json
import re
import os
import signal
import socket
import sqlite3
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any


from .adapters.stopping import port_from
from .conftest import ROOT, dump_yaml, wait_for, write_config
from .fakes.openai import FakeOpenAI


class Daemon:
    """`agent-gateway run` in a subprocess, with a NOTIFY_SOCKET we listen on."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.port = 0  # the config's `127.0.0.1:0`: the system picks it, the port file says which
        self.port_file = config / "daemon.port"
        self.before_exec: Callable[[], None] | None = None  # run in the child before the daemon starts
        self.sock_dir = tempfile.mkdtemp()
        self.sock_path = os.path.join(self.sock_dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.sock_path)
        self.sock.setblocking(False)
        self.env = {**os.environ, "NOTIFY_SOCKET": self.sock_path, "WATCHDOG_USEC": "400000", **(env or {})}
        self.env.pop("WATCHDOG_PID", None)
        self.proc: asyncio.subprocess.Process | None = None
        self.notes: list[str] = []
        self.stderr = b""

    async def start(self) -> Daemon:
        # A file, not a pipe: a pipe nobody reads fills up and blocks the daemon's logging.
        self.log_path = self.config / "daemon.log"
        with open(self.log_path, "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.ops.cli", "run", "--config", str(self.config),
                "--port-file", str(self.port_file), cwd=ROOT, env=self.env,
                stdout=asyncio.subprocess.DEVNULL, stderr=log, preexec_fn=self.before_exec,
            )
        self.port = await port_from(self.port_file, self.proc, 60, lambda: self.log_path.read_text(errors="replace"))
        await wait_for(lambda: "READY=1" in self.read_notes(), timeout=60, what="READY=1")
        return self

    def read_notes(self) -> list[str]:
        while True:
            try:
                self.notes.extend(self.sock.recv(4096).decode().split("\n"))
            except BlockingIOError:
                return self.notes

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.request_with_headers(method, path, body, {})

    async def request_with_headers(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        def go() -> tuple[int, Any]:
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(self.url(path), data=data, method=method,
                                         headers={"Content-Type": "application/json", **headers})
            try:
                with urllib.request.urlopen(req, timeout=20) as r:
                    return r.status, json.loads(r.read() or b"null")
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read() or b"null")
        return await asyncio.to_thread(go)

    async def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def wait(self, timeout: float = 60) -> int:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        self.stderr = self.log_path.read_bytes()
        return code

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.sock.close()


def _db_rows(config: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(config / "gateway.db") as db:
        return db.execute(sql).fetchall()


async def test_sd_notify_reload_and_stop_in_order(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c")
    daemon = await Daemon(cfg).start()
    try:
        await wait_for(lambda: daemon.read_notes().count("WATCHDOG=1") >= 2, what="two watchdog pings")
        # An invalid change is refused; the daemon keeps serving the last good config.
        (cfg / "bindings" / "web.yaml").write_text("platform: web\nagent: assistant\nprompt: [unclosed\n")
        await daemon.signal(signal.SIGHUP)
        await wait_for(lambda: daemon.read_notes().count("READY=1") == 2, what="READY=1 after the refused reload")
        status, body = await daemon.request("POST", "/api/v1/conversations")
        assert status == 201
        # A valid change applies.
        (cfg / "bindings" / "web.yaml").write_text(dump_yaml({"platform": "web", "agent": "assistant", "prompt": "new"}))
        status, body = await daemon.request("POST", "/api/v1/admin/reload")
        assert status == 200 and body["reloaded"] is True
        await daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        notes = [n for n in daemon.read_notes() if n]
        order = [n for n in notes if n in ("READY=1", "RELOADING=1", "STOPPING=1")]
        assert order[:3] == ["READY=1", "RELOADING=1", "READY=1"]
        assert order[-1] == "STOPPING=1"
        assert any(n.startswith("MONOTONIC_USEC=") for n in notes)
        assert any(n.startswith("STATUS=") for n in notes)
        # The refused reload named the file and the line.
        assert re.search(rf"reload refused: {re.escape(str(cfg))}/bindings/web.yaml:\d+:\d+: ", daemon.stderr.decode())
    finally:
        await daemon.close()


async def test_sigterm_with_a_run_in_flight(tmp_path: Path) -> None:
    fake = await FakeOpenAI(chunks=[f"word{i} " for i in range(100)], delay=0.1).start()
    cfg = write_config(
        tmp_path / "c",
        agents={"assistant": {"name": "A", "model": "local:slow"}},
        gateway={"providers": {"local": {"kind": "openai-chat", "base_url": fake.base_url}},
                 "limits": {"shutdown_grace_seconds": 1}},
    )
    daemon = await Daemon(cfg).start()
    try:
        _, conv = await daemon.request("POST", "/api/v1/conversations")
        status, sent = await daemon.request("POST", f"/api/v1/conversations/{conv['id']}/messages", {"text": "go"})
        assert status == 202
        await wait_for(lambda: fake.requests, what="the model to be asked")
        await asyncio.sleep(0.3)  # pacing only: a few words of the reply stream before the stop
        await daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        [(run_status,)] = _db_rows(cfg, f"select status from runs where id = '{sent['run_id']}'")
        assert run_status == "stopped"
        [(reply,)] = _db_rows(cfg, "select text from messages where role = 'assistant'")
        assert reply.startswith("word0 ") and reply.endswith("_I was stopped before I finished (the gateway is restarting)._")
    finally:
        await daemon.close()
        await fake.stop()


async def test_reload_reconnects_only_changed_bindings(tmp_path: Path) -> None:
    from .conftest import running_gateway

    cfg = write_config(tmp_path / "c", bindings={
        "web": {"platform": "web", "agent": "assistant"},
        "web2": {"platform": "web", "agent": "assistant", "enabled": False},
    })
    async with running_gateway(cfg) as gw:
        before = gw.adapters["web"]
        (cfg / "agents" / "assistant.yaml").write_text(dump_yaml({"name": "Renamed", "model": "demo"}))
        ok, problems = await gw.reload_from_disk()
        assert ok and problems == []
        assert gw.adapters["web"] is before, "an unchanged binding reconnected"
        assert gw.config.agents["assistant"].name == "Renamed"
        (cfg / "bindings" / "web.yaml").write_text(dump_yaml({"platform": "web", "agent": "assistant", "prompt": "p"}))
        ok, _ = await gw.reload_from_disk()
        assert ok and gw.adapters["web"] is not before
        (cfg / "agents" / "assistant.yaml").write_text("name: [broken\n")
        ok, problems = await gw.reload_from_disk()
        assert not ok and problems[0].startswith(f"{cfg}/agents/assistant.yaml:2:1: not valid YAML")
        assert gw.config.agents["assistant"].name == "Renamed"


async def test_a_reload_says_which_changed_settings_wait_for_a_restart(tmp_path: Path, caplog: Any) -> None:
    """The scheduler's slots, the uploads' budget, the pacers, the database and the listener are made
    once: a reload that changes one must say so, not appear to apply it (it was silent on
    `limits.concurrent_runs`)."""
    import logging

    from .conftest import running_gateway

    cfg = write_config(tmp_path / "c", gateway={"limits": {"concurrent_runs": 4}})
    async with running_gateway(cfg) as gw:
        text = (cfg / "gateway.yaml").read_text()
        (cfg / "gateway.yaml").write_text(text.replace("concurrent_runs: 4", "concurrent_runs: 9"))
        with caplog.at_level(logging.WARNING, logger="gateway"):
            ok, _ = await gw.reload_from_disk()
        assert ok
        said = [r.getMessage() for r in caplog.records if "next restart" in r.getMessage()]
        assert said == ["gateway.yaml limits.concurrent_runs changed: it takes effect at the next restart"]
        assert gw.scheduler.limit._value <= 4  # what it says is what it does: still the start's slots


async def test_reload_lets_a_run_in_flight_finish_on_its_adapter(tmp_path: Path) -> None:
    from .conftest import running_gateway

    fake = await FakeOpenAI(chunks=[f"w{i} " for i in range(8)], delay=0.1).start()
    cfg = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "local:slow"}},
                       gateway={"providers": {"local": {"kind": "openai-chat", "base_url": fake.base_url}}})
    try:
        async with running_gateway(cfg) as gw:
            import aiohttp

            async with aiohttp.ClientSession(gw.url) as s:
                conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
                sent = await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "go"})).json()
                await wait_for(lambda: fake.requests, what="the model to be asked")
                before = gw.adapters["web"]
                (cfg / "bindings" / "web.yaml").write_text(dump_yaml({"platform": "web", "agent": "assistant",
                                                                      "prompt": "changed"}))
                ok, _ = await gw.reload_from_disk()
                assert ok and gw.adapters["web"] is not before
                run = await gw.store.run(sent["run_id"])
                assert run.status == "finished", "the reload cut off a run in flight"
                [reply] = [m for m in await gw.store.messages(conv) if m.role == "assistant"]
                assert reply.text == "".join(f"w{i} " for i in range(8)).strip()
    finally:
        await fake.stop()
