"""What an MCP server says besides its answers: its stderr, stdout lines that are not JSON-RPC, and its
log notifications. All of it is logged under the server's name (`MCP server ops/wiki: …`), never above
`warning` (a server does not decide that the operator is paged), without tracebacks (a noisy server is
not our bug), and rate-limited per server and source, so a server in a loop cannot flood journald and
a flood of stderr does not hide what the server says over the protocol.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.mcp.server")

LINES_PER_MINUTE = 30  # per server and source (stderr, stdout, log notifications)
LINE_CHARS = 500  # of one line; the rest is cut
_LOOKS_BAD = re.compile(r"\b(error|exception|traceback|fatal|critical|panic|warn(ing)?)\b", re.I)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO}  # everything else: warning


class ServerLog:
    """One server's lines, as the gateway logs them."""

    def __init__(self, label: str, scrub: Callable[[str], str], *, per_minute: int = LINES_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self._scrub = scrub
        self._per_minute = per_minute
        self._clock = clock
        self._budgets: dict[str, _Budget] = {}
        self.noise: str | None = None  # the last stdout line that was not JSON-RPC (it explains a failed handshake)

    def stderr(self, line: str) -> None:
        """A line of the program's stderr: info, or warning when it reads like trouble."""
        self._emit("stderr", logging.WARNING if _LOOKS_BAD.search(line) else logging.INFO, "stderr: %s", line)

    def not_json(self, line: str) -> None:
        """A stdout line that is not JSON-RPC (a banner, a stray print): the protocol skips it, we note it."""
        self.noise = _cut(self._scrub(line))
        self._emit("stdout", logging.WARNING, "printed a line that is not JSON-RPC (ignored): %s", line)

    def notification(self, level: str, logger: str | None, data: Any) -> None:
        """A `notifications/message` the server sent, at its level but never above warning."""
        source = f" ({logger})" if logger else ""
        self._emit("notifications", _LEVELS.get(level.lower(), logging.WARNING), "logged %s%s: %s", level.lower(),
                   source, data)

    def _emit(self, source: str, level: int, message: str, *args: Any) -> None:
        if not log.isEnabledFor(level):
            return
        budget = self._budgets.setdefault(source, _Budget(self._clock()))
        now = self._clock()
        if now - budget.window_start >= 60.0:
            if budget.dropped:
                log.warning("MCP server %s: %d more %s lines in the last minute were not logged", self.label,
                            budget.dropped, source)
            budget.window_start, budget.logged, budget.dropped = now, 0, 0
        if budget.logged >= self._per_minute:
            if not budget.dropped:
                log.warning("MCP server %s: more than %d %s lines in a minute; the rest of this minute's are not "
                            "logged", self.label, self._per_minute, source)
            budget.dropped += 1
            return
        budget.logged += 1
        text = message % tuple(_cut(self._scrub(str(a))) for a in args)
        log.log(level, "MCP server %s: %s", self.label, text, extra={"mcp_server": self.label})


@dataclass
class _Budget:
    window_start: float
    logged: int = 0
    dropped: int = 0


class StderrPipe:
    """A pipe a stdio server writes its stderr into; each line goes to `on_line`, and the end of the
    pipe (the program and everything it started have exited) to `on_end`."""

    def __init__(self, on_line: Callable[[str], None], on_end: Callable[[], None]) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")  # handed to the program as its stderr
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._on_line, self._on_end = on_line, on_end
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="mcp-stderr")

    def spawned(self) -> None:
        """The program has its copy of the write end: close ours, so the pipe ends when the program does."""
        if not self.writer.closed:
            self.writer.close()

    async def close(self) -> None:
        """After the session: let the last lines arrive (briefly), then stop reading."""
        self.spawned()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), 1.0)
            except (asyncio.TimeoutError, Exception):
                await cancel_and_wait(task)
        self._reader.close()

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader(limit=1 << 16)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), self._reader)
        buffer = b""
        try:
            while chunk := await stream.read(1 << 16):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if len(buffer) > 4 * LINE_CHARS:  # a line without end: log what we have
                    lines.append(buffer)
                    buffer = b""
                for line in lines:
                    if line.strip():
                        self._on_line(line.decode("utf-8", "replace"))
            if buffer.strip():
                self._on_line(buffer.decode("utf-8", "replace"))
            self._on_end()
        finally:
            transport.close()


def _cut(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS] + "…"
