"""End to end: the real daemon (store, admission, queue, runner, delivery) with a Slack binding
pointed at the fake Slack. A person posts in Slack; the test reads what Slack shows.

The model is a scripted FunctionModel that streams its answer in pieces and moves the
gateway's ManualClock between pieces, so the core's edit pacing lets each piece through as
an edit without the test sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.runs.llm import register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage, sign, signed_event_request

from .conftest import eventually

MODEL = "slack-e2e-scripted"


class ScriptedModel:
    """Answers "Hello <name>, turn N." in three streamed pieces; records what it was shown."""

    def __init__(self) -> None:
        self.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's: a 429's wait takes no time
        self.calls: list[list[ModelMessage]] = []
        self.hold: asyncio.Event | None = None  # when set up, the first piece waits for it

    def model(self) -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            self.calls.append(messages)
            turn = sum(1 for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart))
            if self.hold is not None:
                await self.hold.wait()
            for piece in ("**Hello**", " there,", f" turn {turn}."):
                yield piece
                # The next piece takes 2 s of the clock, past the 1 s edit interval: an edit. The
                # clock jumps to each timer due meanwhile (the first draft's hold) once all is quiet.
                await self.clock.sleep(2.0)

        return FunctionModel(stream_function=stream)

    def prompts(self, call: int) -> list[str]:
        return [str(p.content) for m in self.calls[call] if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]

    def answers(self, call: int) -> list[str]:
        return [p.content for m in self.calls[call] if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart)]


@pytest.fixture
def scripted(fake_slack: FakeSlack) -> ScriptedModel:
    script = ScriptedModel()
    fake_slack.clock = script.clock  # the fake counts its limits in the gateway's time
    register_model(MODEL, script.model)
    return script


def config(tmp_path: Path, fake: FakeSlack, *, mode: str = "socket") -> Path:
    slack = {
        "bot_token": "env:TEST_SLACK_BOT_TOKEN",
        "app_token": "env:TEST_SLACK_APP_TOKEN",
        "signing_secret": "env:TEST_SLACK_SIGNING_SECRET",
        "mode": mode,
        "api_url": fake.api_url,
    }
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Slack test agent", "model": MODEL, "instructions": "Be brief."}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
    )


FINAL = "*Hello* there, turn {n}."


def replies(fake: FakeSlack, channel: str) -> list[PostedMessage]:
    return fake.bot_messages(channel)


async def final_reply(fake: FakeSlack, channel: str, text: str, count: int = 1) -> list[PostedMessage]:
    return await fake.wait_for(lambda: len(r := replies(fake, channel)) == count and r[-1].text == text and r)


async def test_mention_gets_one_threaded_streamed_reply(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hi")
        (reply,) = await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
        assert reply.thread_ts == root.ts  # in the thread the mention started
        # One message, edited as it streamed; the first update puts the Stop button on it, the last takes it
        # away. The first piece is shown alone when the first draft's hold ends (the model took 2 s more).
        await fake_slack.wait_for(lambda: len(reply.edits) == 4)
        assert reply.edits == ["*Hello*", "*Hello* there,", "*Hello* there, turn 1.", "*Hello* there, turn 1."]
        assert reply.blocks is None and reply.block_edits[-1] is None
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))  # ack_after later
        assert len(scripted.calls) == 1  # the message/app_mention pair ran once
        assert scripted.prompts(0)[-1].endswith("hi") and "<@U0BOT>" not in scripted.prompts(0)[-1]
        status = fake_slack.calls_to("assistant.threads.setStatus")
        assert status and status[0].args["thread_ts"] == root.ts  # "is thinking…" while the model works
        async with aiohttp.ClientSession() as http, http.get(f"{gw.url}/readyz") as r:
            assert (await r.json())["bindings"]["acme"]["connected"] is True


async def test_a_mentions_run_asks_its_model_before_its_events_are_acked(tmp_path: Path, fake_slack: FakeSlack,
                                                                         scripted: ScriptedModel) -> None:
    """The ack waits once the message is stored (Slack allows 3 s); the run does not wait behind it: the
    model is asked while the mention's two envelopes are still unacked, and each is acked all the same."""
    scripted.hold = asyncio.Event()
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        gw.adapters["acme"].ack_after = 1.0  # far longer than a loaded test run's way to the model
        _, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hi")
        await fake_slack.wait_for(lambda: len(scripted.calls) == 1)
        assert not any(fake_slack.acked(e) for e in envelopes)
        scripted.hold.set()
        await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        acked = [a["envelope_id"] for a in fake_slack.acks if a.get("envelope_id") in envelopes]
        assert sorted(acked) == sorted(envelopes)  # each once
        assert len(scripted.calls) == 1  # the pair ran once


async def test_thread_reply_without_mention_continues_with_history(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> what is 2+2?")
        await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
        await fake_slack.say("C0GEN", "U0ADA", "and times 3?", thread_ts=root.ts)
        first, second = await final_reply(fake_slack, "C0GEN", FINAL.format(n=2), count=2)
        assert second.thread_ts == root.ts and second.ts != first.ts
        assert any("what is 2+2?" in p for p in scripted.prompts(1)) and scripted.prompts(1)[-1].endswith("and times 3?")
        assert scripted.answers(1) == ["**Hello** there, turn 1."]  # the model saw its own first answer

        # A top-level message without a mention in the channel is not for the bot.
        _, envelopes = await fake_slack.say("C0GEN", "U0BOB", "lunch anyone?")
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        assert len(scripted.calls) == 2


async def test_dm_reply_is_top_level(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("D0ADA", "U0ADA", "hello in private")
        (reply,) = await final_reply(fake_slack, "D0ADA", FINAL.format(n=1))
        assert reply.thread_ts is None
        await fake_slack.say("D0ADA", "U0ADA", "still me")
        await final_reply(fake_slack, "D0ADA", FINAL.format(n=2), count=2)  # one conversation: history grew
        assert fake_slack.calls_to("assistant.threads.setStatus") == []  # no thread, no status


async def test_redelivery_after_a_restart_runs_nothing(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    directory = config(tmp_path, fake_slack)
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> once only")
        bodies = [fake_slack.event_callback(e) for e in events]
        for e, body in zip(events, bodies):
            await fake_slack.send_event(e, body=body)
        await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        again = [await fake_slack.send_event(e, body=b, retry_attempt=1) for e, b in zip(events, bodies)]
        await fake_slack.wait_for(lambda: all(fake_slack.acked(a) for a in again))
        # A fresh event proves the new daemon is live; the redelivered pair changed nothing.
        await fake_slack.say("D0ADA", "U0ADA", "new message")
        await final_reply(fake_slack, "D0ADA", FINAL.format(n=1))
    assert len(scripted.calls) == 2
    assert len(replies(fake_slack, "C0GEN")) == 1


def duplicates(gw: Any) -> bytes:
    return next(line for line in gw.metrics.render().splitlines()
                if line.startswith(b'gateway_inbound_duplicates_total{platform="slack"}'))


@pytest.mark.parametrize("mention_first", [False, True])
async def test_a_mention_in_either_order_is_answered_once_and_both_events_acked(
        tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel, mention_first: bool) -> None:
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        # One after the other (the twin finds its first stored, and is acked unread), then two at once.
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> one by one")
        first, twin = reversed(events) if mention_first else events
        sent = [await fake_slack.send_event(first)]
        await fake_slack.wait_for(lambda: fake_slack.acked(sent[0]))
        sent.append(await fake_slack.send_event(twin))
        (reply,) = await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
        _, at_once = await fake_slack.say("D0ADA", "U0ADA", "hi", mention_first=mention_first)  # a DM: one event
        second, pair = await fake_slack.say("C0GEN", "U0BOB", "<@U0BOT> both at once", mention_first=mention_first)
        await fake_slack.wait_for(lambda: len([m for m in replies(fake_slack, "C0GEN") if m.text == FINAL.format(n=1)]) == 2)
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in [*sent, *at_once, *pair]))
        await final_reply(fake_slack, "D0ADA", FINAL.format(n=1))
        assert reply.thread_ts == root.ts
        assert sorted(m.thread_ts for m in replies(fake_slack, "C0GEN")) == sorted([root.ts, second.ts])
        assert duplicates(gw).endswith(b" 2.0")  # one twin per mention
        assert len(scripted.calls) == 3


@pytest.mark.parametrize("mention_first", [False, True])
async def test_a_twin_first_delivered_after_a_restart_is_dropped_by_the_ledger(
        tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel, mention_first: bool) -> None:
    directory = config(tmp_path, fake_slack)
    _, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> before the restart")
    first, twin = reversed(events) if mention_first else events
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.send_event(first)
        await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
    async with running_gateway(directory, clock=scripted.clock) as gw:  # nothing of the first in memory
        await eventually(lambda: gw.adapters["acme"].health().connected)
        late = await fake_slack.send_event(twin)
        await fake_slack.wait_for(lambda: fake_slack.acked(late))
        assert duplicates(gw).endswith(b" 1.0")
        await fake_slack.say("D0ADA", "U0ADA", "new message")  # the new daemon answers what is new
        await final_reply(fake_slack, "D0ADA", FINAL.format(n=1))
    assert len(scripted.calls) == 2
    assert len(replies(fake_slack, "C0GEN")) == 1


async def test_429_on_chat_update_still_shows_the_final_text(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        fake_slack.fail_next("chat.update", retry_after=1, times=2)
        await fake_slack.say("D0ADA", "U0ADA", "go")
        (reply,) = await final_reply(fake_slack, "D0ADA", FINAL.format(n=1))
        updates = fake_slack.calls_to("chat.update")
        assert [c.status for c in updates[:2]] == [429, 429]
        assert updates[-1].status == 200 and updates[-1].args["text"] == FINAL.format(n=1)
        assert len(fake_slack.calls_to("chat.postMessage")) == 1  # never a second message


async def test_http_mode_end_to_end(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    async with running_gateway(config(tmp_path, fake_slack, mode="http"), clock=scripted.clock) as gw, aiohttp.ClientSession() as http:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        url = f"{gw.url}/slack/events/acme"
        _, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> over http")
        forged_body, forged_headers = signed_event_request(fake_slack.event_callback(events[0]), "wrong-secret")
        async with http.post(url, data=forged_body, headers=forged_headers) as r:
            assert r.status == 401
        stale_body, stale_headers = signed_event_request(fake_slack.event_callback(events[0]), timestamp=1_600_000_000)
        async with http.post(url, data=stale_body, headers=stale_headers) as r:
            assert r.status == 401
        assert scripted.calls == [] and replies(fake_slack, "C0GEN") == []

        body, headers = signed_event_request(fake_slack.event_callback(events[0]))
        async with http.post(url, data=body, headers=headers) as r:
            assert r.status == 200
        async with http.post(url, data=body, headers={**headers, "X-Slack-Retry-Num": "1", **sign(body)}) as r:
            assert r.status == 200
        (reply,) = await final_reply(fake_slack, "C0GEN", FINAL.format(n=1))
        assert reply.thread_ts == events[0]["ts"] and len(scripted.calls) == 1


async def test_thread_messages_during_a_run_become_the_next_turn(tmp_path: Path, fake_slack: FakeSlack, scripted: ScriptedModel) -> None:
    scripted.hold = asyncio.Event()
    async with running_gateway(config(tmp_path, fake_slack), clock=scripted.clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> first")
        await eventually(lambda: scripted.calls)  # the first run is in progress, held by the model
        for user, text in (("U0BOB", "second"), ("U0ADA", "third")):
            _, envelopes = await fake_slack.say("C0GEN", user, text, thread_ts=root.ts)
            await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        scripted.hold.set()
        await fake_slack.wait_for(lambda: len(scripted.calls) == 2 and replies(fake_slack, "C0GEN")[-1].text.endswith("."))
        next_turn = scripted.prompts(1)[-1]
        assert next_turn.index("Bob: second") < next_turn.index("Ada: third")  # in order, speakers named
        assert all(r.thread_ts == root.ts for r in replies(fake_slack, "C0GEN"))
