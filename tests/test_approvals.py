"""Approvals end to end on a real gateway: park, card, decide, resume from stored state."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from gateway.clock import ManualClock
from gateway.daemon import Gateway
from gateway.outbound.adapter import Decision, Sender

from .conftest import run_finished, running_gateway, wait_for, write_config
from .support.settled import settled

from .support.plugin_ops import RAN  # registers the test_ops capability and the test:ops model


def _config(tmp: Path, capability: dict[str, Any] | None = None, approvals: dict[str, Any] | None = None) -> Path:
    binding: dict[str, Any] = {"platform": "web", "agent": "ops"}
    if approvals:
        binding["approvals"] = approvals
    return write_config(tmp, agents={"ops": {"name": "Ops", "model": "test:ops",
                                             "capabilities": [{"id": "test_ops", **(capability or {})}]}},
                        bindings={"web": binding}, gateway={"plugins": ["tests.support.plugin_ops"]})


class Chat:
    """The web API as a person's browser uses it."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.s = session
        self.conv = ""

    async def open(self) -> Chat:
        self.conv = (await (await self.s.post("/api/v1/conversations", json={})).json())["id"]
        return self

    async def say(self, text: str) -> dict[str, Any]:
        r = await self.s.post(f"/api/v1/conversations/{self.conv}/messages", json={"text": text})
        assert r.status == 202
        return await r.json()

    async def state(self) -> dict[str, Any]:
        return await (await self.s.get(f"/api/v1/conversations/{self.conv}/messages")).json()

    async def card(self) -> dict[str, Any]:
        async def pending() -> Any:
            cards = (await self.state())["cards"]
            return cards[-1] if cards and cards[-1]["pending"] else None
        return await wait_for(pending, what="an approval card")

    async def decide(self, approval_id: str, decision: str) -> tuple[int, dict[str, Any]]:
        r = await self.s.post(f"/api/v1/approvals/{approval_id}", json={"decision": decision})
        return r.status, await r.json()

    async def run_status(self, gw: Any, run_id: str) -> str:
        run = await gw.store.run(run_id)
        return run.status if run else ""

    async def replies(self) -> list[str]:
        return [m["text"] for m in (await self.state())["messages"] if m["role"] == "assistant" and m["status"] == "final"]


@contextlib.asynccontextmanager
async def approved_after_restart(cfg: Path, text: str) -> AsyncIterator[tuple[Gateway, Chat]]:
    """`text` parks on a card in one gateway; the card is approved in a new one on the same
    database, and its run has finished: (that gateway, the chat) for what the test checks."""
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say(text)
        card = await chat.card()
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat.s = s
        status, _ = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        yield gw, chat


async def test_gated_call_parks_then_runs_once_after_approval(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy api")
        card = await chat.card()
        assert RAN == [], "a gated tool ran before anyone decided"
        assert await chat.run_status(gw, sent["run_id"]) == "parked"
        [item] = card["items"]
        assert item["tool"] == "deploy" and item["capability"] == "test_ops"
        assert json.loads(item["arguments"]) == {"service": "api"}
        assert card["deciders"] == "Only local can decide."
        status, body = await chat.decide(item["approval_id"], "approve")
        assert status == 200 and body["accepted"]
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == [("deploy", "api")]
        replies = await chat.replies()
        assert replies == ["Let me do that.", "[deploy: deployed api]"]
        state = await chat.state()
        assert state["cards"][0]["items"][0]["state"] == "approved"
        assert state["cards"][0]["items"][0]["decided_by"] == "local"
        [decision] = state["decisions"]
        assert decision["state"] == "approved" and decision["decided_by"] == "local" and decision["surface"] == "api"
        # A second click changes nothing and says who decided.
        status, body = await chat.decide(item["approval_id"], "deny")
        assert status == 409 and body["message"] == "Already approved by local."
        assert RAN == [("deploy", "api")]


async def test_a_card_decided_before_its_run_is_parked_still_resumes_the_run(tmp_path: Path) -> None:
    """The web API lists a card as soon as it is stored, a moment before its run is recorded as
    parked. A decision in that moment found no parked run to requeue, and the run stayed parked
    with every call decided, for good (bench/chaos.py's approvals lane found it)."""
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        store_card = gw.approvals.db.create_card
        decided: list[int] = []

        async def stored_then_decided(**kwargs: Any) -> str:
            card_id = await store_card(**kwargs)
            card = (await chat.state())["cards"][-1]
            decided.append((await chat.decide(card["items"][0]["approval_id"], "approve"))[0])
            return card_id

        gw.approvals.db.create_card = stored_then_decided  # type: ignore[method-assign]
        sent = await chat.say("deploy api")
        await wait_for(lambda: run_finished(gw, sent["run_id"]), what="the run resumed", timeout=10.0)
        assert decided == [200]
        assert RAN == [("deploy", "api")]
        assert (await chat.replies())[-1] == "[deploy: deployed api]"


async def test_a_message_sent_while_parked_is_answered_after_the_decision(tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        parked = await chat.say("deploy api")
        card = await chat.card()
        waiting = await chat.say("and how are things?")  # queued behind the parked run
        await settled(gw)  # everything that goes on by itself is done: the parked run holds it
        assert await chat.run_status(gw, waiting["run_id"]) == "queued"
        status, _ = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: run_finished(gw, parked["run_id"]))
        # Answered right after the parked run, not whenever the periodic sweep comes round.
        await wait_for(lambda: run_finished(gw, waiting["run_id"]), timeout=5.0)


async def test_restart_between_card_and_click_loses_nothing(tmp_path: Path) -> None:
    RAN.clear()
    cfg = _config(tmp_path / "c")
    async with approved_after_restart(cfg, "deploy api") as (_, chat):
        assert RAN == [("deploy", "api")]
        assert (await chat.replies())[-1] == "[deploy: deployed api]"


async def test_denial_reaches_the_model_and_the_run_continues(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy api")
        card = await chat.card()
        status, _ = await chat.decide(card["items"][0]["approval_id"], "deny")
        assert status == 200
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == []
        assert "local denied this call" in (await chat.replies())[-1]


async def test_only_the_requester_may_decide(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        await chat.say("deploy api")
        card = await chat.card()
        outcome = await gw.decide(card["items"][0]["approval_id"], Decision.APPROVE, Sender("mallory", "Mallory"),
                                  binding_id="web", surface="web")
        assert not outcome.accepted and outcome.private
        assert outcome.message == "Only local can decide this."
        assert (await chat.card())["items"][0]["state"] == "pending"
        # A forged id from another binding finds nothing.
        outcome = await gw.decide("not-a-real-id", Decision.APPROVE, Sender("local"), binding_id="web", surface="web")
        assert not outcome.accepted and "no longer exists" in outcome.message
        assert RAN == []


async def test_channel_deciders_and_named_deciders(tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path / "c", approvals={"deciders": ["ops-lead"]})) as gw, \
            aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        await chat.say("deploy api")
        card = await chat.card()
        assert card["deciders"] == "Only ops-lead can decide."
        denied = await gw.decide(card["items"][0]["approval_id"], Decision.APPROVE, Sender("local"),
                                 binding_id="web", surface="web")
        assert not denied.accepted
        ok = await gw.decide(card["items"][0]["approval_id"], Decision.APPROVE, Sender("ops-lead", "Lead"),
                             binding_id="web", surface="web")
        assert ok.accepted


async def test_all_calls_of_one_response_on_one_card_decided_concurrently(tmp_path: Path) -> None:
    RAN.clear()
    cfg = _config(tmp_path / "c", capability={"approval": "required"})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy+status api")
        card = await chat.card()
        assert [i["tool"] for i in card["items"]] == ["deploy", "status"]
        results = await asyncio.gather(*(chat.decide(i["approval_id"], "approve") for i in card["items"]),
                                       *(chat.decide(i["approval_id"], "approve") for i in card["items"]))
        assert sorted(status for status, _ in results) == [200, 200, 409, 409]
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert sorted(RAN) == [("deploy", "api"), ("status", "api")]
        assert len([r for r in await chat.replies() if r.startswith("[")]) == 1


async def test_approve_all_waives_later_calls_and_is_visible(tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        first = await chat.say("deploy api")
        card = await chat.card()
        status, _ = await chat.decide(card["card_id"], "approve_all")
        assert status == 200
        await wait_for(lambda: run_finished(gw, first["run_id"]))
        second = await chat.say("deploy web")
        await wait_for(lambda: run_finished(gw, second["run_id"]))
        assert RAN == [("deploy", "api"), ("deploy", "web")]
        state = await chat.state()
        assert len(state["cards"]) == 1
        assert state["modes"] == {"approve_all": True, "ask_every_tool": False}
        notices = [m["text"] for m in state["messages"] if m["role"] == "notice"]
        assert any(n.startswith("local switched on “approve all in this conversation”") for n in notices)


async def test_ask_every_tool_gates_a_read_tool_and_renames_keep_the_gate(tmp_path: Path) -> None:
    RAN.clear()
    cfg = _config(tmp_path / "c", capability={"tool_overrides": {"deploy": {"name": "ship_it"}}})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        # The renamed side-effecting tool is still gated (the gate is keyed on the stable id).
        await chat.say("ship_it api")
        card = await chat.card()
        assert card["items"][0]["tool"] == "ship_it"
        first = card["run_id"]
        await chat.decide(card["items"][0]["approval_id"], "deny")
        await wait_for(lambda: run_finished(gw, first))
        # Switch on "ask for every tool" from the chat: a read-only tool now needs approval.
        r = await s.post(f"/api/v1/conversations/{chat.conv}/modes", json={"ask_every_tool": True})
        assert r.status == 200
        await chat.say("status api")

        async def second_card() -> Any:
            cards = (await chat.state())["cards"]
            return len(cards) == 2 and cards[-1]["pending"] and cards[-1]
        card2 = await wait_for(second_card)
        assert card2["items"][0]["tool"] == "status"
        assert RAN == []


async def test_chat_command_switches_modes(tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        r = await s.post(f"/api/v1/conversations/{chat.conv}/messages", json={"text": "/approvals auto on"})
        # Not a message for the agent: handled by the gateway itself, and not an error for the page.
        body = await r.json()
        assert r.status == 200 and body["command"] is True
        [answer] = body["answers"]
        assert answer["role"] == "notice" and "switched on" in answer["text"]
        state = await chat.state()
        assert state["modes"]["approve_all"] is True
        assert [m["role"] for m in state["messages"]] == ["command", "notice"]
        assert state["messages"][1]["id"] == answer["id"]


async def test_expiry_denies_pending_calls_and_ends_the_run(tmp_path: Path) -> None:
    RAN.clear()
    clock = ManualClock()
    cfg = _config(tmp_path / "c", approvals={"timeout": 3600})
    async with running_gateway(cfg, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy api")
        card = await chat.card()
        assert await gw.approvals.expire_due() == 0
        clock.advance(3601)
        assert await gw.approvals.expire_due() == 1
        assert await chat.run_status(gw, sent["run_id"]) == "expired"
        state = await chat.state()
        assert state["cards"][0]["items"][0]["state"] == "expired"
        assert state["cards"][0]["note"] == "Expired: nobody decided in time."
        assert [m["text"] for m in state["messages"] if m["role"] == "notice"] == [
            "The approval request expired without a decision, so I stopped."]
        status, body = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 409 and "expired" in body["message"]
        assert RAN == []
        # The conversation is free again.
        again = await chat.say("status api")
        await wait_for(lambda: run_finished(gw, again["run_id"]))


async def test_approvals_list_command(tmp_path: Path) -> None:
    from .test_cli import run_cli

    RAN.clear()
    cfg = _config(tmp_path / "c")
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy api")
        card = await chat.card()
        await chat.decide(card["items"][0]["approval_id"], "approve")
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
    out = await asyncio.to_thread(run_cli, "approvals", "list", "--config", str(cfg), "--json")
    assert out.returncode == 0, out.stderr
    [row] = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["state"] == "approved" and row["decided_by"] == "local" and row["tool"] == "deploy"
    assert row["run_id"] == sent["run_id"]
