"""What an MCP server says besides its answers, as the operator reads it in the daemon's own log
(`agent-gateway run` as a process, its stderr): stdout noise, log notifications and stderr, each under
the server's name, never above warning, without tracebacks, and rate-limited (docs/security.md, MCP servers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aiohttp

from .conftest import wait_for
from .test_approvals import Chat
from .test_mcp import SERVER, config
from .test_operations import Daemon


async def test_a_servers_noise_is_logged_under_its_name_at_most_warning_and_rate_limited(tmp_path: Path) -> None:
    cfg = config(tmp_path / "c", [{"name": "tracker", "command": sys.executable,
                                   "args": [str(SERVER), "--extras", "--noisy"], "tools": {"chatter": "allow"}}])
    gateway_yaml = cfg / "gateway.yaml"
    gateway_yaml.write_text(gateway_yaml.read_text() + "logging:\n  format: json\n")
    daemon = await Daemon(cfg).start()
    try:
        async with aiohttp.ClientSession(daemon.url("")) as s:
            chat = await Chat(s).open()
            # The server's first connection, as /readyz shows it, before the run that calls it: a run
            # waits for a server still starting only briefly (pool.FIRST_WAIT, tested in
            # tests/test_mcp_liveness.py), and on a loaded machine this one's start took longer.
            async def up() -> bool:
                return (await (await s.get("/readyz")).json())["mcp"]["ops/tracker"]["state"] == "up"
            await wait_for(up, timeout=60, interval=0.1, what="the tracker server up")
            await chat.say("tracker_chatter api")
            assert await wait_for(chat.replies, timeout=30, what="the reply") == ["[tracker_chatter success: chattered]"]
            await wait_for(lambda: "not logged" in daemon.log_path.read_text(), what="the rate limit's line")
    finally:
        await daemon.signal(15)
        await daemon.wait()
        await daemon.close()
    lines = [json.loads(line) for line in daemon.stderr.decode().splitlines() if line.startswith("{")]
    assert not [line for line in daemon.stderr.decode().splitlines() if not line.startswith("{")], \
        "a line reached the daemon's stderr without going through its log"
    ours = [(r["level"], r["msg"]) for r in lines if "ops/tracker" in r["msg"]]
    assert ("warning", "MCP server ops/tracker: printed a line that is not JSON-RPC (ignored): "
                       "tracker v1.0 starting, hello from stdout") in ours
    assert ("warning", "MCP server ops/tracker: logged critical (tracker.core): api is melting") in ours
    stderr = [msg for level, msg in ours if msg.startswith("MCP server ops/tracker: stderr: api stderr line")]
    assert stderr[:2] == ["MCP server ops/tracker: stderr: api stderr line 0", "MCP server ops/tracker: stderr: api stderr line 1"]
    assert len(stderr) < 30  # 100 lines written; a server's stderr may take 30 lines a minute
    assert ("warning", "MCP server ops/tracker: more than 30 stderr lines in a minute; the rest of this minute's are "
                       "not logged") in ours
    assert not [r for r in lines if r["level"] in ("error", "critical")]
    assert not [r for r in lines if "exc" in r], "a traceback for a server's noise"
