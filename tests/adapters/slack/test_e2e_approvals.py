"""Approvals on Slack end to end: a gated tool parks the run, a Block Kit card appears in the
thread, clicks arrive as interactive envelopes, the card is updated, the run resumes.

The gated tool comes from a capability this module registers in the registry (a side-effecting
`delete_branch`), so the real gate, store and resume path are exercised.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.runs.llm import register_model
from tests.support.gated_git import CAPABILITY, RAN
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage

from .conftest import eventually

MODEL = "slack-e2e-approvals"


def _model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            yield {0: DeltaToolCall(name="delete_branch", json_args=json.dumps({"branch": "old-feature"}), tool_call_id="call-1")}
            return
        outcome = str(returns[-1].content)
        yield "Done: " if outcome.startswith("deleted") else "Not done: "
        yield outcome[:60]

    return FunctionModel(stream_function=stream)


@pytest.fixture
def gated(tmp_path: Path, fake_slack: FakeSlack) -> Path:
    RAN.clear()
    register_model(MODEL, _model)
    slack = {
        "bot_token": "env:TEST_SLACK_BOT_TOKEN",
        "app_token": "env:TEST_SLACK_APP_TOKEN",
        "mode": "socket",
        "api_url": fake_slack.api_url,
    }
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
    )


def card_of(fake: FakeSlack) -> PostedMessage | None:
    return next((m for m in fake.bot_messages("C0GEN") if m.blocks), None)


def buttons(msg: PostedMessage) -> list[str]:
    return [e["value"] for b in msg.blocks or [] if b["type"] == "actions" for e in b["elements"]]


async def test_requester_approves_someone_else_cannot(gated: Path, fake_slack: FakeSlack) -> None:
    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's
    async with running_gateway(gated, clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        assert card.thread_ts == root.ts
        shown = json.dumps(card.blocks)
        assert "delete_branch" in shown and "old-feature" in shown and "Only Ada can decide" in shown
        approve = next(v for v in buttons(card) if v.startswith("approve:"))
        assert RAN == []  # parked: nothing ran unattended

        # Bob may not decide: he alone is told so, and nothing changes.
        envelope = await fake_slack.click("U0BOB", card, approve)
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        note = await fake_slack.wait_for(lambda: fake_slack.ephemerals)
        assert note[0].user == "U0BOB" and "Only Ada can decide this" in note[0].text and note[0].thread_ts == root.ts
        assert card.edits == [] and RAN == []

        # Ada approves: the card loses its buttons and says who; the run resumes; the tool runs once.
        envelope = await fake_slack.click("U0ADA", card, approve)
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        answer = await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.text == "Done: deleted old-feature"])
        assert answer[0].thread_ts == root.ts
        assert buttons(card) == [] and "Approved by Ada" in json.dumps(card.blocks)
        assert RAN == ["old-feature"]

        # A second click on the old card changes nothing and says so, privately.
        envelope = await fake_slack.send_interactive(fake_slack.block_actions("U0ADA", _with_blocks(card, approve), approve))
        await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 2)
        assert fake_slack.ephemerals[1].user == "U0ADA" and "Already approved by Ada" in fake_slack.ephemerals[1].text
        assert RAN == ["old-feature"]


async def test_decision_after_a_restart_resumes_the_parked_run(gated: Path, fake_slack: FakeSlack) -> None:
    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's
    async with running_gateway(gated, clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
    deny = next(v for v in buttons(card) if v.startswith("deny:"))
    async with running_gateway(gated, clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        envelope = await fake_slack.click("U0ADA", card, deny)
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        answer = await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN") if "Ada denied this call" in m.text])
        assert answer[0].text.startswith("Not done:")
        assert buttons(card) == [] and "Denied by Ada" in json.dumps(card.blocks)
    assert RAN == []


def _with_blocks(card: PostedMessage, value: str) -> PostedMessage:
    """The card as the clicker's client still showed it: with the button they pressed."""
    stale = PostedMessage(card.channel, card.ts, card.text, card.user, card.thread_ts, card.bot_id)
    stale.blocks = [{"type": "actions", "block_id": "gw_buttons_0", "elements": [{"type": "button", "action_id": "gw_approve_0", "text": {"type": "plain_text", "text": "Approve"}, "value": value}]}]
    return stale
