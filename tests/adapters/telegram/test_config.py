"""The Telegram binding section: the shipped example, api_url forms, secrets Telegram accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from gateway.adapter_registry import AdapterContext
from adapters.telegram.adapter import TelegramAdapter
from bindings.models import BindingSpec, GatewayConfig

from tests.support.dispatcher import FakeDispatcher

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "examples" / "telegram.yaml"
BASE = {"platform": "telegram", "agent": "a"}


def test_example_binding_parses_with_pairing_by_default() -> None:
    data = YAML(typ="safe", pure=True).load(EXAMPLE.read_text())
    spec = BindingSpec.model_validate({"id": "telegram", **data})
    assert spec.telegram is not None and spec.telegram.mode == "polling"
    assert not spec.telegram.token.is_literal
    assert spec.dm_policy == "pairing"
    assert BindingSpec.model_validate({**BASE, "telegram": {"token": "env:T"}}).dm_policy == "pairing"


@pytest.mark.parametrize(("given", "used"), [
    ("https://api.telegram.org/bot", "https://api.telegram.org/bot"),
    ("http://127.0.0.1:8081", "http://127.0.0.1:8081/bot"),
    ("http://127.0.0.1:8081/", "http://127.0.0.1:8081/bot"),
    ("http://proxy/tg/{token}/x", "http://proxy/tg/{token}/x"),
])
def test_api_url_forms(given: str, used: str) -> None:
    spec = BindingSpec.model_validate({**BASE, "telegram": {"token": "env:T", "api_url": given}})
    assert spec.telegram is not None and spec.telegram.api_url == used


def test_webhook_mode_needs_a_secret_and_a_url_must_be_http() -> None:
    with pytest.raises(ValidationError, match="webhook_secret"):
        BindingSpec.model_validate({**BASE, "telegram": {"token": "env:T", "mode": "webhook"}})
    with pytest.raises(ValidationError, match="http"):
        BindingSpec.model_validate({**BASE, "telegram": {"token": "env:T", "api_url": "api.telegram.org"}})


async def test_a_secret_telegram_would_refuse_is_reported_in_health(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T", "123:abc")
    monkeypatch.setenv("S", "has spaces and !")
    spec = BindingSpec.model_validate({**BASE, "id": "tg", "telegram": {
        "token": "env:T", "mode": "webhook", "webhook_secret": "env:S"}})
    adapter = TelegramAdapter(spec, AdapterContext(GatewayConfig()))
    await adapter.start(FakeDispatcher())
    health = adapter.health()
    assert not health.connected and "webhook_secret" in health.detail
    await adapter.stop()


async def test_a_missing_token_is_reported_in_health_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_TOKEN", raising=False)
    spec = BindingSpec.model_validate({**BASE, "id": "tg", "telegram": {"token": "env:NOT_SET_TOKEN"}})
    adapter = TelegramAdapter(spec, AdapterContext(GatewayConfig()))
    await adapter.start(FakeDispatcher())
    assert not adapter.health().connected and "NOT_SET_TOKEN" in adapter.health().detail
    await adapter.stop()
