"""A tool's progress notifications as the thread's status line ("tracker: 40 %").

The FastMCP client takes one progress handler per request; the pool's client takes the one of the
run's call (`gateway/mcp/call.py`), so each notification reaches the run (and thread) whose call it
is about. A server sends as many as it likes: a line is
shown only when it says something new (another tenth of the way, or another message), at most
`MAX_LINES` per call, so a chatty server cannot spend the platform's status budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

MAX_LINES = 20


class ProgressLine:
    """One call's progress, for `status`: `await line(progress, total, message)` is a FastMCP progress handler."""

    def __init__(self, server: str, status: Callable[[str], Awaitable[None]]) -> None:
        self.server, self._status = server, status
        self._last: tuple[Any, str] | None = None
        self._shown = 0

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if total:
            share = max(0.0, min(1.0, progress / total))
            step: Any = int(share * 10)
            text = f"{self.server}: {round(share * 100)} %"
        else:
            step, text = progress, f"{self.server}: working ({progress:g})"
        note = (message or "").strip()[:80]
        if note:
            text += f" ({note})"
        if (step, note) == self._last or self._shown >= MAX_LINES:
            return
        self._last, self._shown = (step, note), self._shown + 1
        await self._status(text)
