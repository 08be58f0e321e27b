"""`/stop` on Slack end to end: in Ada's thread, Bob's `!stop` changes nothing (he alone is told why);
Ada's ends the run within a second, leaving a stopped line, never the finished reply; a stop while
the run waits on an approval card closes the card, and nothing on it runs; a stop of a run claimed but
not started yet (it waits for a slot, or fetches its files) starts it stopped, and its model is never asked."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.daemon import Gateway
from gateway.messages import Sender
from gateway.runs.llm import register_model
from gateway.store import repo
from gateway.store.models import Run
from tests.conftest import database_url, running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.support.files_model import CSV, Recorder
from tests.support.gated_git import CAPABILITY, RAN
from tests.test_stop import SLOW, slow_model

from .conftest import eventually
from .test_e2e_approvals import buttons, card_of, gated  # noqa: F401 - `gated` is a fixture used here


def _config(tmp_path: Path, fake: FakeSlack, model: str = SLOW, database: str | None = None) -> Path:
    """Slack, and an agent on `model` (`slow_model` unless a test registered its own); `database` a URL."""
    if model == SLOW:
        register_model(SLOW, slow_model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    return write_config(tmp_path / "config", agents={"assistant": {"name": "Slow", "model": model}},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
                        gateway={"database": {"url": database}} if database else None)


async def _essay(gw: Gateway, fake: FakeSlack) -> tuple[PostedMessage, PostedMessage, Run]:
    """Ada asks for a long essay: her thread's root, the reply as it streams, and its run."""
    await eventually(lambda: gw.adapters["acme"].health().connected)
    root, _ = await fake.say("C0GEN", "U0ADA", "<@U0BOT> write a long essay")
    reply = await fake.wait_for(lambda: next((m for m in fake.bot_messages("C0GEN") if m.text.startswith("word0")), None))
    [run] = await gw.store.runs_in([repo.RUNNING])
    return root, reply, run


def _asking_model(name: str, *, essays_only: bool) -> list[str]:
    """Register model `name`, which writes slowly (a word every 0.1 s) and records the user prompt of each request;
    `essays_only`: only a prompt asking for an essay, others get a short answer at once. Returns the record."""
    asked: list[str] = []

    def model() -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            last = messages[-1]
            asked.append(" ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
                         if isinstance(last, ModelRequest) else "")
            if essays_only and "essay" not in asked[-1]:
                yield "a short answer"
                return
            for i in range(100):
                yield f"word{i} "
                await asyncio.sleep(0.1)

        return FunctionModel(stream_function=stream)

    register_model(name, model)
    return asked


async def test_only_the_requester_stops_a_run_in_a_thread(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        root, reply, run = await _essay(gw, fake_slack)

        _, envelopes = await fake_slack.say("C0GEN", "U0BOB", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        refusal = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.user == "U0BOB"])
        assert refusal[0].text == "Only Ada or someone who may decide approvals here can stop this."
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]

        pressed = time.monotonic()
        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: reply.text.endswith("_"), timeout=5)
        assert time.monotonic() - pressed < 5.0  # the reply runs 10 s: cut well short (a generous bound on a busy machine)

        async def ended() -> bool:
            row = await gw.store.run(run.id)
            return row is not None and row.status == repo.STOPPED and row.reason == "stopped by Ada"

        await wait_for(ended, what="the run to end stopped")
        assert reply.text.startswith("word0 ") and "Stopped by Ada; before that I wrote what is above." in reply.text
        assert not [e for e in fake_slack.ephemerals if e.user == "U0ADA"]  # a stop that worked needs no answer


async def test_stop_while_waiting_for_approval_closes_the_card(gated: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(gated) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete old-feature")
        card = await fake_slack.wait_for(lambda: card_of(fake_slack))
        [run] = await gw.store.runs_in([repo.PARKED])

        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: buttons(card) == [])
        shown = json.dumps(card.blocks)
        assert "Closed: the run was stopped." in shown and "Denied by Ada" in shown
        notice = await fake_slack.wait_for(
            lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts and "Stopped by" in m.text])
        assert notice[0].text == "_⏹ Stopped by Ada while waiting for approval; nothing on the card ran._"
        ended = await gw.store.run(run.id)
        assert ended is not None and ended.status == repo.STOPPED and ended.reason == "stopped by Ada"
        assert RAN == []  # nothing the card asked for ran


HANDED = "slack-e2e-stop-handed"


async def _started_stopped(gw: Gateway, fake: FakeSlack, run_id: str, thread_ts: str) -> None:
    """Ada's stop of a run not started yet: it ended stopped by her, its thread got the stopped line alone,
    and she was told nothing (a stop that worked needs no answer)."""
    async def ended() -> bool:
        row = await gw.store.run(run_id)
        return row is not None and row.status in repo.ENDED

    await wait_for(ended, what="the run to end")
    row = await gw.store.run(run_id)
    assert row is not None and (row.status, row.reason) == (repo.STOPPED, "stopped by Ada")
    notice = await fake.wait_for(lambda: [m.text for m in fake.bot_messages("C0GEN") if m.thread_ts == thread_ts])
    assert notice == ["_⏹ Stopped by Ada; I had not done anything yet._"]
    assert not [e.text for e in fake.ephemerals if e.user == "U0ADA"]


@pytest.mark.parametrize("door", ["typed", "control"])
async def test_a_stop_of_a_run_claimed_while_it_waits_for_a_slot_starts_it_stopped(
        tmp_path: Path, fake_slack: FakeSlack, door: str) -> None:
    """One run at a time. Ada's first question parks on an approval card whose post Slack is slow to answer;
    her second, in another thread, waited for the slot, and the first run's end claimed it (it is `running`).
    Her Stop then (typed in its thread, or the Stop control's click as the adapter hands it to the core)
    stops it: it starts stopped, says so, and its model is never asked."""
    go, asked = asyncio.Event(), []

    def model() -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
            last = messages[-1]
            asked.append(" ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
                         if isinstance(last, ModelRequest) else "")
            if "delete" in asked[-1]:
                await go.wait()  # the second question arrives meanwhile, and waits for the slot
                yield {0: DeltaToolCall(name="delete_branch", json_args=json.dumps({"branch": "old"}), tool_call_id="c1")}
                return
            yield "Here is what is new."

        return FunctionModel(stream_function=stream)

    register_model(HANDED, model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "config", gateway={"limits": {"concurrent_runs": 1}},
                       agents={"assistant": {"name": "Gated", "model": HANDED, "capabilities": [{"id": CAPABILITY}]}},
                       bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    RAN.clear()
    async with running_gateway(cfg) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> delete the old branch")
        await fake_slack.wait_for(lambda: asked)
        second, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> what is new?")
        [waiting] = await wait_for(lambda: gw.store.runs_in([repo.QUEUED]), what="the second run, queued")

        fake_slack.post_answer_delay = 3600.0  # the card is posted; Slack's answer to it is slow
        go.set()
        try:
            await fake_slack.wait_for(lambda: card_of(fake_slack))

            async def handed() -> bool:  # the first run's end claimed it; its worker waits for the card's answer
                row = await gw.store.run(waiting.id)
                return row is not None and row.status == repo.RUNNING

            await wait_for(handed, what="the first run's end to claim the second")
            if door == "typed":
                _, envelopes = await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=second.ts)
                await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))  # acked once handled
            else:
                outcome = await gw.stop_run(waiting.id, Sender("U0ADA", "Ada"), binding_id="acme")
                assert (outcome.stopped, outcome.message) == (True, "Stopping.")
        finally:
            fake_slack.post_answer_delay = 0.0

        await _started_stopped(gw, fake_slack, waiting.id, second.ts)
        assert len(asked) == 1 and "delete" in asked[0]  # the second question never reached the model


async def test_a_stop_while_the_run_fetches_its_files_starts_it_stopped(tmp_path: Path, fake_slack: FakeSlack) -> None:
    """The run is claimed and fetches the file shared with its message (a large file, a slow link) before it
    asks the model: Ada's `!stop` then stops it, and the model is never asked."""
    recorder = Recorder()
    register_model("slack-e2e-stop-files", recorder.model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "slack-e2e-stop-files"}},
                       bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    fake_slack.file_hold = asyncio.Event()
    async with running_gateway(cfg) as gw:
        try:
            await eventually(lambda: gw.adapters["acme"].health().connected)
            root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> sum this up",
                                           files=[fake_slack.add_file("q3.csv", "text/csv", CSV)])
            await fake_slack.wait_for(lambda: fake_slack.file_fetches)
            [run] = await gw.store.runs_in([repo.RUNNING])
            _, envelopes = await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)
            await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))  # acked once handled
        finally:
            fake_slack.file_hold.set()

        await _started_stopped(gw, fake_slack, run.id, root.ts)
        assert recorder.requests == []


async def test_a_stop_ends_the_messages_waiting_behind_the_run_too_and_only_for_who_may(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    """Ada's reply is being written and her next question waits behind it in the thread. Bob's `!stop` changes
    nothing (he alone is told why). Ada's stops both: the reply ends with its stopped line, the waiting question
    gets its own, and the model is never asked it."""
    asked = _asking_model("slack-e2e-stop-queued", essays_only=False)
    async with running_gateway(_config(tmp_path, fake_slack, "slack-e2e-stop-queued")) as gw:
        root, reply, running = await _essay(gw, fake_slack)
        _, envelopes = await fake_slack.say("C0GEN", "U0ADA", "and a short one after", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        [waiting] = await gw.store.runs_in([repo.QUEUED])

        _, envelopes = await fake_slack.say("C0GEN", "U0BOB", "!stop", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        refusal = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.user == "U0BOB"])
        assert [e.text for e in refusal] == ["Only Ada or someone who may decide approvals here can stop this."]
        assert [(await gw.store.run(r.id)).status for r in (running, waiting)] == [repo.RUNNING, repo.QUEUED]  # type: ignore[union-attr]

        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)

        async def ended() -> bool:
            rows = [await gw.store.run(r.id) for r in (running, waiting)]
            return all(row is not None and row.status in repo.ENDED for row in rows)

        await wait_for(ended, what="both runs to end")
        for r in (running, waiting):
            row = await gw.store.run(r.id)
            assert row is not None and (row.status, row.reason) == (repo.STOPPED, "stopped by Ada")
        await fake_slack.wait_for(lambda: reply.text.endswith("_"))
        assert reply.text.endswith("_⏹ Stopped by Ada; before that I wrote what is above._")
        notices = await fake_slack.wait_for(lambda: [m.text for m in fake_slack.bot_messages("C0GEN")
                                                     if m.thread_ts == root.ts and m is not reply])
        assert notices == ["_⏹ Stopped by Ada; I had not done anything yet._"]
        assert not [e for e in fake_slack.ephemerals if e.user == "U0ADA"]  # a stop that worked needs no answer
        assert asked == ["Ada: write a long essay"]  # the waiting question never reached the model


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_stop_of_a_waiting_run_leaves_the_messages_of_others_who_joined_it(
        tmp_path: Path, fake_slack: FakeSlack, engine: str) -> None:
    """Ada's essay is being written; her next question waits behind it, and Bob's question in the thread joins
    the same waiting run. Ada's `!stop` may stop what she asked, not Bob's (the rule is the requester or a
    decider, and Bob is the one who asked his): hers gets the stopped line and never reaches the model, his is
    still answered."""
    asked = _asking_model("slack-e2e-stop-joined", essays_only=True)
    async with (database_url(engine, tmp_path) as url,
                running_gateway(_config(tmp_path, fake_slack, "slack-e2e-stop-joined", url)) as gw):
        root, reply, running = await _essay(gw, fake_slack)
        for user, text in (("U0ADA", "and a short one after"), ("U0BOB", "what about mine?")):
            _, envelopes = await fake_slack.say("C0GEN", user, text, thread_ts=root.ts)
            await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
        [waiting] = await gw.store.runs_in([repo.QUEUED])  # Bob's question joined Ada's waiting run

        await fake_slack.say("C0GEN", "U0ADA", "!stop", thread_ts=root.ts)

        async def answered() -> bool:
            return [r.status for r in await gw.store.runs_in([repo.FINISHED])] == [repo.FINISHED]

        await wait_for(answered, what="Bob's question to be answered")
        # Ada's stopped question is history now (asked, not answered); Bob's is what the run answers.
        assert asked == ["Ada: write a long essay",
                         "Ada: write a long essay Ada: and a short one after Bob: what about mine?"]
        stopped = [r for r in await gw.store.runs_in([repo.STOPPED]) if r.id != running.id]
        assert [(r.reason, r.requester_name) for r in stopped] == [("stopped by Ada", "Ada")]
        [done] = await gw.store.runs_in([repo.FINISHED])
        assert done.requester_name == "Bob"  # his now: Ada may not stop it, he may
        notices = await fake_slack.wait_for(lambda: [m.text for m in fake_slack.bot_messages("C0GEN")
                                                     if m.thread_ts == root.ts and m is not reply])
        assert notices[0] == "_⏹ Stopped by Ada; I had not done anything yet._"
        assert waiting.id in (done.id, stopped[0].id)
