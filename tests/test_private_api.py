"""The start-up self-check of dependencies' private attributes (gateway/private_api.py)."""

from __future__ import annotations

from pathlib import Path

import aiosqlite
import pytest

from gateway import private_api
from gateway.daemon import StartupError

from .conftest import running_gateway


def test_the_installed_dependencies_have_what_we_use() -> None:
    assert private_api.problems() == []


async def test_a_dependency_that_lost_a_private_attribute_stops_the_start(config_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As aiosqlite would look if a release dropped `Connection._execute` (0.22 broke other projects so)."""
    monkeypatch.delattr(aiosqlite.Connection, "_execute")
    with pytest.raises(StartupError) as refused:
        async with running_gateway(config_dir):
            raise AssertionError("started without aiosqlite's Connection._execute")
    message = str(refused.value)
    assert f"aiosqlite {aiosqlite.__version__} lacks Connection._execute" in message
    assert "gateway/store/sqlite.py" in message and "requirements.lock" in message
