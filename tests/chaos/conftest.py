"""The fault lane: every test here carries the `chaos` marker, so `make test` leaves them to
`make test-chaos` except the few marked `chaos_smoke` (one kill -9 on SQLite, one approval window,
one storm), which run in both lanes."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.chaos)
