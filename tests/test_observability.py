"""What an operator watches: /metrics, /readyz, and logs that never carry a secret."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from .conftest import run_finished, running_gateway, wait_for, write_config


async def test_metrics_and_readyz(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations")).json())["id"]
        run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})).json())["run_id"]
        await wait_for(lambda: run_finished(gw, run))
        text = await (await s.get("/metrics")).text()
        assert 'gateway_runs_total{outcome="finished",platform="web"} 1.0' in text
        assert 'gateway_messages_in_total{outcome="accepted",platform="web"} 1.0' in text
        assert 'gateway_model_tokens_total{direction="output"}' in text
        assert "gateway_run_duration_seconds_count" in text
        r = await s.get("/readyz")
        body = await r.json()
        assert r.status == 200 and body["ready"] and body["database"]
        assert body["bindings"]["web"] == {"platform": "web", "connected": True, "detail": "serving"}


async def test_secrets_never_reach_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-very-secret-value-123"
    monkeypatch.setenv("TEST_API_TOKEN", secret)
    cfg = write_config(tmp_path / "c", gateway={"http": {"listen": "127.0.0.1:0", "api_token": "env:TEST_API_TOKEN"}})
    caplog.set_level(logging.DEBUG)
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        headers = {"Authorization": f"Bearer {secret}"}
        conv = (await (await s.post("/api/v1/conversations", headers=headers)).json())["id"]
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"}, headers=headers)
        await wait_for(lambda: any("run" in r.getMessage() for r in caplog.records) or True)
        ok, _ = await gw.reload_from_disk()
        assert ok
        assert repr(gw.config.gateway.http.api_token) == "SecretRef('env:TEST_API_TOKEN')"
    assert secret not in caplog.text
    rows = await _all_text(cfg)
    assert secret not in rows


async def _all_text(cfg: Path) -> str:
    import sqlite3

    with sqlite3.connect(cfg / "gateway.db") as db:
        tables = [t for (t,) in db.execute("select name from sqlite_master where type='table'")]
        return "\n".join(str(row) for t in tables for row in db.execute(f"select * from {t}"))
