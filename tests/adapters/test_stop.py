"""SIGTERM with a Slack, a Telegram and a Mattermost binding connected and idle: the daemon exits 0, promptly.

The real daemon in its own process (`agent-gateway run`) against the fake servers on loopback.
The bound here is generous (machines are shared); bench/stop.py measures the real figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .stopping import connected_daemon, fake_platforms

BOUND_S = 8.0


@pytest.mark.parametrize("peers", ["answer close", "never answer close"])
async def test_sigterm_with_three_platforms_connected_exits_0_promptly(tmp_path: Path, peers: str) -> None:
    async with fake_platforms(answer_close=peers == "answer close") as platforms:
        daemon = await connected_daemon(tmp_path / "config", platforms)
        try:
            ready = await daemon.readiness()
            assert ready is not None
            assert {b: s["connected"] for b, s in ready["bindings"].items()} == {
                "slack": True, "telegram": True, "mattermost": True}
            code, took = await daemon.sigterm(BOUND_S)
            assert code == 0, f"SIGTERM: exit {code} after {took:.1f}s (None: still running)\n{daemon.log()}"
        finally:
            await daemon.close()
    log = daemon.log()
    assert "level=error" not in log and "Traceback" not in log, log
    assert "Unclosed" not in log, f"a connection was left open:\n{log}"
