"""Fixtures for capability tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ..conftest import pg_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db_url(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """None (the embedded SQLite default) or a fresh PostgreSQL database's URL: a test runs on both."""
    if request.param == "sqlite":
        yield None
    else:
        async with pg_database() as url:
            yield url
