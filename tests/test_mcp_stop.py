"""Stopping an MCP connection never swallows the cancellation of whoever is stopping it (gateway/mcp/pool.py).

A server that is slow to let go (here: a program that never answers and ignores its stdin closing, which
the MCP client gives a grace period before it terminates it) keeps the connection's task busy for a while
after it is cancelled. A daemon's stop that is itself cancelled meanwhile (a second Ctrl-C, a shutdown
deadline) must end, not carry on as if nothing happened.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from bindings.models import McpServerSpec
from gateway.mcp.pool import McpConnection

from .conftest import wait_for

# Never answers initialize, and lets its stdin close without exiting.
SILENT = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\nsys.stdin.close()\ntime.sleep(4)\n"


async def test_a_stop_that_is_itself_cancelled_ends_cancelled(tmp_path: Path) -> None:
    started = tmp_path / "started"
    spec = McpServerSpec.model_validate({"name": "silent", "command": sys.executable,
                                         "args": ["-c", SILENT, str(started)]})
    connection = McpConnection("agent", spec, retry=False)
    connection.start()
    await wait_for(started.exists, what="the server program to start")
    stopping = asyncio.create_task(connection.stop())
    for _ in range(3):
        await asyncio.sleep(0)  # stop() has cancelled the connection's task and waits for its teardown
    assert not stopping.done() and connection.state == "connecting"
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert stopping.cancelled()
    await connection.stop()  # a second stop finishes the job: the program is gone, nothing left running
    assert connection.state == "stopped"
