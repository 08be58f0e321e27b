"""One shape for what every tool tells the model: pydantic-ai's own.

A tool written here gets the shape from its docstring (pydantic-ai renders the summary and the
`Returns:` section). A tool from a library that we re-describe passes its text through
`tool_text`, which renders exactly what the framework would have, so the model reads one
convention. `describes_return` is what the test over every registered tool checks.
"""

from __future__ import annotations

import re

_RETURNS = re.compile(r"<returns>\s*<description>.+?</description>\s*</returns>", re.S)


def tool_text(what: str, when: str, returns: str) -> str:
    """What it does; when to use it and what else instead; what comes back (with truncation)."""
    summary = f"{what.strip()}\n\n{when.strip()}" if when.strip() else what.strip()
    return f"<summary>{summary}</summary>\n<returns>\n<description>{returns.strip()}</description>\n</returns>"


def describes_return(description: str | None) -> bool:
    return bool(description and _RETURNS.search(description))
