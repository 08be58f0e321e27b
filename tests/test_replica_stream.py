"""The web chat's event stream across replicas: a browser on replica B watches a run replica A executes.

Two `agent-gateway run` daemons on one real PostgreSQL database; the browser's SSE stream is read
with aiohttp, exactly as the page's EventSource reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bindings.loader import load_config
from gateway import extensions
from gateway.daemon import Gateway

from .conftest import wait_for, write_config
from .test_operations import Daemon
from .test_replicas import _rows, _two

pytestmark = pytest.mark.postgres


class Stream:
    """A browser's event stream of one conversation on one replica: every event, in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.connected = asyncio.Event()

    def of(self, run_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if (kind is None or e["type"] == kind)
                and (run_id is None or e.get("run_id", run_id) == run_id)]

    def texts(self) -> list[str]:
        return [e["text"] for e in self.events if e["type"] == "delta"]

    def ended(self, run_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """The run_end events of a run (a run parked for an approval ends twice: parked, then finished)."""
        return [e for e in self.events if e["type"] == "run_end" and e["run_id"] == run_id
                and (status is None or e["status"] == status)]


@contextlib.asynccontextmanager
async def browser(d: Daemon, conversation_id: str) -> AsyncIterator[Stream]:
    stream = Stream()

    async def read() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            async with http.get(d.url(f"/api/v1/conversations/{conversation_id}/events")) as r:
                assert r.status == 200
                async for raw in r.content:
                    line = raw.decode().rstrip("\n")
                    if line == ": connected":
                        stream.connected.set()
                    elif line.startswith("data: "):
                        stream.events.append(json.loads(line[len("data: "):]))

    task = asyncio.create_task(read())
    try:
        await asyncio.wait_for(stream.connected.wait(), 20)
        yield stream
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _final_text(d: Daemon, conversation_id: str, run_id: str) -> str:
    _, state = await d.request("GET", f"/api/v1/conversations/{conversation_id}/messages")
    return [m["text"] for m in state["messages"] if m["role"] == "assistant" and m["run_id"] == run_id][-1]


def _ran_on(log: Path, tool: str) -> list[int]:
    return [pid for name, _, pid in (json.loads(line) for line in log.read_text().splitlines()) if name == tool]


async def test_a_browser_on_one_replica_sees_runs_another_replica_executes(tmp_path: Path, pg_url: str) -> None:
    log, gate = tmp_path / "ops.log", tmp_path / "gate"
    a, b = await _two(tmp_path, pg_url, {"OPS_LOG": str(log), "OPS_GATE": str(gate)})
    try:
        _, conv = await a.request("POST", "/api/v1/conversations")
        path = f"/api/v1/conversations/{conv['id']}/messages"
        async with browser(b, conv["id"]) as on_b, browser(a, conv["id"]) as on_a:
            # 1. A streamed reply: B shows its first words while A is still writing it, then all of it.
            status, sent = await a.request("POST", path, {"text": "count 20"})
            assert status == 202
            await wait_for(lambda: any(t.startswith("1") for t in on_b.texts()), timeout=30,
                           what="the first words on B while the run is in flight")
            assert not on_b.ended(sent["run_id"]), "the run cannot have ended: it waits for the gate"
            gate.touch()
            await wait_for(lambda: on_b.ended(sent["run_id"]), timeout=30, what="run_end on B")
            assert _ran_on(log, "count") == [a.proc.pid], "replica A executed the run"
            final = await _final_text(a, conv["id"], sent["run_id"])
            assert final.split() == [str(i) for i in range(1, 21)]
            assert on_b.texts()[-1] == final
            assert on_b.ended(sent["run_id"]) == [{"type": "run_end", "run_id": sent["run_id"], "status": "finished"}]
            # Each delta on B extends the one before (paced, merged, never out of order).
            texts = on_b.texts()
            assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:])), texts
            # A, which ran it, shows each event once: its own events are not read back from the store.
            await wait_for(lambda: on_a.ended(sent["run_id"]), timeout=30, what="run_end on A")
            assert len(on_a.ended(sent["run_id"])) == 1
            assert on_a.texts()[-1] == final and len(on_a.texts()) == len(set(on_a.texts()))

            # 2. An approval card of a run on A appears on B, pending, then decided.
            gate.unlink()
            status, deploy = await a.request("POST", path, {"text": "deploy api"})
            assert status == 202
            card = await wait_for(lambda: on_b.of(kind="card"), timeout=30, what="the approval card on B")
            assert card[0]["card"]["items"][0]["state"] == "pending"
            approval_id = card[0]["card"]["items"][0]["approval_id"]
            status, body = await a.request("POST", f"/api/v1/approvals/{approval_id}", {"decision": "approve"})
            assert status == 200, body
            await wait_for(lambda: on_b.ended(deploy["run_id"], "finished"), timeout=30, what="the approved run's end on B")
            assert [e["status"] for e in on_b.ended(deploy["run_id"])] == ["parked", "finished"]
            assert _ran_on(log, "deploy") == [a.proc.pid]
            decided = [c["card"]["items"][0]["state"] for c in on_b.of(kind="card")]
            assert decided[0] == "pending" and decided[-1] != "pending"
            assert on_b.texts()[-1] == await _final_text(a, conv["id"], deploy["run_id"])
            await wait_for(lambda: on_a.ended(deploy["run_id"], "finished"), timeout=30, what="the approved run's end on A")
            assert [e["status"] for e in on_a.ended(deploy["run_id"])] == ["parked", "finished"]
            assert [c["card"]["items"][0]["state"] for c in on_a.of(kind="card")] == decided

            # 3. A run on A stopped through A: B shows the Stop control go away and the run end as stopped.
            status, stopped = await a.request("POST", path, {"text": "count 5"})
            assert status == 202
            await wait_for(lambda: [e for e in on_b.of(kind="stop_control") if e["run_id"] == stopped["run_id"]
                                    and e["present"]], timeout=30, what="the Stop control on B")
            status, body = await a.request("POST", f"/api/v1/runs/{stopped['run_id']}/stop", {})
            assert status == 200, body
            await wait_for(lambda: on_b.ended(stopped["run_id"]), timeout=30, what="the stopped run's end on B")
            assert on_b.ended(stopped["run_id"])[0]["status"] == "stopped"
            controls = [e["present"] for e in on_b.of(kind="stop_control") if e["run_id"] == stopped["run_id"]]
            assert controls[0] is True and controls[-1] is False
    finally:
        await a.close()
        await b.close()


async def test_the_stream_survives_a_dropped_listen_connection(tmp_path: Path, pg_url: str) -> None:
    a, b = await _two(tmp_path, pg_url, {"OPS_ANSWER_DELAY": "0"})
    try:
        _, conv = await a.request("POST", "/api/v1/conversations")
        async with browser(b, conv["id"]) as on_b:
            _, ready = await b.request("GET", "/readyz")
            assert ready["event_stream"] == {"mode": "listening", "reconnects": 0}
            # Every replica's LISTEN connection dies (a failover, a proxy restart); a run goes on at once.
            killed = await _rows(pg_url, "select pg_terminate_backend(pid) from pg_stat_activity "
                                         "where datname = current_database() "
                                         "and application_name like 'agent-gateway listen %'")
            assert len(killed) == 2
            runs = []
            for i in range(3):
                status, sent = await a.request("POST", f"/api/v1/conversations/{conv['id']}/messages",
                                               {"text": f"count {i + 2}"})
                assert status == 202
                runs.append(sent["run_id"])
                await wait_for(lambda: on_b.ended(runs[-1]), timeout=30, what=f"run {i} on B")
            # Nothing missed, nothing twice.
            assert [e["run_id"] for e in on_b.of(kind="run_end")] == runs
            for run_id in runs:
                assert await _final_text(a, conv["id"], run_id) in on_b.texts()

            async def listening_again() -> bool:
                _, ready = await b.request("GET", "/readyz")
                return ready["event_stream"]["mode"] == "listening" and ready["event_stream"]["reconnects"] >= 1
            await wait_for(listening_again, timeout=30, what="B listening again")
    finally:
        await a.close()
        await b.close()


async def test_events_published_while_a_replica_cannot_listen_reach_it_in_order_once(tmp_path: Path,
                                                                                  pg_url: str) -> None:
    """Two gateways in this process on one database: B's LISTEN connection is killed, A publishes
    meanwhile (one event far over NOTIFY's 8,000-byte payload); B's listener gets every event, in
    order, once."""
    extensions.register_checks()
    gateways = []
    for name in ("a", "b"):
        cfg = write_config(tmp_path / name, agents={"ops": {"name": "Ops", "model": "test:ops"}},
                           bindings={"web": {"platform": "web", "agent": "ops"}},
                           gateway={"database": {"url": pg_url}, "plugins": ["tests.support.plugin_ops"]})
        gateways.append(Gateway(load_config(cfg)))
    a, b = gateways
    await a.start()
    await b.start()
    try:
        assert a.relay is not None and b.relay is not None
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{a.url}/api/v1/conversations", json={}) as r:
                conv = (await r.json())["id"]
        async with b.events.listen(conv) as queue:
            await wait_for(lambda: b.relay is not None and b.relay.listening, what="B listening")
            killed = await _rows(pg_url, "select pg_terminate_backend(pid) from pg_stat_activity "
                                         f"where application_name = 'agent-gateway listen {b.store.owner}'")
            assert len(killed) == 1
            await wait_for(lambda: b.relay is not None and not b.relay.listening, what="B noticing the drop")
            big = "x" * 20_000
            sent = [{"type": "notice", "text": f"n{i}"} for i in range(20)]
            sent.insert(10, {"type": "delta", "message_id": "m1", "text": big, "delta": big})
            for event in sent:
                a.events.publish(conv, event)
            got: list[dict[str, Any]] = []
            while len(got) < len(sent):
                got.append(await asyncio.wait_for(queue.get(), 30))
            assert got == sent
            await wait_for(lambda: b.relay is not None and b.relay.listening and b.relay.reconnects == 1,
                           what="B listening again")
            a.events.publish(conv, {"type": "notice", "text": "after"})
            assert await asyncio.wait_for(queue.get(), 30) == {"type": "notice", "text": "after"}
            assert queue.empty(), "no event came twice"
    finally:
        await b.stop()
        await a.stop()
