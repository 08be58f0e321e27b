"""Fixtures for driving the real SlackAdapter (slack-bolt + slack_sdk) against the fake Slack.

`tests.support.dispatcher.FakeDispatcher` stands in for the core only in the adapter-level
tests (Ada decides); the end-to-end tests in test_e2e.py run the real daemon instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.adapter_registry import AdapterContext
from adapters.slack.adapter import SlackAdapter
from bindings.models import BindingSpec, GatewayConfig
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.support.dispatcher import FakeDispatcher
from tests.support.patience import PATIENCE


async def eventually(predicate: Callable[[], Any], timeout: float = PATIENCE) -> Any:
    """Poll until `predicate()` is truthy; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (result := predicate()):
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)
    return result


def slack_binding(fake: FakeSlack, *, mode: str = "socket", binding_id: str = "acme", **extra: Any) -> BindingSpec:
    return BindingSpec.model_validate(
        {
            "id": binding_id,
            "platform": "slack",
            "agent": "assistant",
            "slack": {
                "bot_token": "env:TEST_SLACK_BOT_TOKEN",
                "app_token": "env:TEST_SLACK_APP_TOKEN",
                "signing_secret": "env:TEST_SLACK_SIGNING_SECRET",
                "mode": mode,
                "api_url": fake.api_url,
            },
            **extra,
        }
    )


@pytest.fixture
def slack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("TEST_SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("TEST_SLACK_SIGNING_SECRET", SIGNING_SECRET)


@pytest.fixture
async def fake_slack(slack_env: None) -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.add_user("U0ADA", "ada", real_name="Ada Lovelace", display_name="Ada")
        fake.add_user("U0BOB", "bob", real_name="Bob Builder", display_name="Bob")
        fake.add_channel("C0GEN", "general", purpose="Company-wide announcements", members=["U0ADA", "U0BOB", "U0BOT"])
        fake.add_channel("C0ENG", "engineering", purpose="Builds and deploys", topic="release 1.2")
        fake.add_channel("C0RND", "random", purpose="Water cooler")
        fake.add_channel("D0ADA", "", kind="im", members=["U0ADA"])
        fake.add_channel("G0TRIO", "mpdm-ada--bob--agent-1", kind="mpim", members=["U0ADA", "U0BOB", "U0BOT"])
        yield fake


@pytest.fixture
def dispatcher() -> FakeDispatcher:
    return FakeDispatcher(deciders={"U0ADA"})


async def start_adapter(fake: FakeSlack, dispatcher: Any, *, spool: Path | None = None, **binding_kw: Any) -> SlackAdapter:
    adapter = SlackAdapter(slack_binding(fake, **binding_kw),  # the fake's clock: one time for both
                           AdapterContext(gateway=GatewayConfig(), clock=fake.clock, spool=spool))
    await adapter.start(dispatcher)
    await eventually(lambda: adapter.health().connected)
    return adapter


@pytest.fixture
async def adapter(fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> AsyncIterator[SlackAdapter]:
    adapter = await start_adapter(fake_slack, dispatcher)
    try:
        yield adapter
    finally:
        await adapter.stop()
