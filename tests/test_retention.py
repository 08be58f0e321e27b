"""Retention: the ledger, delivery rows and ended runs are pruned in batches; history and live runs stay.

A real daemon answers three web messages; pruning then runs as of later dates. `db stats` and
`db prune` are the operator's view of the same.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from gateway.ops import cli
from gateway.clock import ManualClock
from gateway.store.retention import Retention, prune, table_sizes

from .conftest import database_url, run_finished, running_gateway, wait_for, write_config


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_pruning_keeps_the_ledger_a_week_and_never_touches_history(tmp_path: Path, engine: str) -> None:
    clock = ManualClock()
    async with database_url(engine, tmp_path) as url:
        config = write_config(tmp_path / "config", gateway={"database": {"url": url}})
        async with running_gateway(config, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            for i in range(3):
                r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": f"hello {i}"})
                run_id = (await r.json())["run_id"]
                await wait_for(lambda: run_finished(gw, run_id), what="an answer")
            store = gw.store
            before = {t: n for t, n, _ in await table_sizes(store)}
            assert before["inbound_ledger"] == 3 and before["runs"] == 3 and before["deliveries"] >= 3

            # Asked for 1 day, the ledger still keeps 7: a redelivery within a week is still dropped.
            short = Retention(ledger_days=1, deliveries_days=1, runs_days=1, batch=2)
            deleted = await prune(store, short, clock.now() + timedelta(days=5), pause=0)
            assert deleted["inbound_ledger"] == 0
            assert deleted["deliveries"] == before["deliveries"] and deleted["runs"] == 3

            deleted = await prune(store, short, clock.now() + timedelta(days=8), pause=0)
            assert deleted["inbound_ledger"] == 3
            after = {t: n for t, n, _ in await table_sizes(store)}
            assert (after["inbound_ledger"], after["deliveries"], after["runs"]) == (0, 0, 0)
            assert after["messages"] == before["messages"] == 6, "the conversation's history is never pruned"
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            assert [t["role"] for t in turns] == ["user", "assistant"] * 3

            # The defaults keep everything this young.
            assert not any((await prune(store, Retention(), clock.now(), pause=0)).values())


def test_db_stats_and_prune_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "config")
    assert cli.main(["db", "stats", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["table", "rows", "size"]
    assert any(line.split()[:2] == ["inbound_ledger", "0"] for line in out.splitlines())
    assert cli.main(["db", "prune", "--config", str(config)]) == 0
    assert "inbound_ledger" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_file_shares_row_and_the_record_of_attached_files_go_on_the_delivery_rows_schedule(
        tmp_path: Path, engine: str) -> None:
    from sqlalchemy import text

    from tests.capabilities.scripted import say_calls
    from tests.capabilities.test_charts import AGENT, SIGNUPS

    clock = ManualClock()
    async with database_url(engine, tmp_path) as url:
        config = write_config(tmp_path / "config", agents={"assistant": AGENT}, gateway={"database": {"url": url}})
        async with running_gateway(config, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            form = aiohttp.FormData()
            form.add_field("text", "the numbers are attached")
            form.add_field("file", b"day,n\nMon,1\n", filename="q3.csv", content_type="text/csv")
            for body in ({"data": form}, {"json": {"text": say_calls(("create_chart", SIGNUPS))}}):
                r = await s.post(f"/api/v1/conversations/{conv}/messages", **body)
                run_id = (await r.json())["run_id"]
                await wait_for(lambda: run_finished(gw, run_id), what="an answer")

            async def rows() -> tuple[int, int]:
                async with gw.store.sessions() as db:
                    files = (await db.execute(text("SELECT count(*) FROM deliveries WHERE run_id LIKE 'file-%'")))
                    attached = (await db.execute(text("SELECT count(*) FROM capability_state"
                                                      " WHERE capability = 'attachments'")))
                    return files.scalar_one(), attached.scalar_one()

            assert await rows() == (1, 1)  # the chart's share, and the record of q3.csv
            keep = Retention(ledger_days=7, deliveries_days=2, runs_days=90, batch=2)
            assert not any((await prune(gw.store, keep, clock.now() + timedelta(days=1), pause=0)).values())
            assert await rows() == (1, 1)

            deleted = await prune(gw.store, keep, clock.now() + timedelta(days=3), pause=0)
            assert (deleted["file_deliveries"], deleted["attachments"]) == (1, 1)
            assert await rows() == (0, 0)
            listing = await (await s.get(f"/api/v1/conversations/{conv}/messages")).json()
            assert [f["name"] for share in listing["files"] for f in share["files"]] == ["signups-last-week.png"]
