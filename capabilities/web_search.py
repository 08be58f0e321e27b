"""web_search: search the public web, through the one search service an agent entry names.

One tool, `web_search(query)`, whatever the method: a broker over DuckDuckGo (keyless, the
default), Tavily, Brave and Exa, each spoken to in the HTTP shape it documents, or the model
provider's own search (`method: native`, pydantic-ai's `WebSearch` capability).

Why our own broker rather than pydantic-ai's search tools: the seed's failure rule. A search that
did not run must say so and why, never come back as an empty list that reads "nothing exists".
pydantic-ai's DuckDuckGo tool goes through `ddgs`. Read at ddgs 9.16.1 (issue 33 asked to move to it),
it cannot stand behind that rule, even wrapped in a thread with a deadline:
- "no results" and "blocked" are one answer. `BaseSearchEngine.request` returns None for any status
  but 200 (DuckDuckGo's 202 and 403 rate-limit answers, a 429, a 5xx), `search` passes the None on,
  `DDGS._search_sync` skips it, and with nothing found raises `DDGSException("No results found.")`,
  the same exception an empty result raises; `RatelimitException` is declared but never raised.
- its endpoint is fixed: `engines.duckduckgo.Duckduckgo.search_url` is a class attribute
  ("https://html.duckduckgo.com/html/") and `DDGS(proxy, timeout, verify)` takes no base URL, so a
  loopback fake means patching the library; its client (`primp`, browser impersonation) is not httpx.
- no deadline of its own: `timeout` bounds each request and each `wait`, but leaving its
  `ThreadPoolExecutor` joins every engine still running, and a thread `asyncio.wait_for` gives up on
  keeps running; `backend="auto"` also sends the query to a dozen other engines nobody configured.
tavily-python opens a new HTTP client (and TLS context) on every call; Brave has no tool there;
and each SDK folds status codes into exceptions of its own shape. Here every provider answers
through one function that tells the four outcomes apart: results, no results (bad news, as text),
a transient failure (rate limited, down, unreachable: a retry prompt that says which), and a
refusal the model cannot fix (a rejected key, a spent quota: text).

HTTP clients: one `httpx.AsyncClient` per method and base URL, built on first use and shared by
every run after it (`SearchClients`); the key travels per request, so no run builds a client or
an SSL context. The gateway closes them at shutdown: the declaration `holds` `CLIENTS`, which
`registry.LoadedCapabilities` stops with the gateway once this module was loaded.

Base URLs are fixed; `_test_base_urls` is the seam through which tests point a method at a
loopback fake. No config field, environment variable or API reaches it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import httpx
from bs4 import BeautifulSoup
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability, WebSearch
from pydantic_ai.native_tools import WebSearchTool
from pydantic_ai.tools import RunContext, Tool

from bindings.models import CapabilityEntry
from gateway.runs.turn import Turn

from .failures import trouble
from .loop_clients import LoopClients
from .registry import BuildContext, CapabilityDecl, ToolDecl, read_key, register, simple
from .web_fetch import approval_required, unless_asking_every_tool

Method = Literal["duckduckgo", "native", "tavily", "brave", "exa"]
PAID = ("tavily", "brave", "exa")
KEYLESS = "duckduckgo"  # what a paid service falls back to
LABELS = {"duckduckgo": "DuckDuckGo", "native": "Model provider's search", "tavily": "Tavily",
          "brave": "Brave Search", "exa": "Exa"}
BASE_URLS = {"duckduckgo": "https://html.duckduckgo.com", "tavily": "https://api.tavily.com",
             "brave": "https://api.search.brave.com", "exa": "https://api.exa.ai"}
_test_base_urls: dict[str, str] = {}  # method -> base URL; only tests assign it

SNIPPET_CHARS = 500
TIMEOUT = httpx.Timeout(15.0, connect=5.0)


class WebSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: Method = Field(
        default="duckduckgo",
        description="duckduckgo: free, no account; native: the model provider's own search (only on models that "
        "have one); tavily, brave, exa: paid services, each needs a key in secret_id",
        json_schema_extra={"x-enum-labels": LABELS},
    )
    max_results: int = Field(default=5, ge=1, le=10, description="Results per search (ignored by native)")
    fallback: bool = Field(
        default=True,
        description="When a paid service fails, finds nothing or has no readable key, search DuckDuckGo instead "
        "and say why in the result (a named service is a preference, not a requirement)",
    )


def check_entry(entry: CapabilityEntry, config: BaseModel) -> list[tuple[tuple[str | int, ...], str]]:
    assert isinstance(config, WebSearchConfig)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if config.method in PAID and entry.secret_id is None:
        problems.append((("secret_id",), f"web_research with method: {config.method} needs {LABELS[config.method]}'s "
                         f"API key: set secret_id (e.g. env:{config.method.upper()}_API_KEY), or use method: "
                         "duckduckgo, which needs none"))
    where = approval_required(entry, "web_search")
    if where is not None and config.method == "native":
        problems.append((where, "approval can never be asked for web_search with method: native: the model provider "
                                "runs the search, out of the gate's reach. Choose a method this deployment runs "
                                "(duckduckgo, tavily, brave, exa), or drop the approval requirement"))
    return problems


# --- the providers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """The search did not run. `kind` is transient (worth another try) or refusal (it is not)."""

    def __init__(self, kind: Literal["transient", "refusal"], reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def _base_url(method: str) -> str:
    return _test_base_urls.get(method, BASE_URLS[method])


class SearchClients:
    """One HTTP client per search method and base URL, reused by every run; `stop()` closes them."""

    def __init__(self) -> None:
        self._clients: LoopClients[httpx.AsyncClient] = LoopClients(lambda client: client.aclose(),
                                                                     usable=lambda client: not client.is_closed)

    def client(self, method: str) -> httpx.AsyncClient:
        base_url = _base_url(method)
        return self._clients.get((method, base_url), lambda: httpx.AsyncClient(
            base_url=base_url, timeout=TIMEOUT, follow_redirects=False,
            headers={"User-Agent": "Mozilla/5.0 (compatible; agent-gateway)"}))

    async def stop(self) -> None:
        await self._clients.stop()


CLIENTS = SearchClients()


def _status_failure(name: str, response: httpx.Response) -> SearchFailed | None:
    status = response.status_code
    if status in (401, 403) and name != "DuckDuckGo":
        return SearchFailed("refusal", f"{name} refused this deployment's API key (HTTP {status})")
    if status in (402, 432, 433):
        return SearchFailed("refusal", f"{name} says this deployment's plan or quota is used up (HTTP {status})")
    if status == 429 or (name == "DuckDuckGo" and status in (202, 403)):
        wait = response.headers.get("retry-after")
        return SearchFailed("transient", f"{name} is rate limiting this deployment's searches (HTTP {status})"
                            + (f"; it asks to wait {wait} seconds" if wait else ""))
    if status >= 500:
        return SearchFailed("transient", f"{name} is down or failing (HTTP {status})")
    if status >= 300:
        detail = re.sub(r"\s+", " ", response.text[:200]).strip()
        return SearchFailed("transient", f"{name} did not accept the search (HTTP {status}{': ' + detail if detail else ''})")
    return None


def _clean(text: str | None) -> str:
    text = re.sub(r"<[^>]+>", "", text or "")  # Brave marks matches with <strong>
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rstrip() + "…"


def _json(name: str, response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise SearchFailed("transient", f"{name} answered with something that is not a search result") from None


async def _duckduckgo(client: httpx.AsyncClient, query: str, n: int, key: str | None) -> list[Hit]:
    response = await client.post("/html/", data={"q": query})
    if (failed := _status_failure("DuckDuckGo", response)) is not None:
        raise failed
    soup = BeautifulSoup(response.text, "html.parser")
    hits = []
    for result in soup.select("div.result"):
        if "result--ad" in (result.get("class") or []):
            continue
        link = result.select_one("a.result__a")
        if link is None:
            continue
        href = str(link.get("href") or "")
        if "duckduckgo.com/l/" in href:  # a redirect link: the target is its uddg parameter
            href = parse_qs(urlsplit(href).query).get("uddg", [href])[0]
        snippet = result.select_one(".result__snippet")
        hits.append(Hit(_clean(link.get_text()), href, _clean(snippet.get_text() if snippet else "")))
    if not hits and soup.select_one(".no-results") is None:
        # Not a results page and not "No results": DuckDuckGo's answer to a server it is limiting.
        raise SearchFailed("transient", "DuckDuckGo answered with a page that holds no results list, which is how it "
                                        "turns away a server it is limiting")
    return hits[:n]


async def _tavily(client: httpx.AsyncClient, query: str, n: int, key: str | None) -> list[Hit]:
    response = await client.post("/search", headers={"Authorization": f"Bearer {key}"},
                                 json={"query": query, "max_results": n, "search_depth": "basic"})
    if (failed := _status_failure("Tavily", response)) is not None:
        raise failed
    body = _json("Tavily", response)
    return [Hit(_clean(r.get("title")), str(r.get("url", "")), _clean(r.get("content")))
            for r in body.get("results", [])][:n]


async def _brave(client: httpx.AsyncClient, query: str, n: int, key: str | None) -> list[Hit]:
    response = await client.get("/res/v1/web/search", params={"q": query, "count": n},
                                headers={"X-Subscription-Token": key or "", "Accept": "application/json"})
    if (failed := _status_failure("Brave Search", response)) is not None:
        raise failed
    body = _json("Brave Search", response)
    results = (body.get("web") or {}).get("results", [])
    return [Hit(_clean(r.get("title")), str(r.get("url", "")), _clean(r.get("description"))) for r in results][:n]


async def _exa(client: httpx.AsyncClient, query: str, n: int, key: str | None) -> list[Hit]:
    response = await client.post("/search", headers={"x-api-key": key or ""},
                                 json={"query": query, "numResults": n, "type": "auto", "contents": {"highlights": True}})
    if (failed := _status_failure("Exa", response)) is not None:
        raise failed
    body = _json("Exa", response)
    return [Hit(_clean(r.get("title")), str(r.get("url", "")),
                _clean(" … ".join(r.get("highlights") or []) or r.get("text")))
            for r in body.get("results", [])][:n]


PROVIDERS = {"duckduckgo": _duckduckgo, "tavily": _tavily, "brave": _brave, "exa": _exa}


async def search(clients: SearchClients, method: str, query: str, n: int, key: str | None) -> list[Hit]:
    """Results (possibly none) from one provider, or SearchFailed saying why the search did not run."""
    name = LABELS[method]
    try:
        return await PROVIDERS[method](clients.client(method), query, n, key)
    except httpx.TimeoutException:
        raise SearchFailed("transient", f"{name} did not answer within {TIMEOUT.read:.0f} seconds") from None
    except httpx.TransportError as e:
        raise SearchFailed("transient", f"{name} could not be reached ({type(e).__name__})") from None


def render(name: str, query: str, hits: list[Hit]) -> str:
    if not hits:
        return (f"{name} found no results for {query!r}. The search ran; nothing matched. "
                "Try fewer or different words.")
    lines = [f"{len(hits)} results from {name} for {query!r}:", ""]
    for i, hit in enumerate(hits, 1):
        lines += [f"{i}. {hit.title or '(no title)'}", f"   {hit.url}"] + ([f"   {hit.snippet}"] if hit.snippet else [])
    return "\n".join(lines)


DOC = """Search the public web for current information, with {name}.

Use it for facts that may have changed or that you do not know: news, prices, releases, documentation.
It finds pages and shows a short excerpt of each; it does not read them. To read a result in full,
pass its URL to web_fetch (when this agent has it). Cite the URLs you rely on.

Args:
    query: What to search for, in words a search engine understands, e.g. "python 3.13 release date".
        Required, no default.

Returns:
    Up to {n} results, numbered, each with its title, its URL and a short excerpt (at most 500
    characters): the first {n} of what the service found, not all of it. When nothing matched, a
    sentence saying the search ran and found nothing. When the search could not run (the service
    rate limiting, down or unreachable) you are told which and why, and may try again; when it
    will not run at all (the service refused this deployment's key or quota), a sentence saying
    so: say that you could not search rather than answer as if you had.{fallback}
"""


def local_tool(config: WebSearchConfig, clients: SearchClients, key: Callable[[], str | None]) -> Tool[Turn]:
    """The search tool; `key` reads the entry's key at each search, so a key put in place (or rotated) is used
    at the next search, without a reload, though the tool is built once (`shared`)."""
    method, n, name = config.method, config.max_results, LABELS[config.method]
    keyless = LABELS[KEYLESS]
    falls_back = config.fallback and method in PAID

    async def web_search(ctx: RunContext[Turn], query: str) -> str:
        if not query.strip():
            return trouble(ctx, "mistake", 'query is empty: pass the words to search for, e.g. query="..."')
        failed: SearchFailed | None = None
        secret = key() if method in PAID else None
        if method in PAID and not secret:
            if not falls_back:
                return trouble(ctx, "refusal", f"Web search is unavailable: the {name} API key could not be read on "
                                               "this server. Searching again will not help; tell the person.")
            dropped = f"{name} was skipped: its API key could not be read on this server"
        else:
            try:
                hits = await search(clients, method, query, n, secret)
            except SearchFailed as e:
                failed, dropped = e, f"{name} failed: {e.reason}"
            else:
                if hits or not falls_back:
                    return render(name, query, hits)
                dropped = f"{name} found no results"
        if failed is not None and not falls_back:
            return _did_not_run(ctx, failed.kind, failed.reason)
        # The keyless engine answers instead, and the result says which service dropped out and why.
        try:
            hits = await search(clients, KEYLESS, query, n, None)
        except SearchFailed as e:
            return _did_not_run(ctx, "transient", f"{dropped}; {keyless}, tried instead, failed too: {e.reason}")
        return f"{dropped}, so these are {keyless}'s results instead.\n\n" + render(keyless, query, hits)

    web_search.__doc__ = DOC.format(name=name, n=n, fallback=(
        f" When {name} fails, finds nothing or has no readable key, {keyless} is searched instead and the first "
        "line says why: tell the person the results are from the fallback." if falls_back else ""))
    return Tool(web_search, name="web_search")


def _did_not_run(ctx: RunContext[Turn], kind: Literal["transient", "refusal"], reason: str) -> str:
    if kind == "refusal":
        return trouble(ctx, "refusal", f"The search did not run: {reason}. Searching again will not help; "
                                       "say that you could not search.")
    return trouble(ctx, "transient", f"The search did not run: {reason}. Nothing was searched, so this says nothing "
                                     "about whether results exist: try again, or say that you could not search.")


def builder(clients: SearchClients) -> Any:
    def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
        config = ctx.config
        assert isinstance(config, WebSearchConfig)
        if config.method == "native":
            if approval_required(ctx.entry, "web_search") is not None:  # refused at load; never run ungated
                ctx.turn.notices.append("web_search is off: it needs approval, which method: native cannot ask for")
                return None
            return WebSearch(native=unless_asking_every_tool(WebSearchTool()), local=False)
        entry = ctx.entry

        def key() -> str | None:
            secret = read_key(entry)
            return secret.reveal() if secret is not None else None

        return simple(tools=[local_tool(config, clients, key)])

    return build


register(CapabilityDecl(
    id="web_research", name="Web search", category="research",
    tools=(ToolDecl("web_search", summary="Search the public web for current information"),),
    build=builder(CLIENTS), config_model=WebSearchConfig, scopes=("web:read",), needs_key="conditional",
    check_entry=check_entry, holds=(CLIENTS,),
    # The tool is the config's and reads the key at each search; the conversation's modes are read per request,
    # and the build's notice is told to every run (`SharedBuild`).
    shared=True,
    description="Searches the web with DuckDuckGo (free, no key), Tavily, Brave or Exa (a key in secret_id), "
    "or the model provider's own search. A search that could not run says so; it never reads as 'nothing found'.",
))
