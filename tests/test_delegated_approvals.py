"""A gated tool inside a sync delegate, end to end through the web API: the whole run parks, the card names
the delegate, a decision resumes that delegate where it stopped, and its answer reaches the parent's turn once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from .conftest import run_finished, running_gateway, wait_for, write_config
from .support.plugin_delegation import LEAD_REQUESTS
from .support.plugin_ops import RAN
from .test_approvals import Chat, approved_after_restart


def _config(tmp: Path, *, nested: bool = False) -> Path:
    def delegating(*names: str, depth: int = 1) -> dict[str, Any]:
        return {"model": "test:lead", "subagents": list(names),
                "capabilities": [{"id": "subagents", "config": {"max_depth": depth}}]}
    agents: dict[str, Any] = {
        "lead": {"name": "Lead", **delegating("middle" if nested else "ops", depth=2 if nested else 1)},
        "ops": {"name": "Ops", "description": "Deploys things", "model": "test:ops",
                "capabilities": [{"id": "test_ops"}]},
    }
    if nested:
        agents["middle"] = {"name": "Middle", **delegating("ops")}
    return write_config(tmp, agents=agents, bindings={"web": {"platform": "web", "agent": "lead"}},
                        gateway={"plugins": ["tests.support.plugin_delegation"]})


async def test_a_delegates_gated_call_parks_the_run_and_approval_resumes_it_once(tmp_path: Path) -> None:
    RAN.clear()
    LEAD_REQUESTS.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("delegate ops deploy api")
        card = await chat.card()
        assert RAN == [], "the delegate's gated tool ran before anyone decided"
        assert await chat.run_status(gw, sent["run_id"]) == "parked", "the whole run parks, not just the delegate"
        [item] = card["items"]
        assert item["headline"] == "ops wants to run deploy" and item["delegate"] == "ops"
        assert item["tool"] == "deploy" and item["capability"] == "test_ops"
        status, body = await chat.decide(item["approval_id"], "approve")
        assert status == 200 and body["accepted"]
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == [("deploy", "api")], "the approved call ran exactly once"
        replies = await chat.replies()
        assert [r for r in replies if "task said" in r] == ["task said: [deploy: deployed api]"]
        assert LEAD_REQUESTS == ["delegate", "answer"], "the parent's model was asked once for each step"
        turn_runs = await _runs(gw, chat)
        assert [(r["agent"], r["outcome"]) for r in turn_runs] == [("ops", "finished")]
        assert turn_runs[0]["answer"].strip() == "[deploy: deployed api]"


async def test_a_restart_between_park_and_approval_still_resumes_the_delegate_once(tmp_path: Path) -> None:
    RAN.clear()
    LEAD_REQUESTS.clear()
    cfg = _config(tmp_path / "c")
    async with approved_after_restart(cfg, "delegate ops deploy web") as (gw, chat):
        assert RAN == [("deploy", "web")]
        assert [r for r in await chat.replies() if "task said" in r] == ["task said: [deploy: deployed web]"]
        assert [r["outcome"] for r in await _runs(gw, chat)] == ["finished"]


async def test_a_denial_reaches_the_delegate_and_it_goes_on(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("delegate ops deploy db")
        card = await chat.card()
        status, _ = await chat.decide(card["items"][0]["approval_id"], "deny")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == []
        [answer] = [r for r in await chat.replies() if "task said" in r]
        # The delegate's model read the denial (its script reports the tool's result) and answered the parent.
        assert answer.startswith("task said: [deploy: local denied this call.")
        [run] = await _runs(gw, chat)
        assert run["outcome"] == "finished"


async def test_a_nested_delegates_call_names_both_and_resumes_through_both(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c", nested=True)) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("delegate middle delegate ops deploy cache")
        card = await chat.card()
        [item] = card["items"]
        assert item["headline"] == "middle › ops wants to run deploy"
        status, _ = await chat.decide(item["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == [("deploy", "cache")]
        assert [r for r in await chat.replies() if "task said" in r] == [
            "task said: task said: [deploy: deployed cache]"]
        assert sorted((r["agent"], r["outcome"]) for r in await _runs(gw, chat)) == [
            ("middle", "finished"), ("ops", "finished")]


async def test_a_handoff_waited_for_parks_on_its_gated_call_and_resumes_in_the_same_slot(tmp_path: Path) -> None:
    RAN.clear()
    LEAD_REQUESTS.clear()
    agents = {
        "lead": {"name": "Lead", "model": "test:lead", "handoffs": ["ops"], "capabilities": [{"id": "handoffs"}]},
        "ops": {"name": "Ops", "description": "Deploys things", "model": "test:ops-anywhere",
                "capabilities": [{"id": "test_ops"}]},
    }
    cfg = write_config(tmp_path / "c", agents=agents, bindings={"web": {"platform": "web", "agent": "lead"}},
                       gateway={"plugins": ["tests.support.plugin_delegation"]})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("send ops deploy queue")
        card = await chat.card()
        [item] = card["items"]
        assert item["headline"] == "ops wants to run deploy" and RAN == []
        status, _ = await chat.decide(item["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == [("deploy", "queue")]
        assert [r for r in await chat.replies() if "said" in r] == ["send_to_agent said: [deploy: deployed queue]"]
        assert LEAD_REQUESTS == ["send", "answer"]
        conv = await gw.store.conversation(chat.conv)
        assert conv is not None
        slots = [k for k in await gw.store.capability_state.keys("handoffs", conv.id) if k.startswith("sent:")]
        assert len(slots) == 1, "the resumed handoff is the same handoff, not a second one"


async def _approved_after_a_reload(config: Callable[[list[str]], Path], say: str) -> list[str]:
    """A card shown while lead may reach ops (`config(["ops"])`), lead's list changed to scribe and
    reloaded, then the card approved: the chat's replies once the run has ended."""
    async with running_gateway(config(["ops"])) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say(say)
        card = await chat.card()
        config(["scribe"])
        ok, problems = await gw.reload_from_disk()
        assert ok, problems
        status, _ = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        return await chat.replies()


def _lead_reaching(tmp: Path, lead: dict[str, Any]) -> Path:
    """lead (as given), ops with its gated tool, and scribe, on the web binding."""
    return write_config(tmp, agents={
        "lead": {"name": "Lead", "model": "test:lead", **lead},
        "ops": {"name": "Ops", "description": "Deploys things", "model": "test:ops-anywhere",
                "capabilities": [{"id": "test_ops"}]},
        "scribe": {"name": "Scribe", "description": "Writes things down", "model": "test:ops-anywhere"},
    }, bindings={"web": {"platform": "web", "agent": "lead"}}, gateway={"plugins": ["tests.support.plugin_delegation"]})


async def test_a_handoff_the_admin_revoked_while_it_was_parked_does_not_resume(tmp_path: Path) -> None:
    """The card was shown while lead could send to ops; the admin removed ops from lead's handoffs and
    reloaded before anyone decided. Approving the card must not run ops' call: the resume is held to
    the same rule as a new send (it checked only that ops still existed)."""
    RAN.clear()
    replies = await _approved_after_a_reload(lambda names: _lead_reaching(tmp_path / "c", {
        "handoffs": names, "capabilities": [{"id": "handoffs"}]}), "send ops deploy queue")
    assert RAN == [], "a handoff the admin revoked ran on an old card"
    [said] = [r for r in replies if "said" in r]
    assert "may not send work to 'ops'" in said, said


async def test_a_delegate_the_admin_removed_while_it_was_parked_does_not_resume(tmp_path: Path) -> None:
    """The same for a sync delegate: ops taken out of lead's subagents before the card is decided."""
    RAN.clear()
    replies = await _approved_after_a_reload(lambda names: _lead_reaching(tmp_path / "c", {
        "subagents": names, "capabilities": [{"id": "subagents", "config": {"max_depth": 1}}]}), "delegate ops deploy api")
    assert RAN == [], "a delegate the admin removed ran on an old card"
    [said] = [r for r in replies if "task said" in r]
    assert "nothing it asked for ran" in said, said


async def _runs(gw: Any, chat: Chat) -> list[dict[str, Any]]:
    conv = await gw.store.conversation(chat.conv)
    assert conv is not None
    items = await gw.store.capability_state.items("subagents", conv.id)
    return sorted((json.loads(v) for v in items.values()), key=lambda r: r["started_at"])
