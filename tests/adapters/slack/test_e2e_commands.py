"""Chat commands on Slack end to end, through slack-bolt against the fake Slack and the real daemon.

Who may switch a conversation's approval modes (the binding's deciders, nobody else), a command
sent with a mention (Slack's `message` + `app_mention` pair) answered once, a redelivered
command run never, and a notice that meets a rate limit delayed, not lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.clock import ManualClock
from gateway.daemon import Gateway
from gateway.runs.llm import register_model
from gateway.approvals.policy import Modes
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.support.gated_git import CAPABILITY, RAN
from tests.support.patience import AUTOJUMP

from .conftest import eventually
from .test_e2e_approvals import MODEL, _model, buttons

APPROVE_ALL_TEXT = "switched on “approve all in this conversation”"


def _config(tmp_path: Path, fake: FakeSlack, **binding: object) -> Path:
    register_model(MODEL, _model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack, **binding}},
    )


@pytest.fixture(autouse=True)
def _clean() -> None:
    RAN.clear()


def cards(fake: FakeSlack) -> list[PostedMessage]:
    return [m for m in fake.bot_messages("C0GEN") if m.blocks]


def texts(fake: FakeSlack, thread: str) -> list[str]:
    return [m.text for m in fake.bot_messages("C0GEN") if m.thread_ts == thread and not m.blocks]


async def _conversation_id(gw: Gateway, root: PostedMessage, team: str = "T0TEAM") -> str:
    conv = await gw.store.conversation_by_key(f"slack:{team}:C0GEN:{root.ts}")
    assert conv is not None
    return conv.id


async def _settled(gw: Gateway, fake: FakeSlack, envelopes: list[str]) -> None:
    """Every envelope acknowledged and everything the gateway queued to say, said."""
    await fake.wait_for(lambda: all(fake.acked(e) for e in envelopes))
    await gw.outbound.drain(10.0)


async def test_only_a_decider_can_switch_approvals_off_in_a_thread(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        first = await fake_slack.wait_for(lambda: cards(fake_slack))
        deny = next(v for v in buttons(first[0]) if v.startswith("deny:"))
        await fake_slack.click("U0ADA", first[0], deny)
        await fake_slack.wait_for(lambda: any(t.startswith("Not done:") for t in texts(fake_slack, root.ts)))
        said_before = len(texts(fake_slack, root.ts))

        # Bob may not decide in Ada's thread: he alone is told so, and nothing changes.
        for command in ("!approvals auto on", "!approvals ask off"):
            _, envelopes = await fake_slack.say("C0GEN", "U0BOB", command, thread_ts=root.ts)
            await _settled(gw, fake_slack, envelopes)
        refusals = [e for e in fake_slack.ephemerals if e.user == "U0BOB"]
        assert [e.text for e in refusals] == ["Only Ada can change approvals here."] * 2
        assert all(e.thread_ts == root.ts for e in refusals)
        assert len(texts(fake_slack, root.ts)) == said_before, "no notice: nothing was switched"
        conversation_id = await _conversation_id(gw, root)
        assert await gw.approvals.modes(conversation_id) == Modes()
        assert await gw.approvals.db.mode_changes(conversation_id) == []

        # Ada's next gated call still waits for her.
        await fake_slack.say("C0GEN", "U0ADA", "try again", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: len(cards(fake_slack)) == 2)
        assert RAN == []


async def test_a_deciders_switch_works_and_is_audited(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> !approvals auto on")
        await _settled(gw, fake_slack, envelopes)
        notice = texts(fake_slack, root.ts)
        assert len(notice) == 1 and notice[0].startswith("_Ada ") and APPROVE_ALL_TEXT in notice[0]
        conversation_id = await _conversation_id(gw, root)
        [change] = await gw.approvals.db.mode_changes(conversation_id)
        assert (change.who, change.account_id, change.surface, change.approve_all) == ("Ada", "U0ADA", "command", True)

        # The switch holds: her gated call runs without a card.
        await fake_slack.say("C0GEN", "U0ADA", "delete old-feature", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: "Done: deleted old-feature" in texts(fake_slack, root.ts))
        assert cards(fake_slack) == [] and RAN == ["old-feature"]

        # The audit reaches the operator's command too.
        from gateway.approvals.audit import mode_changes

        [row] = await mode_changes(gw.store, conversation_id)
        assert row["changed_by"] == "Ada" and row["surface"] == "command" and row["approve_all"] is True


async def test_a_command_with_a_mention_is_answered_once(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        for mention_first in (False, True):
            root, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> !approvals",
                                                    mention_first=mention_first)
            assert len(envelopes) == 2, "Slack delivers a channel mention as `message` and `app_mention`"
            await _settled(gw, fake_slack, envelopes)
            answers = texts(fake_slack, root.ts)
            assert len(answers) == 1 and "the agent's normal policy applies" in answers[0]


async def test_a_redelivered_command_runs_nothing(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        msg, events = fake_slack.user_posts("D0ADA", "U0ADA", "!approvals auto on")
        [event] = events
        first = await fake_slack.send_event(event, event_id="Ev0REDELIVER")
        await _settled(gw, fake_slack, [first])
        again = await fake_slack.send_event(event, event_id="Ev0REDELIVER", retry_attempt=1)
        await _settled(gw, fake_slack, [again])
        notices = [m for m in fake_slack.bot_messages("D0ADA") if APPROVE_ALL_TEXT in m.text]
        assert len(notices) == 1
        conv = await gw.store.conversation_by_key(f"slack:{fake_slack.team_id}:D0ADA")
        assert conv is not None and len(await gw.approvals.db.mode_changes(conv.id)) == 1


async def test_a_notice_that_meets_a_rate_limit_is_delayed_not_lost(tmp_path: Path, fake_slack: FakeSlack) -> None:
    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)  # the Retry-After is waited on it
    async with running_gateway(_config(tmp_path, fake_slack), clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        fake_slack.fail_next("chat.postMessage", retry_after=1)
        root, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> !approvals")
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        answer = await fake_slack.wait_for(lambda: texts(fake_slack, root.ts), timeout=15)
        assert "the agent's normal policy applies" in answer[0]
        posts = fake_slack.calls_to("chat.postMessage")
        assert [c.status for c in posts][:1] == [429], "the first try met the rate limit"
        assert posts[1].at - posts[0].at >= 1.0, "and the next waited out its Retry-After"
        assert len(texts(fake_slack, root.ts)) == 1


async def test_deciders_named_in_the_binding_switch_and_nobody_else(tmp_path: Path, fake_slack: FakeSlack) -> None:
    config = _config(tmp_path, fake_slack, approvals={"deciders": ["U0BOB"]})
    async with running_gateway(config) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        # Ada started the thread, but the binding names Bob: a requester cannot get round the list.
        root, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> !approvals auto on")
        await _settled(gw, fake_slack, envelopes)
        assert [e.text for e in fake_slack.ephemerals if e.user == "U0ADA"] == ["Only U0BOB can change approvals here."]
        _, envelopes = await fake_slack.say("C0GEN", "U0BOB", "!approvals auto on", thread_ts=root.ts)
        await _settled(gw, fake_slack, envelopes)
        conversation_id = await _conversation_id(gw, root)
        assert await gw.approvals.modes(conversation_id) == Modes(approve_all=True)
        assert [c.account_id for c in await gw.approvals.db.mode_changes(conversation_id)] == ["U0BOB"]
        assert "\n".join(texts(fake_slack, root.ts)).count(APPROVE_ALL_TEXT) == 1
