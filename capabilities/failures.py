"""How a tool reports trouble, decided in one place.

- The model's own mistake, or a transient failure behind the tool: a retry prompt (ModelRetry),
  because calling again differently, or again later, is a plausible fix.
- Bad news (nothing found, a channel the bot cannot see) and refusals (a rule says no): text,
  because that is the answer, and a retry prompt would invite a way around a refusal.

Retries are budgeted: past the last allowed retry pydantic-ai would end the whole run, so the
last attempt returns its message as text instead of raising.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic_ai import ModelRetry
from pydantic_ai.tools import RunContext

Kind = Literal["mistake", "transient", "bad_news", "refusal"]


def trouble(ctx: RunContext[Any] | None, kind: Kind, message: str) -> str:
    """Raise a retry prompt for mistakes and transient failures while retries remain; else return text."""
    if kind in ("mistake", "transient"):
        last_attempt = ctx is not None and ctx.retry >= ctx.max_retries
        if not last_attempt:
            raise ModelRetry(message)
        prefix = "Could not complete this call" if kind == "transient" else "This call is still not valid"
        return f"{prefix}: {message}"
    return message
