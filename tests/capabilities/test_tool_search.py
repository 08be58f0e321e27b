"""tool_search: three MCP servers' tools are found by search, not sent up front; a found tool still parks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from gateway import extensions
from gateway.messages import ChatKind, Sender
from gateway.outbound.adapter import Decision
from gateway.store import repo

from ..conftest import wait_for, write_config
from .shaping_script import SCRIPT, call, mcp_server, say
from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)


def _agent(search: bool = True, **config: Any) -> dict[str, Any]:
    capabilities = [{"id": "memory_files", "tool_overrides": {"list_memory": {"name": "my_notes"}}}]
    if search:
        capabilities.append({"id": "tool_search", "config": config})
    spec = agent(*capabilities, model="shaping-scripted")
    spec["mcp_servers"] = [mcp_server(name, tools={"listing": "allow"}) for name in ("alpha", "beta", "gamma")]
    return {"assistant": spec}


async def test_three_servers_offer_no_schema_up_front_and_a_found_tool_still_parks(tmp_path: Path) -> None:
    # keywords: the local search_tools function (the offline model would otherwise be offered the native one).
    async with world(tmp_path, agents=_agent(strategy="keywords", max_results=3)) as w:
        SCRIPT.reset(call("search_tools", queries=["deploy production"]), call("beta_deploy", service="api"))
        run = await w.say(ALICE, DM, "deploy the api with beta")
        first, second = SCRIPT.requests
        assert not [t for t in first.tools if t.startswith(("alpha_", "beta_", "gamma_"))], "no MCP schema up front"
        assert {"search_tools", "my_notes"} <= set(first.tools), "our own capabilities stay visible, renamed"
        [found] = second.tool_results()
        assert "beta_deploy" in found
        assert "beta_deploy" in second.tools and "alpha_listing" not in second.tools
        # The discovered tool is gated under its real name: the run parks with a card.
        await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        [card] = w.adapter("slack").cards
        [item] = card.items
        assert item.tool_name == "beta_deploy" and item.capability == "mcp:beta"
        assert (await w.gw.store.run(card.run_id)).status == repo.PARKED
        del run

        # Approved, the run resumes from its stored state and the found tool runs.
        SCRIPT.reset(say("deployed"))
        outcome = await w.gw.approvals.decide(item.approval_id, Decision.APPROVE, Sender("U1", "alice"),
                                              binding_id="slack", surface="slack")  # alice clicks Approve
        assert outcome.accepted, outcome

        async def finished() -> bool:
            run = await w.gw.store.run(card.run_id)
            return run is not None and run.status == repo.FINISHED

        await wait_for(finished, what="the resumed run")
        [resumed] = SCRIPT.requests
        assert resumed.tool_results() == ["deployed api"]


async def test_without_tool_search_every_mcp_schema_is_sent(tmp_path: Path) -> None:
    async with world(tmp_path, agents=_agent(search=False)) as w:
        SCRIPT.reset(say("hi"))
        await w.say(ALICE, DM, "hello")
        [first] = SCRIPT.requests
        assert {"alpha_deploy", "beta_listing", "gamma_page"} <= set(first.tools) and "search_tools" not in first.tools


def test_bad_config_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: tool_search\n    config:\n"
                    "      strategy: fuzzy\n      max_results: 51\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = sorted(str(p) for p in e.value.problems if not p.warning)
    assert problems == sorted([
        f"{path}:6:7: capabilities.0.config.strategy: Input should be 'auto', 'keywords', 'bm25' or 'regex'",
        f"{path}:7:7: capabilities.0.config.max_results: Input should be less than or equal to 50",
    ])
