"""The lifecycle the Slack, Telegram and Mattermost adapters share (adapters/base.py)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import BaseAdapter
from bindings.models import BindingSpec, GatewayConfig
from gateway.adapter_registry import AdapterContext, create_adapter
from gateway.outbound.adapter import Adapter

BINDINGS: dict[str, dict[str, Any]] = {  # each with a secret that is not set
    "slack": {"slack": {"bot_token": "env:X_SLACK_BOT", "app_token": "env:X_SLACK_APP"}},
    "telegram": {"telegram": {"token": "env:X_TELEGRAM"}},
    "mattermost": {"mattermost": {"url": "http://127.0.0.1:9", "token": "env:X_MM"}},
}
MISSING = {"slack": "bot_token (env:X_SLACK_BOT)", "telegram": "token (env:X_TELEGRAM)", "mattermost": "token (env:X_MM)"}


@pytest.mark.parametrize("platform", sorted(BINDINGS))
async def test_each_platform_shares_the_lifecycle_and_speaks_the_whole_protocol(
    platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("X_SLACK_BOT", "X_SLACK_APP", "X_TELEGRAM", "X_MM"):
        monkeypatch.delenv(name, raising=False)
    binding = BindingSpec.model_validate({"id": "b", "platform": platform, "agent": "a", **BINDINGS[platform]})
    adapter = create_adapter(binding, AdapterContext(gateway=GatewayConfig()))
    assert isinstance(adapter, BaseAdapter) and isinstance(adapter, Adapter)
    adapter.forget(["1", "2"])  # nothing is kept about sent messages: nothing to let go of
    # A binding whose secret is missing does not start, says why, and stops cleanly.
    await adapter.start(dispatcher=None)  # type: ignore[arg-type]
    health = adapter.health()
    assert not health.connected
    assert health.detail.startswith(f"cannot start: {MISSING[platform]}: environment variable")
    await adapter.stop()
    assert adapter.health().detail == "stopped"


def test_start_and_stop_are_the_base_s_alone() -> None:
    with pytest.raises(TypeError, match="must not override stop"):
        class Mine(BaseAdapter):  # noqa: F841
            platform = "mine"

            async def _open(self) -> None: ...

            async def _connect_once(self) -> None: ...

            async def stop(self) -> None: ...
