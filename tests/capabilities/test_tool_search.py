"""tool_search: three MCP servers' tools are found by search, not sent up front; a found tool still parks;
the agent shares its Agent across runs and the model is sent what an Agent built for the run sends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import ModelRequestParameters

from bindings.loader import ConfigError, load_config
from gateway import extensions
from gateway.messages import ChatKind, Sender
from gateway.outbound.adapter import Decision
from gateway.runs.runner import TurnAgent
from gateway.runs.turn import Turn
from gateway.store import repo

from ..conftest import wait_for, write_config
from .shaping_script import SCRIPT, call, mcp_server, say
from .support import Account, Place, World, agent, built_for_its_run, world

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


def _as_sent(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The messages as the model reads them: each part's kind and text or arguments (no ids, no times)."""
    return [(type(m).__name__, [(type(p).__name__, str(getattr(p, "content", None) or getattr(p, "args", "")))
                                for p in m.parts])
            for m in messages if isinstance(m, (ModelRequest, ModelResponse))]


def _as_offered(parameters: ModelRequestParameters) -> ModelRequestParameters:
    """The request's parameters without the tools' `capability_id`: pydantic-ai's own tag for which
    capability instance brought a tool (each run's differ), which no model is sent."""
    return replace(parameters, function_tools=[replace(t, capability_id=None) for t in parameters.function_tools])


async def _requests_of(w: World, build: Any, channel: str) -> tuple[AbstractAgent[Turn, Any], list[Any]]:
    """One run of "deploy the api with beta" (search, then the found tool, which parks) in a DM of its
    own, through the agent `build(turn)` makes: the agent and what each model request carried."""
    turn = await w.turn(ALICE, Place("slack", "slack", "T1", channel, ChatKind.DM), "deploy the api with beta")
    for prepare in w.gw.runner.turn_preparers:  # the MCP servers ready, as `Runner.drive` does first
        await prepare(turn)
    agent = build(turn)
    SCRIPT.reset(call("search_tools", queries=["deploy production"]), call("beta_deploy", service="api"))
    async with agent.run_stream_events("deploy the api with beta", deps=turn) as events:
        async for _ in events:
            pass
    return agent, list(SCRIPT.requests)


async def test_an_agent_with_tool_search_shares_its_agent_and_the_model_is_sent_the_same(tmp_path: Path) -> None:
    async with world(tmp_path, agents=_agent(strategy="keywords", max_results=3)) as w:
        runner = w.gw.runner
        first, shared = await _requests_of(w, runner.build_agent, "D1")
        second, again = await _requests_of(w, runner.build_agent, "D2")
        _, reference = await _requests_of(w, lambda turn: built_for_its_run(w.gw, turn), "D3")

        assert isinstance(first, TurnAgent) and isinstance(second, TurnAgent)
        assert first.wrapped is second.wrapped, "one Agent for both runs, built once"
        assert len(shared) == len(again) == len(reference) == 2  # the search, then the found tool's call
        for ours, theirs in zip([*shared, *again], [*reference, *reference]):
            assert ours.instructions == theirs.instructions
            # The tools (all of each definition), native tools, output mode and instruction parts.
            assert ours.parameters is not None and theirs.parameters is not None
            assert _as_offered(ours.parameters) == _as_offered(theirs.parameters)
            assert _as_sent(ours.messages) == _as_sent(theirs.messages)
        assert "beta_deploy" not in shared[0].tools and "beta_deploy" in shared[1].tools


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
