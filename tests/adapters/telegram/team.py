"""A fake Telegram with Ada's and Bob's private chats and a team group, for end-to-end tests
that need both people (the `fake` fixture: import it into the test module)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.telegram import FakeTelegram

ADA = FakeTelegram.user(42, "Ada", "ada")
BOB = FakeTelegram.user(43, "Bob", "bob")
GROUP_ID = -100200


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.private_chat(ADA)
        server.private_chat(BOB)
        server.add_chat(GROUP_ID, "group", title="Team")
        yield server
