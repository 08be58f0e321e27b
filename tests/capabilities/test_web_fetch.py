"""web_fetch: pages as Markdown through pydantic-ai's safe_download, private addresses refused
on every hop, exact-host filters in every spelling, and what is refused at load (file:line).

Runs go through the real gateway on the offline model, which calls the tool named in the
message. Nothing reaches the internet: pages are served on loopback, names resolve from a table
(`fake_dns`), and the "public" names of the redirect tests are routed to the loopback server.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from capabilities import web_fetch
from capabilities.tool_text import describes_return
from gateway import extensions
from gateway.messages import ChatKind
from gateway.approvals.policy import Modes
from gateway.runs.turn import Turn

from ..conftest import wait_for, write_config
from .support import Account, Place, Seen, World, agent, slack_binding, telegram_binding, world
from .web_pages import OFFERED, fake_dns, public_names, serve_pages

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
PRIVATE = "a private, loopback, link-local or cloud-metadata address, which this deployment never fetches"


@pytest.fixture(autouse=True)
def _no_real_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch)


@pytest.fixture
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test-only seam: let safe_download reach the loopback page server."""
    monkeypatch.setattr(web_fetch, "_test_allow_local", True)


def fetching(**config: object) -> dict[str, dict[str, object]]:
    return {"assistant": agent({"id": "web_fetch", "config": config})}


async def fetch(w: World, url: str) -> Seen:
    return await w.run(ALICE, DM, f"web_fetch url={url}")


async def test_a_page_arrives_as_markdown_a_pdf_as_the_file(tmp_path: Path, loopback_allowed: None) -> None:
    async with serve_pages() as pages, world(tmp_path, agents=fetching(max_content_chars=1000)) as w:
        seen = await fetch(w, pages.url("/article"))
        [page] = seen.tool_results
        assert "'title': 'Tea & Biscuits'" in page
        assert "Green tea\\n=========" in page and "**80 degrees**" in page and "* sencha" in page
        assert "[more](https://example.org/more)" in page

        [long] = (await fetch(w, pages.url("/long"))).tool_results
        assert long.endswith("\\n\\n[Content truncated]'}") and long.count("word") <= 1000 // 5

        [pdf] = (await fetch(w, pages.url("/paper.pdf"))).tool_results
        assert pdf.startswith("BinaryContent(") and "media_type='application/pdf'" in pdf and "%PDF-1.4" in pdf

        seen = await fetch(w, pages.url("/missing"))
        assert not seen.tool_results and "404 Not Found" in seen.retries[0], "an error status is worth a retry"


async def test_the_shipped_configuration_refuses_private_addresses(tmp_path: Path) -> None:
    """No seam: loopback, private, link-local, cloud metadata and IPv6 loopback, each a retry prompt saying why."""
    async with serve_pages() as pages, world(tmp_path, agents=fetching()) as w:
        for url, address in [(pages.url("/secret"), "127.0.0.1"), ("http://10.1.2.3/", "10.1.2.3"),
                             ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
                             (f"http://[::1]:{pages.port}/secret", "::1"),
                             (f"http://intranet.example:{pages.port}/secret", "10.20.30.40"),
                             (f"http://localhost:{pages.port}/secret", "127.0.0.1")]:
            seen = await fetch(w, url)
            assert not seen.tool_results, f"{url} must not read as a page"
            [retry] = seen.retries
            assert f"{url} was not fetched" in retry and f"to {address}, {PRIVATE}" in retry
            assert "force_download" not in retry, "the model has no such option"
        assert pages.hits == []


async def test_an_allowlist_naming_a_private_address_does_not_open_it(tmp_path: Path) -> None:
    """The filters say which sites an agent may read; they never widen what the network check allows."""
    async with serve_pages() as pages, world(tmp_path, agents=fetching(allowed_domains=["127.0.0.1", "::1"])) as w:
        seen = await fetch(w, pages.url("/secret"))
        assert f"to 127.0.0.1, {PRIVATE}" in seen.retries[0]
        assert pages.hits == []


async def test_a_public_name_that_redirects_inward_is_refused_at_the_hop(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    async with serve_pages() as pages, world(tmp_path, agents=fetching()) as w:
        public_names(monkeypatch, {"news.example": pages.port})
        [page] = (await fetch(w, pages.url("/article", host="news.example"))).tool_results
        assert "Green tea" in page, "the public name itself is fetched"

        for path, address in [("/to-loopback", "127.0.0.1"), ("/to-metadata", "169.254.169.254"),
                              ("/to-ipv6", "::1"), ("/to-private-name", "10.20.30.40")]:
            seen = await fetch(w, pages.url(path, host="news.example"))
            assert not seen.tool_results
            assert f"to {address}, {PRIVATE}" in seen.retries[0], path
        assert "/secret" not in pages.hits, "no redirect target inside was ever requested"


async def test_cloud_metadata_stays_refused_even_through_the_test_seam(tmp_path: Path, loopback_allowed: None) -> None:
    async with world(tmp_path, agents=fetching()) as w:
        seen = await fetch(w, "http://169.254.169.254/latest/meta-data/")
        assert f"to 169.254.169.254, {PRIVATE}" in seen.retries[0]


async def test_domain_filters_match_hosts_exactly_blocked_wins_and_refuse_as_text(
        tmp_path: Path, loopback_allowed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"docs.example": ["127.0.0.1"], "blocked.example": ["127.0.0.1"],
                           "www.docs.example": ["127.0.0.1"]})
    config = fetching(allowed_domains=["Docs.Example.", "blocked.example"], blocked_domains=["blocked.example"])
    async with serve_pages() as pages, world(tmp_path, agents=config) as w:
        [page] = (await fetch(w, pages.url("/article", host="docs.example"))).tool_results
        assert "Green tea" in page

        for host in ("www.docs.example", "127.0.0.1", "blocked.example"):
            seen = await fetch(w, pages.url("/article", host=host))
            assert seen.retries == [], "a rule saying no is an answer, not an invitation to retry"
            assert seen.tool_results == [f"{pages.url('/article', host=host)} was not fetched: this agent may not "
                                         f"read pages on {host}."]
        # A redirect to a host the agent may not read is refused at that hop.
        seen = await fetch(w, pages.url("/to-blocked", host="docs.example"))
        assert seen.tool_results[0].endswith("may not read pages on blocked.example.")
        assert pages.hits.count("/article") == 1


async def test_a_unicode_host_cannot_slip_past_an_idna_denylist(tmp_path: Path, loopback_allowed: None) -> None:
    config = fetching(blocked_domains=["xn--exmple-cua.com", "faß.de", "ｅｖｉｌ.com"])
    async with world(tmp_path, agents=config) as w:
        for url in ("https://exämple.com/", "https://EXÄMPLE.com./", "https://xn--exmple-cua.com/",
                    "https://fass.de/", "https://xn--fa-hia.de/", "https://faß.de/", "https://evil.com/",
                    "https://evil\u3002com/"):
            seen = await fetch(w, url)
            assert len(seen.tool_results) == 1 and "may not read pages on" in seen.tool_results[0], url
        # Each was refused by the filter, before any name was resolved: the test DNS never saw them.
        assert not any("DNS resolution failed" in r for r in seen.retries)


def test_entries_are_stored_in_one_spelling_and_every_spelling_filters() -> None:
    config = web_fetch.WebFetchConfig(allowed_domains=["Example.COM.", "exämple.com", "ｅｘａｍｐｌｅ.com"],
                                      blocked_domains=["faß.de"])
    assert config.allowed_domains == ["example.com", "xn--exmple-cua.com"]
    assert config.blocked_domains == ["xn--fa-hia.de"]
    assert set(web_fetch.spellings(config.blocked_domains)) == {"xn--fa-hia.de", "faß.de", "fass.de"}
    assert web_fetch.WebFetchConfig(blocked_domains=[]).blocked_domains is None, "an empty denylist means unset"


AGENT = """\
name: A
model: demo
capabilities:
  - id: web_fetch
    approval: required
    config:
      method: native
      allowed_domains:
        - "*.example.com"
        - https://docs.example.com
        - docs.example.com/guide
        - docs.example.com:8443
      blocked_domains: []
      max_content_chars: 500
  - id: web_research
    config: {method: tavily}
"""

SEARCH_NATIVE = """\
name: B
model: demo
capabilities:
  - id: web_fetch
    tool_approval: {web_fetch: required}
    config: {method: auto, allowed_domains: []}
  - id: web_research
    approval: required
    config: {method: native}
"""


def test_load_refuses_what_could_never_match_and_a_gate_that_could_never_fire(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text(AGENT)
    (cfg / "agents" / "other.yaml").write_text(SEARCH_NATIVE)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    a, b = cfg / "agents" / "assistant.yaml", cfg / "agents" / "other.yaml"
    fetch_cfg = "capabilities.0.config"
    assert sorted(str(p) for p in e.value.problems if not p.warning) == sorted([
        f"{a}:9:11: {fetch_cfg}.allowed_domains.0: '*.example.com' is a wildcard: entries match a host exactly, "
        "so list each host (e.g. example.com and www.example.com)",
        f"{a}:10:11: {fetch_cfg}.allowed_domains.1: 'https://docs.example.com' has a scheme: write the bare hostname "
        "(e.g. example.com)",
        f"{a}:11:11: {fetch_cfg}.allowed_domains.2: 'docs.example.com/guide' has a path: entries are bare hostnames "
        "and match every page on the host",
        f"{a}:12:11: {fetch_cfg}.allowed_domains.3: 'docs.example.com:8443' has a port: entries match the host on "
        "every port; write the bare hostname",
        f"{a}:14:7: {fetch_cfg}.max_content_chars: Input should be greater than or equal to 1000",
        f"{a}:15:5: capabilities.1.secret_id: web_research with method: tavily needs Tavily's API key: set secret_id "
        "(e.g. env:TAVILY_API_KEY), or use method: duckduckgo, which needs none",
        f"{b}:6:28: capabilities.0.config.allowed_domains: an empty allowlist would refuse every page: list the "
        "hosts, or leave allowed_domains unset",
        f"{b}:8:5: capabilities.1.approval: approval can never be asked for web_search with method: native: the "
        "model provider runs the search, out of the gate's reach. Choose a method this deployment runs "
        "(duckduckgo, tavily, brave, exa), or drop the approval requirement",
    ])


@pytest.mark.parametrize(("method", "where", "line"), [("native", "approval: required", "5:5"),
                                                        ("auto", "tool_approval: {web_fetch: required}", "5:21")])
def test_fetch_approval_with_a_provider_method_is_refused(tmp_path: Path, method: str, where: str, line: str) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text(f"name: A\nmodel: demo\ncapabilities:\n  - id: web_fetch\n    {where}\n"
                    f"    config: {{method: {method}}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    field = "approval" if where.startswith("approval") else "tool_approval.web_fetch"
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem.startswith(f"{path}:{line}: capabilities.0.{field}: approval can never be asked for web_fetch "
                              f"with method: {method}: ")
    assert problem.endswith("Set method: local, or drop the approval requirement")
    # Local and gated is a legitimate agent.
    path.write_text(f"name: A\nmodel: demo\ncapabilities:\n  - id: web_fetch\n    {where}\n")
    load_config(cfg)


async def test_native_and_auto_hand_the_fetch_to_the_provider_unless_every_tool_must_ask(tmp_path: Path) -> None:
    agents = {"assistant": agent({"id": "web_fetch", "config": {"method": "native"}}, model="offered"),
              "auto": agent({"id": "web_fetch", "config": {"method": "auto"}}, model="offered")}
    bindings = {"slack": slack_binding(), "telegram": telegram_binding(agent="auto")}
    me = Account("telegram", "tg", "101", "alice")
    tg = Place("telegram", "telegram", "tg", "101", ChatKind.DM)
    async with world(tmp_path, agents=agents, bindings=bindings) as w:
        OFFERED.clear()
        await w.run(ALICE, DM, "hello")
        await w.run(me, tg, "hello")
        # The offline model supports provider tools: both fetch on its side, with no local tool beside.
        assert OFFERED == [(["web_fetch"], []), (["web_fetch"], [])]

        # "Ask before every tool": a provider's fetch could never wait, so it is left out of the run;
        # auto falls back to the local tool, which the gate holds.
        async def asking() -> Modes:
            return Modes(ask_every_tool=True)

        def in_asking_conversation(turn: Turn) -> Turn:
            return dataclasses.replace(turn, read_modes=asking)

        OFFERED.clear()
        await w.run(ALICE, DM, "hello", adjust=in_asking_conversation)
        await w.run(me, tg, "hello", adjust=in_asking_conversation)
        assert OFFERED == [([], []), ([], ["web_fetch"])]


async def test_the_tool_tells_what_it_does_when_its_argument_and_what_comes_back(tmp_path: Path) -> None:
    config = fetching(max_content_chars=2000, allowed_domains=["docs.example"])
    async with world(tmp_path, agents=config) as w:
        tool = (await w.run(ALICE, DM, "hello")).defs["web_fetch"]
    text = tool.description or ""
    assert describes_return(text)
    assert text.startswith("<summary>Read the page at a URL, as Markdown.") and "use web_search" in text
    assert "Only these hosts may be read: docs.example." in text
    assert "longer than 2,000 characters is cut there" in text and "private" in text and "refused" in text
    assert "e.g. https://example.com/docs/page" in tool.parameters_json_schema["properties"]["url"]["description"]


EXAMPLE = Path(__file__).parents[2] / "config" / "examples" / "researcher.yaml"


async def test_the_example_researcher_loads_and_asks_before_it_reads_a_page(tmp_path: Path, loopback_allowed: None,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from ruamel.yaml import YAML

    spec = YAML(typ="safe").load(EXAMPLE.read_text())
    assert [c["id"] for c in spec["capabilities"]] == ["web_research", "web_fetch", "clock"]
    extensions.register_checks()
    cfg = write_config(tmp_path / "as-shipped", bindings={"web": {"platform": "web", "agent": "researcher"}})
    (cfg / "agents" / "researcher.yaml").write_text(EXAMPLE.read_text())
    load_config(cfg)

    async with serve_pages() as pages, world(tmp_path, agents={"assistant": {**spec, "model": "recorder"}}) as w:
        seen = await w.say(ALICE, DM, f"web_fetch url={pages.url('/article')}")
        assert {"web_fetch", "web_search"} <= set(seen.tools)
        [card] = await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        assert [i.tool_name for i in card.items] == ["web_fetch"]
        assert pages.hits == [], "nothing is fetched before a person approves"


async def test_a_server_that_dribbles_cannot_hold_a_fetch_past_its_deadline(tmp_path: Path, loopback_allowed: None) -> None:
    """A byte a second resets a per-read timeout for ever; the deadline is on the whole fetch, and
    the model is told which limit stopped it (docs/security.md, "Time limits")."""
    async with serve_pages() as pages, world(tmp_path, agents=fetching(deadline_seconds=2)) as w:
        seen = await fetch(w, pages.url("/dribble"))
        [told] = seen.retries + seen.tool_results
        assert "did not finish loading within 2 s, the wall-clock limit on one fetch" in told
        assert "/dribble" in pages.hits
