"""Several daemon processes on one PostgreSQL database, as an operator scales out.

Uses the machine's PostgreSQL (127.0.0.1:5432, trust auth); each test gets a database of its own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from .conftest import wait_for, write_config
from .test_operations import Daemon

pytestmark = pytest.mark.postgres
async def _two(tmp: Path, url: str, env: dict[str, str]) -> tuple[Daemon, Daemon]:
    daemons = []
    for name in ("a", "b"):
        cfg = write_config(tmp / name, agents={"ops": {"name": "Ops", "model": "test:ops",
                                                       "capabilities": [{"id": "test_ops"}]}},
                           bindings={"web": {"platform": "web", "agent": "ops"}},
                           gateway={"database": {"url": url}, "plugins": ["tests.support.plugin_ops"]})
        daemons.append(Daemon(cfg, env))
    # Start one after the other: both run the migrations, the second finds nothing to do.
    await daemons[0].start()
    await daemons[1].start()
    return daemons[0], daemons[1]


async def _rows(url: str, sql: str) -> list[Any]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def test_two_replicas_share_one_database(tmp_path: Path, pg_url: str) -> None:
    log = tmp_path / "ops.log"
    a, b = await _two(tmp_path, pg_url, {"OPS_LOG": str(log), "OPS_ANSWER_DELAY": "0.3"})
    try:
        _, conv = await a.request("POST", "/api/v1/conversations")
        path = f"/api/v1/conversations/{conv['id']}/messages"

        # 1. The same event delivered to both replicas (as Mattermost delivers to every socket) runs once.
        async def post(d: Daemon, text: str, key: str) -> int:
            status, _ = await d.request_with_headers("POST", path, {"text": text}, {"Idempotency-Key": key})
            return status
        statuses = await asyncio.gather(post(a, "same event", "evt-1"), post(b, "same event", "evt-1"))
        assert sorted(statuses) == [202, 409]

        # 2. Messages of one conversation arriving at both run one at a time, in order.
        for i, d in enumerate([a, b, a, b]):
            assert await post(d, f"m{i}", f"evt-m{i}") == 202

        async def settled() -> bool:
            rows = await _rows(pg_url, f"select status from runs where conversation_id = '{conv['id']}'")
            return bool(rows) and all(r["status"] == "finished" for r in rows)
        await wait_for(settled, timeout=60)
        users = await _rows(pg_url, f"select text from messages where conversation_id = '{conv['id']}' "
                                    "and role = 'user' order by created_at, id")
        assert [u["text"] for u in users] == ["same event", "m0", "m1", "m2", "m3"]
        runs = await _rows(pg_url, f"select started_at, finished_at from runs where conversation_id = '{conv['id']}' "
                                   "order by started_at")
        for earlier, later in zip(runs, runs[1:]):
            assert earlier["finished_at"] <= later["started_at"], "two runs of one conversation overlapped"
        replies = await _rows(pg_url, f"select count(*) as n from messages where conversation_id = '{conv['id']}' "
                                      "and role = 'assistant'")
        assert replies[0]["n"] == len(runs)

        # 3. An approval parked on A is decided through B; the run resumes once.
        _, conv2 = await a.request("POST", "/api/v1/conversations")
        status, sent = await a.request("POST", f"/api/v1/conversations/{conv2['id']}/messages", {"text": "deploy api"})
        assert status == 202

        async def card() -> Any:
            _, state = await a.request("GET", f"/api/v1/conversations/{conv2['id']}/messages")
            return state["cards"] and state["cards"][0]
        pending = await wait_for(card, timeout=30)
        status, body = await b.request("POST", f"/api/v1/approvals/{pending['items'][0]['approval_id']}",
                                       {"decision": "approve"})
        assert status == 200, body
        status, again = await a.request("POST", f"/api/v1/approvals/{pending['items'][0]['approval_id']}",
                                        {"decision": "approve"})
        assert status == 409 and again["message"] == "Already approved by local."

        async def done() -> bool:
            rows = await _rows(pg_url, f"select status from runs where id = '{sent['run_id']}'")
            return rows[0]["status"] == "finished"
        await wait_for(done, timeout=30)
        ran = [json.loads(line) for line in log.read_text().splitlines()]
        assert [r[:2] for r in ran] == [["deploy", "api"]]
        assert ran[0][2] == b.proc.pid, "the replica that took the decision resumes the run"
    finally:
        await a.close()
        await b.close()
