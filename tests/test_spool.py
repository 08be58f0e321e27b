"""Where the spool of held events lives (gateway/spool.py): on the disk the state is on, never in /etc
when systemd gives the daemon a state directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.spool import spool_directory


def test_beside_the_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'state' / 'gateway.db'}"
    assert spool_directory(url, tmp_path / "config") == tmp_path / "state" / "gateway.db.spool"


def test_on_postgresql_in_systemds_state_directory_else_the_config_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql+asyncpg://gateway@db.internal/gateway"
    # systemd sets $STATE_DIRECTORY from the unit's StateDirectory= (several are ':'-separated: the first).
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path / 'var'}:{tmp_path / 'other'}")
    assert spool_directory(url, tmp_path / "config") == tmp_path / "var" / "gateway.spool"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert spool_directory(url, tmp_path / "config") == tmp_path / "config" / "gateway.spool"
