"""The direction of imports the design fixes: the core never imports an adapter or a platform SDK,
and capabilities see the narrow run context, never the runner or the daemon."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str, pattern: str) -> list[str]:
    wanted = re.compile(pattern)
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in sorted((ROOT / folder).rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if wanted.search(line)]


def test_the_core_imports_nothing_from_adapters() -> None:
    assert _imports("gateway", r"^\s*(from|import)\s+adapters\b") == []


def test_the_core_imports_no_platform_sdk() -> None:
    assert _imports("gateway", r"^\s*(from|import)\s+(slack_bolt|slack_sdk|telegram|mattermostdriver)\b") == []


def test_capabilities_see_the_run_context_not_the_runner_or_daemon() -> None:
    assert _imports("capabilities", r"^\s*(from|import)\s+gateway\.(runner|daemon)\b") == []
    assert _imports("capabilities", r"\bturn\.gateway\b|getattr\(turn\.") == []
