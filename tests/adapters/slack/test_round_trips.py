"""What one Slack message costs the store: its transactions, counted (each is a thread round trip
on SQLite). A mention starting a thread is stored with its new conversation and its run claimed in
one, its twin event costs none, and its reply's final row goes with the run's end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gateway.store import driver
from tests.conftest import running_gateway
from tests.fakes.slack import FakeSlack

from .conftest import eventually
from .test_e2e import FINAL, ScriptedModel, config, scripted  # noqa: F401 - the fixture


async def test_a_mention_starting_a_thread_costs_one_transaction_per_step(
        tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    transactions: list[str] = []
    real = driver.transaction

    async def counted(engine: Any, program: Any, **kw: Any) -> Any:
        # The transactions that write; a run's reads of what capabilities keep (`driver.read`, no
        # transaction of its own) are the run's, not the message's storing.
        if kw.get("write", True):
            transactions.append(getattr(program, "__qualname__", "").removeprefix("Store.").split(".")[0])
        return await real(engine, program, **kw)

    monkeypatch.setattr(driver, "transaction", counted)
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hello")
        reply = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.text == FINAL.format(n=1)), None))
        assert len(reply.edits) >= 1, "a draft was posted, then edited"  # so the draft's row is counted
        await eventually(lambda: "end_run" in transactions)
        # Ada's person (a first contact); the message with its new conversation and its run, claimed in
        # the same transaction (the conversation is idle); the draft's row; the run's end with the
        # reply's final row. No lookup of the conversation before it is stored, no claim of its own,
        # no transaction for the mention's twin event (dropped as the duplicate it is: one reply, below).
        assert Counter(transactions) == Counter(
            {"_identify": 1, "ingest": 1, "save_delivery": 1, "end_run": 1}), transactions
        assert len(fake_slack.bot_messages("C0GEN")) == 1
