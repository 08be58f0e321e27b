"""A decider sees every argument the tool will receive, and a decision applies to those arguments only
(docs/security.md, "Approval cards and decisions")."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import select, update

from gateway.store.models import ApprovalRow, Run

from .conftest import run_finished, running_gateway, wait_for
from .support.plugin_ops import RAN
from .test_approvals import Chat, _config

LONG = "staging" + " " * 1600 + "AND-ALSO-PROD"  # past the 1,500 characters cards used to keep


async def test_a_long_argument_is_stored_and_shown_whole(tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        await chat.say("deploy " + json.dumps({"service": LONG}))
        [item] = (await chat.card())["items"]
        assert json.loads(item["arguments"]) == {"service": LONG}, "the card cut the arguments"
        async with gw.store.sessions() as db:
            row = await db.get(ApprovalRow, item["approval_id"])
        assert row is not None and json.loads(row.arguments) == {"service": LONG}
        assert row.arguments_digest is not None and len(row.arguments_digest) == 64


async def test_a_decision_never_applies_to_changed_arguments(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The stored run is changed after the card was shown (`staging` → `prod`): the approval of
    `staging` does not run `prod`; the agent hears why, and the log says so."""
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say("deploy staging")
        [item] = (await chat.card())["items"]
        assert json.loads(item["arguments"]) == {"service": "staging"}
        async with gw.store.sessions() as db, db.begin():
            state = await db.scalar(select(Run.state).where(Run.id == sent["run_id"]))
            assert state is not None and '\\"staging\\"' in state
            await db.execute(update(Run).where(Run.id == sent["run_id"])
                             .values(state=state.replace('\\"staging\\"', '\\"prod\\"')))
        with caplog.at_level(logging.WARNING, logger="capabilities.approval_gate"):
            status, body = await chat.decide(item["approval_id"], "approve")
            assert status == 200 and body["accepted"]
            await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert RAN == [], "an approval of 'staging' ran the call on other arguments"
        assert "its arguments are not the ones the person approved" in (await chat.replies())[-1]
        assert any("differ from the ones approved" in r.getMessage() for r in caplog.records)
