"""Pages served on loopback for web_fetch tests, and a small fake of the public internet.

The fetch runs through pydantic-ai's own `safe_download`; these fakes replace only what a test
machine cannot have: name resolution (`fake_dns`: a table, never a real lookup) and hosts on the
public internet (`public_names`: a name the test declares public is routed to a loopback server,
the way a real public address would route to a real server). Everything after the first hop,
redirects included, is validated by the library's shipped rules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from pydantic_ai import _ssrf
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs import llm

ARTICLE = """<!doctype html><html><head><title>Tea &amp; Biscuits</title></head><body>
<nav>menu</nav><h1>Green tea</h1><p>Steep it at <b>80 degrees</b> for two minutes.</p>
<ul><li>sencha</li><li>gyokuro</li></ul><a href="https://example.org/more">more</a></body></html>"""
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


@dataclass
class Pages:
    port: int
    hits: list[str] = field(default_factory=list)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@contextlib.asynccontextmanager
async def serve_pages() -> AsyncIterator[Pages]:
    pages = Pages(port=0)

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        pages.hits.append(path)
        if path == "/article":
            return web.Response(text=ARTICLE, content_type="text/html")
        if path == "/long":
            return web.Response(text="<html><body>" + "<p>word</p>" * 2000 + "</body></html>", content_type="text/html")
        if path == "/paper.pdf":
            return web.Response(body=PDF, content_type="application/pdf")
        if path == "/dribble":  # a byte a second, for ever: each read is quick, the page never ends
            response = web.StreamResponse(headers={"Content-Type": "text/html"})
            await response.prepare(request)
            await response.write(b"<html><body><p>")
            while True:
                await asyncio.sleep(1)  # pacing only: the dribble's byte a second (the client gives up first)
                await response.write(b"a")
        if path == "/missing":
            return web.Response(status=404, text="not here")
        targets = {
            "/to-loopback": f"http://127.0.0.1:{pages.port}/secret",
            "/to-metadata": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
            "/to-ipv6": f"http://[::1]:{pages.port}/secret",
            "/to-private-name": f"http://intranet.example:{pages.port}/secret",
            "/to-blocked": f"http://blocked.example:{pages.port}/article",
        }
        if path in targets:
            raise web.HTTPFound(targets[path])
        return web.Response(text="secret page", content_type="text/plain")  # /secret: must never be reached

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    pages.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield pages
    finally:
        await runner.cleanup()


# A private name: what an internal DNS would answer for a host inside the network.
DNS = {"intranet.example": ["10.20.30.40"], "localhost": ["127.0.0.1"]}


def fake_dns(monkeypatch: pytest.MonkeyPatch, table: dict[str, list[str]] | None = None) -> None:
    """Names resolve from a table; a name not in it fails as an unknown name does. No real lookup."""
    names = {**DNS, **(table or {})}

    async def resolve(hostname: str) -> list[str]:
        if hostname not in names:
            raise ValueError(f'DNS resolution failed for hostname "{hostname}": not in the test DNS')
        return names[hostname]

    monkeypatch.setattr(_ssrf, "resolve_hostname", resolve)


def public_names(monkeypatch: pytest.MonkeyPatch, names: dict[str, int]) -> None:
    """Declare names public hosts on the internet, served by the loopback server on the given port.

    Only the first resolution of these names is short-circuited: every other host, and every
    redirect target, goes through the library's own validation as shipped.
    """
    real = _ssrf.validate_and_resolve_url

    async def validate(url: str, allow_local: bool) -> _ssrf.ResolvedUrl:
        hostname, path, port, is_https = _ssrf.extract_host_and_port(url)
        if hostname in names:
            return _ssrf.ResolvedUrl(resolved_ip="127.0.0.1", hostname=hostname, port=names[hostname],
                                     is_https=is_https, path=path)
        return await real(url, allow_local)

    monkeypatch.setattr(_ssrf, "validate_and_resolve_url", validate)


# A model that records what each request offered: native tools by kind, function tools by name.
OFFERED: list[tuple[list[str], list[str]]] = []


async def _offered_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    OFFERED.append((sorted(t.kind for t in info.model_request_parameters.native_tools),
                    sorted(t.name for t in info.function_tools)))
    yield "ok"


llm.register_model("offered", lambda: FunctionModel(stream_function=_offered_stream, model_name="offered"))
