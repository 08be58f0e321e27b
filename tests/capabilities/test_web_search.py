"""web_search: one tool over four services spoken to on the wire, failures that say so, keys when needed.

Every provider is a fake on loopback in the shape it documents (tests/fakes/search.py), reached
through `_test_base_urls`, the seam only tests assign. Runs go through the real gateway on the
offline model, which calls the tool named in the message.
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from capabilities import web_search
from capabilities.tool_text import describes_return
from gateway import extensions
from gateway.messages import ChatKind
from gateway.approvals.policy import Modes

from ..conftest import write_config
from ..fakes.search import FakeSearch, fake_search
from .support import Account, Place, Seen, World, agent, world
from .web_pages import OFFERED

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
PAID = ["tavily", "brave", "exa"]
NAMES = {"duckduckgo": "DuckDuckGo", "tavily": "Tavily", "brave": "Brave Search", "exa": "Exa"}


def searching(method: str, **config: object) -> dict[str, dict[str, object]]:
    entry: dict[str, object] = {"id": "web_research", "config": {"method": method, **config}}
    if method in PAID:
        entry["secret_id"] = "env:SEARCH_API_KEY"
    return {"assistant": agent(entry)}


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSearch:
    monkeypatch.setenv("SEARCH_API_KEY", "k-123")
    async with fake_search() as f:
        for method in NAMES:
            monkeypatch.setitem(web_search._test_base_urls, method, f.base_url(method))
        yield f


async def search(w: World, query: str = "python") -> Seen:
    return await w.run(ALICE, DM, f'web_search query="{query}"')


@pytest.mark.parametrize("method", list(NAMES))
async def test_each_service_is_searched_and_its_results_numbered(tmp_path: Path, fake: FakeSearch,
                                                                 method: str) -> None:
    async with world(tmp_path, agents=searching(method, max_results=2)) as w:
        [answer] = (await search(w, "python release")).tool_results
    assert answer.startswith(f"2 results from {NAMES[method]} for 'python release':\n\n1. Download Python\n"
                             "   https://www.python.org/downloads/\n   The official home of the Python language\n"
                             "2. Python 3.13 release notes\n   https://docs.python.org/3.13/whatsnew/3.13.html")
    assert "<strong>" not in answer and "ads.example" not in answer
    [request] = fake.seen
    assert request.query == "python release"
    if method in PAID:
        assert request.key == "k-123" and request.count == 2, "the key and the ceiling travel with the request"


@pytest.mark.parametrize("method", list(NAMES))
async def test_nothing_found_says_the_search_ran(tmp_path: Path, fake: FakeSearch, method: str) -> None:
    fake.answer[method] = "empty"
    async with world(tmp_path, agents=searching(method, **({"fallback": False} if method in PAID else {}))) as w:
        seen = await search(w, "zzqx")
    assert seen.tool_results == [f"{NAMES[method]} found no results for 'zzqx'. The search ran; nothing matched. "
                                 "Try fewer or different words."]


@pytest.mark.parametrize(("method", "answer", "why"), [
    ("tavily", "429", "Tavily is rate limiting this deployment's searches (HTTP 429); it asks to wait 30 seconds"),
    ("brave", "503", "Brave Search is down or failing (HTTP 503)"),
    ("exa", "500", "Exa is down or failing (HTTP 500)"),
    ("duckduckgo", "anomaly", "DuckDuckGo is rate limiting this deployment's searches (HTTP 202)"),
    ("duckduckgo", "blank", "DuckDuckGo answered with a page that holds no results list"),
])
async def test_a_search_that_did_not_run_says_so_and_why(tmp_path: Path, fake: FakeSearch, method: str,
                                                         answer: str, why: str) -> None:
    fake.answer[method] = answer
    no_fallback = {"fallback": False} if method in PAID else {}
    async with world(tmp_path, agents=searching(method, **no_fallback)) as w:
        seen = await search(w)
    assert seen.tool_results == [], "a failure never reads as a result, empty or not"
    [retry] = seen.retries
    assert retry.startswith(f"The search did not run: {why}")
    assert "Nothing was searched, so this says nothing about whether results exist" in retry


async def test_an_unreachable_service_and_a_rejected_key(tmp_path: Path, fake: FakeSearch,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setitem(web_search._test_base_urls, "brave", f"http://127.0.0.1:{closed}")
    async with world(tmp_path, agents=searching("brave", fallback=False)) as w:
        [retry] = (await search(w)).retries
        assert retry.startswith("The search did not run: Brave Search could not be reached (ConnectError)")

    fake.answer["tavily"] = "401"
    async with world(tmp_path / "key", agents=searching("tavily", fallback=False)) as w:
        seen = await search(w)
    assert seen.retries == [], "a rejected key is not the model's to fix"
    assert seen.tool_results == ["The search did not run: Tavily refused this deployment's API key (HTTP 401). "
                                 "Searching again will not help; say that you could not search."]


async def test_a_key_that_cannot_be_read_is_said_not_searched_around(tmp_path: Path, fake: FakeSearch,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    async with world(tmp_path, agents=searching("exa", fallback=False)) as w:
        monkeypatch.delenv("SEARCH_API_KEY")
        seen = await search(w)
    assert seen.tool_results == ["Web search is unavailable: the Exa API key could not be read on this server. "
                                 "Searching again will not help; tell the person."]
    assert fake.seen == []


@pytest.mark.parametrize(("method", "answer", "dropped"), [
    ("tavily", "429", "Tavily failed: Tavily is rate limiting this deployment's searches (HTTP 429)"),
    ("brave", "503", "Brave Search failed: Brave Search is down or failing (HTTP 503)"),
    ("exa", "401", "Exa failed: Exa refused this deployment's API key (HTTP 401)"),
    ("tavily", "empty", "Tavily found no results"),
])
async def test_a_paid_service_that_drops_out_falls_back_to_duckduckgo_and_says_why(
        tmp_path: Path, fake: FakeSearch, method: str, answer: str, dropped: str) -> None:
    """native-tools "Web tools": a named provider is a preference; the keyless engine answers and
    the result says which provider dropped out and why, so a weaker answer is never unexplained."""
    fake.answer[method] = answer
    async with world(tmp_path, agents=searching(method, max_results=2)) as w:
        seen = await search(w, "python release")
    [answer_text] = seen.tool_results
    assert answer_text.startswith(f"{dropped}"), answer_text
    assert ", so these are DuckDuckGo's results instead.\n\n2 results from DuckDuckGo for 'python release':" \
        in answer_text
    assert [r.method for r in fake.seen] == [method, "duckduckgo"]
    assert fake.seen[1].key is None, "the paid key never goes to the fallback"


async def test_an_unreadable_key_skips_to_the_fallback_and_both_failing_says_both(
        tmp_path: Path, fake: FakeSearch, monkeypatch: pytest.MonkeyPatch) -> None:
    async with world(tmp_path, agents=searching("exa")) as w:
        monkeypatch.delenv("SEARCH_API_KEY")
        [answer] = (await search(w)).tool_results
        assert answer.startswith("Exa was skipped: its API key could not be read on this server, so these are "
                                 "DuckDuckGo's results instead.")
        assert [r.method for r in fake.seen] == ["duckduckgo"], "a provider with no key is skipped, not called"
        fake.answer["duckduckgo"] = "anomaly"
        monkeypatch.setenv("SEARCH_API_KEY", "k-123")
        fake.answer["exa"] = "503"
        [retry] = (await search(w)).retries
    assert retry.startswith("The search did not run: Exa failed: Exa is down or failing (HTTP 503); DuckDuckGo, "
                            "tried instead, failed too: DuckDuckGo is rate limiting this deployment's searches")


async def test_one_client_per_service_is_shared_by_runs_and_closed_at_stop(tmp_path: Path, fake: FakeSearch) -> None:
    async with world(tmp_path, agents=searching("tavily")) as w:
        await search(w)
        await search(w)
        client = web_search.CLIENTS.client("tavily")
        assert not client.is_closed
    first, second = fake.seen
    assert first.peer == second.peer, "the second run reused the first run's connection: no client per run"
    assert client.is_closed, "the gateway closed it when it stopped"


@pytest.mark.parametrize("method", PAID)
def test_a_paid_method_without_a_key_is_refused_at_load_the_free_one_needs_none(tmp_path: Path, method: str) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text(f"name: A\nmodel: demo\ncapabilities:\n  - id: web_research\n    config:\n      method: {method}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem == (f"{path}:4:5: capabilities.0.secret_id: web_research with method: {method} needs "
                       f"{NAMES[method]}'s API key: set secret_id (e.g. env:{method.upper()}_API_KEY), or use method: "
                       "duckduckgo, which needs none")
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: web_research\n")
    load_config(cfg)


def test_native_search_with_approval_is_refused_at_load(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: web_research\n"
                    "    tool_approval:\n      web_search: required\n    config: {method: native}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem.startswith(f"{path}:6:7: capabilities.0.tool_approval.web_search: approval can never be asked "
                              "for web_search with method: native: the model provider runs the search")
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: web_research\n    approval: required\n")
    load_config(cfg)  # gated searching with a method this deployment runs is a legitimate agent


async def test_native_hands_the_search_to_the_provider_unless_every_tool_must_ask(tmp_path: Path) -> None:
    agents = {"assistant": agent({"id": "web_research", "config": {"method": "native"}}, model="offered")}
    async with world(tmp_path, agents=agents) as w:
        OFFERED.clear()
        await w.run(ALICE, DM, "hello")

        async def asking() -> Modes:
            return Modes(ask_every_tool=True)

        await w.run(ALICE, DM, "hello", adjust=lambda turn: dataclasses.replace(turn, read_modes=asking))
    assert OFFERED == [(["web_search"], []), ([], [])], "a search that could not wait for a person is left out"


async def test_the_tool_tells_what_it_does_when_its_argument_and_what_comes_back(tmp_path: Path) -> None:
    async with world(tmp_path, agents=searching("duckduckgo", max_results=3)) as w:
        tool = (await w.run(ALICE, DM, "hello")).defs["web_search"]
    text = tool.description or ""
    assert describes_return(text)
    assert text.startswith("<summary>Search the public web for current information, with DuckDuckGo.")
    assert "pass its URL to web_fetch" in text and "Up to 3 results" in text and "rate limiting" in text
    assert "Required, no default" in tool.parameters_json_schema["properties"]["query"]["description"]


async def test_both_are_in_the_api_with_their_schemas_and_no_setting_permits_local_addresses(tmp_path: Path) -> None:
    import aiohttp

    async with world(tmp_path) as w, aiohttp.ClientSession(w.gw.url) as s:
        served = {c["id"]: c for c in (await (await s.get("/api/v1/agents/capabilities")).json())["capabilities"]}
    search, fetch = served["web_research"], served["web_fetch"]
    assert [t["id"] for t in search["tools"]] == ["web_search"] and search["key"] == "conditional"
    method = search["config_schema"]["properties"]["method"]
    assert method["enum"] == ["duckduckgo", "native", "tavily", "brave", "exa"] and method["default"] == "duckduckgo"
    assert method["x-enum-labels"]["exa"] == "Exa"
    assert {"default": 5, "minimum": 1, "maximum": 10}.items() <= search["config_schema"]["properties"]["max_results"].items()
    assert [t["id"] for t in fetch["tools"]] == ["web_fetch"] and fetch["scopes"] == ["web:fetch"]
    props = fetch["config_schema"]["properties"]
    assert {"default": 50000, "minimum": 1000, "maximum": 200000}.items() <= props["max_content_chars"].items()
    assert set(props) == {"method", "allowed_domains", "blocked_domains", "max_content_chars", "deadline_seconds"}, \
        "nothing an agent file can set reaches safe_download's allow_local"
    assert fetch["config_schema"]["additionalProperties"] is False
