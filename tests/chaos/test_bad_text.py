"""Text PostgreSQL cannot store (a NUL byte, a lone surrogate), on both engines: a clear answer, never a 500.

Found by the first random pass over the web API: on PostgreSQL a NUL in a conversation id in the
URL and a lone surrogate in a message's text each answered 500. Ids are checked at the API's
edge; text that reaches the store from anywhere (a platform, a model, a tool) is made storable
there, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.conftest import database_url, running_gateway, wait_for, write_config


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_nul_and_surrogates_in_ids_and_text_never_answer_500(tmp_path: Path, engine: str) -> None:
    async with database_url(engine, tmp_path) as url:
        config = write_config(tmp_path / "config", gateway={"database": {"url": url}})
        async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            for bad_id in ("a\x00b", "\x00", "x\ud800"):
                quoted = bad_id.encode("utf-8", "surrogatepass").hex()
                for method, path in (("GET", f"/api/v1/conversations/%s/messages"),
                                     ("POST", f"/api/v1/conversations/%s/messages"),
                                     ("POST", f"/api/v1/approvals/%s")):
                    raw = "".join(f"%{quoted[i:i + 2]}" for i in range(0, len(quoted), 2))
                    r = await s.request(method, path % raw, json={"text": "hi", "decision": "approve"},
                                        skip_auto_headers=())
                    assert r.status in (400, 404), (method, path, bad_id, r.status, await r.text())

            # A lone surrogate in the text: refused with a clear reason, nothing half stored.
            r = await s.post(f"/api/v1/conversations/{conv}/messages",
                             data='{"text": "half a pair \\ud800 here"}', headers={"Content-Type": "application/json"})
            assert r.status == 400, await r.text()
            assert (await r.json())["error"] == "bad_text"

            # A NUL in the text is text a person may paste: stored and answered, on both engines.
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "nul\x00inside"})
            assert r.status == 202, await r.text()
            run_id = (await r.json())["run_id"]

            async def answered() -> bool:
                run = await gw.store.run(run_id)
                return run is not None and run.status == "finished"
            await wait_for(answered, timeout=20, what="the answer")
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            assert [t["role"] for t in turns] == ["user", "assistant"]
            assert turns[0]["text"].startswith("nul") and turns[0]["text"].endswith("inside")

            # The daemon still answers the next good message.
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "still there?"})
            assert r.status == 202
