"""Fake search services on loopback, each in the HTTP shape its provider documents.

- DuckDuckGo: POST /html/ (form `q`), an HTML results page (`div.result`, `a.result__a` whose
  href is a //duckduckgo.com/l/?uddg= redirect link, `.result__snippet`, ads marked `result--ad`,
  `.no-results`); when it limits a server it answers 202 with its anomaly page.
- Tavily: POST /search, `Authorization: Bearer <key>`, JSON {query, max_results, ...} →
  {"results": [{title, url, content, score}]}.
- Brave: GET /res/v1/web/search?q=&count=, `X-Subscription-Token: <key>` → {"web": {"results":
  [{title, url, description}]}} (matches wrapped in <strong>).
- Exa: POST /search, `x-api-key: <key>`, JSON {query, numResults, contents} → {"results":
  [{title, url, highlights, publishedDate}]}.

Each provider lives under its own prefix (/duckduckgo, /tavily, /brave, /exa), so one server
plays all four. `answer[method]` picks what it does next: ok, empty, or an HTTP status.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import web

HITS = [("Download Python", "https://www.python.org/downloads/", "The official home of the Python language"),
        ("Python 3.13 release notes", "https://docs.python.org/3.13/whatsnew/3.13.html", "What's new in 3.13"),
        ("Python (programming language)", "https://en.wikipedia.org/wiki/Python", "A high-level language")]


@dataclass
class Seen:
    method: str
    query: str
    count: int | None
    key: str | None
    peer: tuple[str, int]


@dataclass
class FakeSearch:
    port: int = 0
    answer: dict[str, str] = field(default_factory=dict)  # method -> ok | empty | <status>
    seen: list[Seen] = field(default_factory=list)

    def base_url(self, method: str) -> str:
        return f"http://127.0.0.1:{self.port}/{method}"


def _ddg_page(hits: list[tuple[str, str, str]]) -> str:
    ad = ('<div class="result results_links results_links_deep result--ad"><div class="result__body">'
          '<h2 class="result__title"><a class="result__a" href="https://ads.example/">Buy now</a></h2></div></div>')
    rows = [ad]
    for title, url, snippet in hits:
        href = f"//duckduckgo.com/l/?uddg={quote(url, safe='')}&amp;rut=abc"
        rows.append(
            '<div class="result results_links results_links_deep web-result "><div class="links_main links_deep '
            f'result__body"><h2 class="result__title"><a rel="nofollow" class="result__a" href="{href}">'
            f'{html.escape(title)}</a></h2><a class="result__snippet" href="{href}">{html.escape(snippet)}</a>'
            '</div></div>')
    if not hits:
        rows = ['<div class="result results_links results_links_deep result--no-result">'
                '<div class="no-results">No results.</div></div>']
    return f'<html><body><div id="links" class="results">{"".join(rows)}</div></body></html>'


ANOMALY = '<html><body><div class="anomaly-modal__title">Unfortunately, bots use DuckDuckGo too.</div></body></html>'


@contextlib.asynccontextmanager
async def fake_search() -> AsyncIterator[FakeSearch]:
    fake = FakeSearch()

    async def handle(request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        body: dict[str, Any] = {}
        if method == "duckduckgo":
            query, count, key = (await request.post()).get("q", ""), None, None
        elif method == "brave":
            query, count = request.query.get("q", ""), int(request.query.get("count", 0))
            key = request.headers.get("X-Subscription-Token")
        else:
            body = await request.json()
            query = body.get("query", "")
            count = body.get("max_results") if method == "tavily" else body.get("numResults")
            key = (request.headers.get("Authorization", "").removeprefix("Bearer ") if method == "tavily"
                   else request.headers.get("x-api-key"))
        peer = request.transport.get_extra_info("peername") if request.transport else ("", 0)
        fake.seen.append(Seen(method, str(query), count, key, tuple(peer[:2])))
        answer = fake.answer.get(method, "ok")
        if answer == "anomaly":
            return web.Response(status=202, text=ANOMALY, content_type="text/html")
        if answer == "blank":
            return web.Response(text="<html><body>Please wait</body></html>", content_type="text/html")
        if answer.isdigit():
            headers = {"Retry-After": "30"} if answer == "429" else {}
            return web.json_response({"detail": {"error": "rejected"}}, status=int(answer), headers=headers)
        hits = [] if answer == "empty" else HITS
        if method == "duckduckgo":
            return web.Response(text=_ddg_page(hits), content_type="text/html")
        if method == "tavily":
            return web.json_response({"query": query, "results": [
                {"title": t, "url": u, "content": s, "score": 0.9} for t, u, s in hits[:count]]})
        if method == "brave":
            return web.json_response({"type": "search", "web": {"type": "search", "results": [
                {"title": t, "url": u, "description": s.replace("Python", "<strong>Python</strong>")}
                for t, u, s in hits[:count]]}} if hits else {"type": "search"})
        return web.json_response({"results": [
            {"title": t, "url": u, "highlights": [s], "publishedDate": "2025-01-01"} for t, u, s in hits[:count]]})

    app = web.Application()
    app.router.add_route("*", "/{method}/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake
    finally:
        await runner.cleanup()
