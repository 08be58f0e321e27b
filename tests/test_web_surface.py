"""The web surface serves its own page and API clients, nothing else (docs/security.md, "The web
chat and the HTTP API"): a real daemon, raw HTTP over a socket where the headers are the point.

Each attack here got through before: a page on another site POSTing text/plain (CSRF), a page
whose name rebinds to 127.0.0.1 (a foreign Host), the API token in a URL, readiness details for
anyone beyond loopback.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.clock import ManualClock
from gateway.http.access import STREAM_TOKEN_SECONDS
from gateway.store.notes import NoteStore, Scope

from .conftest import running_gateway, wait_for, write_config

TOKEN = "s3cret-token"


async def raw(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """One HTTP/1.1 request written by hand (no client library adds or fixes a header)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = {"Host": f"127.0.0.1:{port}", "Connection": "close", **headers}
        if body or method not in ("GET", "HEAD"):
            head["Content-Length"] = str(len(body))
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items() if v is not None)]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    got = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    try:
        parsed: Any = json.loads(rest) if rest else None
    except ValueError:
        parsed = rest
    return int(status_line.split()[1]), got, parsed


async def _note_count(gw: Any) -> int:
    person = (await gw.store.identify("web", "local", "local", "local")).person_id
    return len(await NoteStore(gw.store).about(person))


async def _conversations(gw: Any) -> int:
    async with gw.store.sessions() as s:
        from sqlalchemy import func, select

        from gateway.store.models import Conversation

        return int(await s.scalar(select(func.count()).select_from(Conversation)) or 0)


async def test_a_cross_site_simple_post_is_refused_and_changes_nothing(config_dir: Path) -> None:
    """The CSRF of issue 29: text/plain, a form, no body, a foreign Origin, Sec-Fetch-Site: cross-site."""
    async with running_gateway(config_dir) as gw:
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        await NoteStore(gw.store).write(Scope("assistant", "person", person), "tea.md", "green")
        erase = json.dumps({"action": "erase"}).encode()
        attempts = [
            ({"Content-Type": "text/plain", "Origin": "https://evil.example"}, erase),
            ({"Content-Type": "text/plain"}, erase),  # no Origin at all (an old browser, a curl)
            ({"Content-Type": "application/x-www-form-urlencoded"}, b"action=erase"),
            ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--\r\n"),
            ({}, erase),  # no Content-Type
            ({"Content-Type": "application/json", "Origin": "https://evil.example"}, erase),
            ({"Content-Type": "application/json", "Origin": "null"}, erase),
            ({"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{gw.port + 1}"}, erase),  # another port
            ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, erase),
        ]
        for headers, body in attempts:
            status, _, answer = await raw(gw.port, "POST", "/api/v1/me/memory", headers, body)
            assert status in (403, 415), (headers, status, answer)
        assert await _note_count(gw) == 1, "a refused request erased notes"

        before = await _conversations(gw)
        for path in ("/api/v1/conversations", "/api/v1/admin/reload"):
            for headers in ({"Content-Type": "text/plain"}, {}):
                status, _, _ = await raw(gw.port, "POST", path, headers)
                assert status == 415, (path, headers)
        assert await _conversations(gw) == before

        # The page's own requests (same origin, JSON) and API clients (no Origin) still work.
        status, _, created = await raw(gw.port, "POST", "/api/v1/conversations",
                                       {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{gw.port}",
                                        "Sec-Fetch-Site": "same-origin"}, b"{}")
        assert status == 201 and created["id"]
        status, _, _ = await raw(gw.port, "POST", "/api/v1/me/memory", {"Content-Type": "application/json"}, erase)
        assert status == 200 and await _note_count(gw) == 0


async def test_a_foreign_host_is_refused_on_every_route_before_anything_runs(tmp_path: Path) -> None:
    """DNS rebinding: a page on rebind.attacker.example, its name now resolving to 127.0.0.1."""
    cfg = write_config(tmp_path / "config", gateway={"http": {"listen": "127.0.0.1:0",
                                                             "public_url": "https://gw.example.com",
                                                             "allowed_hosts": ["chat.internal"]}})
    async with running_gateway(cfg) as gw:
        before = await _conversations(gw)
        rebound = {"Host": f"rebind.attacker.example:{gw.port}"}
        for method, path, body in (("POST", "/api/v1/conversations", b"{}"), ("GET", "/api/v1/me/memory", b""),
                                   ("GET", "/", b""), ("GET", "/readyz", b""), ("GET", "/healthz", b"")):
            status, _, answer = await raw(gw.port, method, path, {**rebound, "Content-Type": "application/json"}, body)
            assert status == 421 and answer["error"] == "misdirected", (method, path)
        for host in ("", "127.0.0.1.attacker.example", "localhost.evil", "[::2]"):
            status, _, _ = await raw(gw.port, "GET", "/api/v1/me/memory", {"Host": host})
            assert status in (400, 421), host
        assert await _conversations(gw) == before
        # Ours: the listen address, localhost, [::1] on loopback, public_url's host, allowed_hosts.
        for host in (f"127.0.0.1:{gw.port}", f"localhost:{gw.port}", f"LOCALHOST:{gw.port}", f"[::1]:{gw.port}",
                     "gw.example.com", "chat.internal:8443"):
            status, _, _ = await raw(gw.port, "GET", "/healthz", {"Host": host})
            assert status == 200, host
        # The page behind public_url (a TLS proxy) posts with its https origin.
        status, _, _ = await raw(gw.port, "POST", "/api/v1/conversations",
                                 {"Host": "gw.example.com", "Origin": "https://gw.example.com",
                                  "Content-Type": "application/json"}, b"{}")
        assert status == 201


async def test_the_api_token_is_taken_from_the_authorization_header_only(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("GW_TEST_TOKEN", TOKEN)
    cfg = write_config(tmp_path / "config", gateway={"http": {"listen": "127.0.0.1:0", "api_token": "env:GW_TEST_TOKEN"}})
    clock = ManualClock()
    async with running_gateway(cfg, clock=clock) as gw:
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        _, _, created = await raw(gw.port, "POST", "/api/v1/conversations", auth, b"{}")
        conv = created["id"]
        for method, path in (("POST", f"/api/v1/conversations?access_token={TOKEN}"),
                             ("GET", f"/api/v1/conversations/{conv}/messages?access_token={TOKEN}"),
                             ("GET", f"/api/v1/conversations/{conv}/events?access_token={TOKEN}"),
                             ("GET", f"/api/v1/conversations/{conv}/events?stream_token={TOKEN}")):
            status, _, _ = await raw(gw.port, method, path, {"Content-Type": "application/json"}, b"{}" if method == "POST" else b"")
            assert status == 401, path

        # A stream token: minted with the API token, for that conversation's stream only.
        status, _, minted = await raw(gw.port, "POST", "/api/v1/stream-tokens", {"Content-Type": "application/json"},
                                      json.dumps({"conversation_id": conv}).encode())
        assert status == 401
        status, _, minted = await raw(gw.port, "POST", "/api/v1/stream-tokens", auth,
                                      json.dumps({"conversation_id": conv}).encode())
        assert status == 201 and set(minted) == {"token", "expires_at"} and TOKEN not in minted["token"]
        stream = minted["token"]
        for method, path in (("GET", f"/api/v1/conversations/{conv}/messages?stream_token={stream}"),
                             ("GET", f"/api/v1/me/memory?stream_token={stream}"),
                             ("POST", f"/api/v1/conversations/{conv}/messages?stream_token={stream}"),
                             ("GET", f"/api/v1/conversations/other/events?stream_token={stream}")):
            status, _, _ = await raw(gw.port, method, path, {"Content-Type": "application/json"},
                                     b'{"text": "hi"}' if method == "POST" else b"")
            assert status == 401, path
        async with aiohttp.ClientSession(gw.url) as s:
            events: list[dict[str, Any]] = []

            async def listen() -> None:
                async with s.get(f"/api/v1/conversations/{conv}/events", params={"stream_token": stream}) as r:
                    assert r.status == 200
                    async for line in r.content:
                        if line.startswith(b"data: "):
                            events.append(json.loads(line[6:]))

            listener = asyncio.create_task(listen())
            await wait_for(lambda: gw.events._listeners.get(conv), what="the stream")
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hello"}, headers=auth)
            assert r.status == 202
            await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="the reply on the stream")
            listener.cancel()
        clock.advance(STREAM_TOKEN_SECONDS + 1)  # expired: refused
        status, _, _ = await raw(gw.port, "GET", f"/api/v1/conversations/{conv}/events?stream_token={stream}", {})
        assert status == 401


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "0.0.0.0:0"])
async def test_readiness_details_are_for_token_holders_beyond_loopback(tmp_path: Path, monkeypatch: Any,
                                                                      listen: str) -> None:
    monkeypatch.setenv("GW_TEST_TOKEN", TOKEN)
    cfg = write_config(tmp_path / "config", gateway={"http": {"listen": listen, "api_token": "env:GW_TEST_TOKEN"}})
    async with running_gateway(cfg) as gw:
        status, _, ready = await raw(gw.port, "GET", "/readyz", {})
        _, _, full = await raw(gw.port, "GET", "/readyz", {"Authorization": f"Bearer {TOKEN}"})
        assert "bindings" in full and "database" in full
        metrics_status, _, _ = await raw(gw.port, "GET", "/metrics", {})
        if listen.startswith("127."):
            assert ready == full and metrics_status == 200  # on loopback, as before
        else:
            assert ready == {"ready": full["ready"]} and status in (200, 503)
            assert metrics_status == 401
            status, _, _ = await raw(gw.port, "GET", "/metrics", {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200


async def test_the_reload_command_speaks_the_rule_and_reaches_the_daemon(tmp_path: Path, monkeypatch: Any) -> None:
    """`agent-gateway reload` POSTs JSON with the token in its header: the guard lets it through."""
    from gateway.ops import cli

    from .conftest import free_port

    monkeypatch.setenv("GW_TEST_TOKEN", TOKEN)
    cfg = write_config(tmp_path / "config", gateway={"http": {"listen": f"127.0.0.1:{free_port()}",
                                                             "api_token": "env:GW_TEST_TOKEN"}})
    async with running_gateway(cfg):
        assert await asyncio.to_thread(cli.main, ["reload", "--config", str(cfg)]) == 0
