"""What an operator sees when the daemon cannot start: `check` says it first, `run` in one line."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bindings.models import RuntimeConfig
from gateway.ops.cli import event_loop_factory

from .conftest import ROOT, write_config
from .test_cli import run_cli


def cli(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    """`agent-gateway ARGS --config CONFIG` in a process of its own, as an operator or systemd starts it."""
    return subprocess.run([sys.executable, "-m", "gateway.ops.cli", *args, "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_check_refuses_what_run_refuses_with_file_and_line(tmp_path: Path) -> None:
    """A public listen without an api_token: `check` used to pass it and `run` refuse it. Both refuse it at
    the config's load, before `run` starts anything: read from `cli.main` in this process (`run` as its own
    process is the two tests below)."""
    config = write_config(tmp_path / "c", gateway={"http": {"listen": "0.0.0.0:8788"}})
    lines = (config / "gateway.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "listen:" in text)
    for command in ("check", "run"):
        done = run_cli(command, "--config", str(config))
        assert done.returncode == 1, (command, done.stderr)
        assert f"{config / 'gateway.yaml'}:{line}:" in done.stderr
        assert "http.listen: 0.0.0.0:8788 listens beyond loopback but http.api_token is not set" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_taken_port_is_one_line_naming_what_to_change(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "c", gateway={"http": {"listen": f"127.0.0.1:{port}"}})
        done = cli("run", config=config)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = [text for text in done.stderr.splitlines() if "cannot start" in text]
    assert f"http.listen 127.0.0.1:{port}: Address already in use" in line
    assert "set http.listen to a free port" in line
    assert len([text for text in done.stderr.splitlines() if "error" in text]) == 1, done.stderr


def test_a_database_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    config = write_config(tmp_path / "c", gateway={"database": {"url": f"sqlite+aiosqlite:///{blocker}/x/gateway.db"}})
    done = cli("run", config=config)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [text for text in done.stderr.splitlines() if "cannot start" in text]
    assert "database.url" in line


def test_an_event_loop_the_process_cannot_give_is_refused_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """`runtime` in gateway.yaml: a daemon never runs on another loop than the one configured."""
    assert event_loop_factory(RuntimeConfig()) is None, "asyncio's own loop by default"
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed: its import fails
    with pytest.raises(RuntimeError, match=r"pip install 'agent-gateway\[uvloop\]'"):
        event_loop_factory(RuntimeConfig(event_loop="uvloop"))
    eager = RuntimeConfig(eager_tasks=True)
    if hasattr(asyncio, "eager_task_factory"):
        assert event_loop_factory(eager) is None
    else:
        with pytest.raises(RuntimeError, match="runtime.eager_tasks needs Python 3.12 or later"):
            event_loop_factory(eager)


def test_the_started_daemon_collects_garbage_with_the_young_threshold_raised() -> None:
    """`run` holds the collector off through start-up; once started it must be on again (cyclic garbage
    would otherwise pile up for the process's life), with the young generation collected every
    YOUNG_COLLECTION_EVERY allocations rather than CPython's 700 (bench/README.md, Round 8). In a
    process of its own: freezing this one's heap would change every later test's collector."""
    code = ("import gc; gc.disable()\n"
            "from gateway.daemon import YOUNG_COLLECTION_EVERY, freeze_startup_objects\n"
            "before = gc.get_threshold()\n"
            "freeze_startup_objects()\n"
            "print(gc.isenabled(), gc.get_threshold() == (YOUNG_COLLECTION_EVERY, *before[1:]), "
            "YOUNG_COLLECTION_EVERY > before[0], gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "True"]
