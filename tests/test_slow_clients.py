"""Slow clients do not exhaust the daemon (docs/security.md, "The web chat and the HTTP API").

The daemon runs as its own process (`agent-gateway run`), started with the soft open-files limit
a plain shell gives (1,024) under the machine's hard limit, as issue 29 found it. 1,100 clients
that send a header byte now and then must not keep /healthz from answering, and must be cut
off at the header timeout; a body that stalls is answered 408 and cut off; when descriptors do
run out, the log says so in a line, not in thousands.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
from pathlib import Path

from gateway.ops.open_files import REPORT_EVERY_ENV

from .conftest import wait_for, write_config
from .test_operations import Daemon

SLOW = 1_100
HEADER_TIMEOUT = 8.0  # seconds; long enough for every slow client to connect before the first is cut
BODY_TIMEOUT = 2.0
PREFIX = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


class LimitedDaemon(Daemon):
    """The daemon started with RLIMIT_NOFILE set to (soft, hard) before it runs."""

    def __init__(self, config: Path, soft: int, hard: int, env: dict[str, str] | None = None) -> None:
        super().__init__(config, env)
        self.before_exec = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _raise_own_limit() -> int:
    """This process holds the clients' ends: as many descriptors as the system lets it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", gateway={"http": {"listen": "127.0.0.1:0",
                                                              "header_timeout_seconds": HEADER_TIMEOUT,
                                                              "body_timeout_seconds": BODY_TIMEOUT}})


async def _slow_client(port: int, opened: list[int], closed: list[float]) -> None:
    """Sends a request head a byte every second, never finishing it, until the server hangs up."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    try:
        writer.write(PREFIX)
        opened.append(1)
        while True:
            try:
                if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                    break
            except TimeoutError:
                writer.write(b"a")
            except ConnectionError:
                break
        closed.append(loop.time())
    finally:
        writer.close()


async def _healthz(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return int((await reader.read()).split(b" ", 2)[1])
    finally:
        writer.close()


async def test_a_thousand_slow_clients_leave_healthz_answering_and_are_cut_off(tmp_path: Path) -> None:
    hard = _raise_own_limit()
    assert hard >= 4 * SLOW, f"this machine's hard open-files limit ({hard}) is too low for the test"
    daemon = LimitedDaemon(_config(tmp_path), soft=1024, hard=hard)
    await daemon.start()
    try:
        loop = asyncio.get_running_loop()
        opened: list[int] = []
        closed: list[float] = []
        started = loop.time()
        clients = [asyncio.create_task(_slow_client(daemon.port, opened, closed)) for _ in range(SLOW)]
        await wait_for(lambda: len(opened) == SLOW, timeout=30, what="every slow client to connect")
        assert not closed, "a slow client was cut off before the header timeout"
        # The bar: /healthz answers within 1 s while they hang on (generously bounded here).
        async with asyncio.timeout(5):
            assert await _healthz(daemon.port) == 200
        # Every one is cut off at the header timeout: within the 30 s, whatever bytes trickled in.
        async with asyncio.timeout(30):
            await asyncio.gather(*clients)
        assert len(closed) == SLOW and max(closed) - started < 30
        assert await _healthz(daemon.port) == 200
        log = daemon.log_path.read_text()
        assert "raised the soft limit from 1024" in log and "out of system resource" not in log
    finally:
        await daemon.close()


async def test_a_stalled_body_is_answered_408_and_cut_off(tmp_path: Path) -> None:
    daemon = LimitedDaemon(_config(tmp_path), *resource.getrlimit(resource.RLIMIT_NOFILE))
    await daemon.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
        body = json.dumps({"action": "erase", "pad": "x" * 100}).encode()
        writer.write(b"POST /api/v1/me/memory HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])  # and then nothing
        async with asyncio.timeout(30):
            answer = await reader.read()  # to the end: the server closes the connection
        assert answer.startswith(b"HTTP/1.1 408 ")
        writer.close()
        # A route that answers without reading the body: answered, then the stalled rest ends the connection.
        reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
        writer.write(b"POST /api/v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        async with asyncio.timeout(30):
            answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 201 ")
        writer.close()
        status, _ = await daemon.request("GET", "/readyz")
        assert status == 200
        assert "Traceback" not in daemon.log_path.read_text(), "a stalled body is not an error of ours"
    finally:
        await daemon.close()


async def test_running_out_of_descriptors_is_one_line_not_a_flood(tmp_path: Path) -> None:
    _raise_own_limit()
    # Nothing to raise to; the report period shortened from a minute so that the second line (which
    # counts the errors held back since the first) is the end of the wait, not a fixed window.
    daemon = LimitedDaemon(_config(tmp_path), soft=200, hard=200, env={REPORT_EVERY_ENV: "2"})
    await daemon.start()
    try:
        opened: list[int] = []
        closed: list[float] = []
        clients = [asyncio.create_task(_slow_client(daemon.port, opened, closed)) for _ in range(400)]
        # asyncio's accept loop retries every second, one error per pending connection each round.
        await wait_for(lambda: _exhaustion_lines(daemon.log_path.read_text()) >= 2, timeout=30,
                       what="the daemon's second line about running out of descriptors")
        for client in clients:
            client.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        log = daemon.log_path.read_text()
        first, second = [line for line in log.splitlines() if _exhaustion_lines(line)][:2]
        assert "out of file descriptors: new connections wait" in first and "LimitNOFILE" in first
        assert "more since the last report" not in first
        held_back = re.search(r"\((\d+) more since the last report\)", second)
        assert held_back and int(held_back[1]) >= 1, f"the errors between two lines were not held back: {second}"
        assert "Traceback" not in log and "out of system resource" not in log, log[-3000:]
    finally:
        await daemon.close()


def _exhaustion_lines(log: str) -> int:
    """Lines saying descriptors ran out: asyncio's own wording, or ours."""
    return sum(1 for line in log.splitlines() if "out of system resource" in line or "out of file descriptors" in line)
