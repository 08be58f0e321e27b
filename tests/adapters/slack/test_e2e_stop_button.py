"""The Stop button on Slack, end to end on the real daemon against the fake Slack.

A posted-and-edited reply carries the button in its own blocks (kept on every edit, since an update
with text alone drops blocks) until the reply is final; a natively streamed reply, which takes no
blocks, gets the button in a small message beside it, deleted when the reply is final. Only the
requester (or a decider) may press it; anyone else is told so privately and nothing happens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.run import AgentRunResult

from capabilities.registry import REGISTRY, CapabilityDecl, register

from gateway.runs.llm import register_model
from gateway.store import repo
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.test_stop import BRIEF_WORDS, QUICK, SLOW, brief_model, one_run_finished, quick_model, slow_model

from .conftest import eventually

BRIEF = "stop-button-brief"
HELD_END = "test_held_end"
STOP = "Stop"


def _config(tmp_path: Path, fake: FakeSlack, model: str, capabilities: tuple[str, ...] = ()) -> Path:
    register_model(SLOW, slow_model)
    register_model(BRIEF, brief_model)  # posted, edited at least once, and finished
    register_model(QUICK, quick_model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    agent = {"name": "Slow", "model": model, "capabilities": [{"id": c} for c in capabilities]}
    return write_config(tmp_path / "config", agents={"assistant": agent},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


def stop_in(blocks: list[dict[str, Any]] | None) -> str | None:
    """The value of the Stop button among `blocks`, if there is one."""
    return next((e["value"] for b in blocks or [] if b.get("type") == "actions" for e in b["elements"]
                 if e.get("text", {}).get("text") == STOP), None)


def stop_value(msg: PostedMessage) -> str | None:
    return stop_in(msg.blocks)


def shown(msg: PostedMessage) -> str:
    """What Slack shows: the section blocks' text when the message has blocks, else its text."""
    sections = [b["text"]["text"] for b in msg.blocks or [] if b.get("type") == "section"]
    return "".join(sections) if msg.blocks else msg.text


async def _stopped(gw: Any, run_id: str, who: str) -> bool:
    row = await gw.store.run(run_id)
    return row is not None and row.status == repo.STOPPED and row.reason == f"stopped by {who}"


async def test_the_button_rides_every_edit_only_the_requester_stops_and_it_is_gone_at_the_end(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack, SLOW)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> write a long essay")
        reply = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.text.startswith("word0")), None))
        [run] = await gw.store.runs_in([repo.RUNNING])
        value = await fake_slack.wait_for(lambda: stop_value(reply))
        assert value == f"stop:{run.id}"
        first = shown(reply)
        # Edits keep coming while the model writes; each one still carries the button.
        await fake_slack.wait_for(lambda: len(shown(reply)) > len(first) + 10 and stop_value(reply))
        assert shown(reply).startswith("word0 word1 ")
        assert len(reply.block_edits) >= 2 and all(stop_in(b) == value for b in reply.block_edits)

        await fake_slack.click("U0BOB", reply, value)
        refusal = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.user == "U0BOB"])
        assert refusal[0].text == "Only Ada or someone who may decide approvals here can stop this."
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]
        assert stop_value(reply) == value, "a refused press leaves the button where it was"

        await fake_slack.click("U0ADA", reply, value)
        await wait_for(lambda: _stopped(gw, run.id, "Ada"), what="the run to end stopped")
        await fake_slack.wait_for(lambda: reply.blocks is None and "Stopped by Ada" in reply.text)
        # Every edit while it ran carried the button; only the last one, once final, took it away.
        assert reply.block_edits[-1] is None and all(stop_in(b) == value for b in reply.block_edits[:-1])
        assert "⏹ Stopped by Ada; before that I wrote what is above." in reply.text
        assert "word99" not in reply.text, "stopped well before the model's end"
        assert not [e for e in fake_slack.ephemerals if e.user == "U0ADA"]


async def test_a_reply_that_finishes_loses_its_button(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack, BRIEF)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> say a few words")
        reply = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.text.startswith("word0")), None))
        await fake_slack.wait_for(lambda: stop_value(reply))
        [run] = await gw.store.runs_in([repo.RUNNING])

        await one_run_finished(gw)
        await fake_slack.wait_for(lambda: reply.blocks is None)
        assert reply.text.strip().endswith(f"word{BRIEF_WORDS - 1}")
        assert reply.block_edits[-1] is None and all(stop_in(b) == f"stop:{run.id}" for b in reply.block_edits[:-1])


async def test_a_quick_answer_is_posted_once_never_edited_and_gets_no_button(tmp_path: Path,
                                                                           fake_slack: FakeSlack) -> None:
    from gateway.clock import ManualClock

    # The first-draft hold is read from the gateway's clock, which does not move here: however slow
    # the machine, the answer is in before the hold ends, as a quick answer is (on the real clock a
    # 2.4 s loop stall between the two pieces posted "Quick " as a draft).
    clock = fake_slack.clock = ManualClock()
    async with running_gateway(_config(tmp_path, fake_slack, QUICK), clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> quick one")

        await one_run_finished(gw)
        (reply,) = fake_slack.bot_messages("C0GEN")
        assert reply.text == "Quick answer." and reply.blocks is None
        assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["Quick answer."]
        assert fake_slack.calls_to("chat.update") == [], "a draft was shown and edited, or a Stop button put on"


class _HeldEnd(AbstractCapability[Any]):
    """The run's end (pydantic-ai's `after_run`, after the model's answer) waits for the test."""

    release = asyncio.Event()

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        await self.release.wait()
        return result


def _held_end_config(tmp_path: Path, fake: FakeSlack, model: str) -> Path:
    if HELD_END not in REGISTRY:
        register(CapabilityDecl(id=HELD_END, name="Held end", category="test", tools=(),
                                build=lambda ctx: _HeldEnd()))
    return _config(tmp_path, fake, model, (HELD_END,))


async def test_the_answer_is_posted_when_written_not_after_the_runs_end_and_only_once(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    """What pydantic-ai does after the model's last word (the output's checks, hooks, the result) is
    no reason to keep the answer from the person: it is posted once written, once, never edited."""
    from gateway.clock import ManualClock

    _HeldEnd.release = asyncio.Event()
    clock = fake_slack.clock = ManualClock()  # the first draft's hold never ends by itself
    async with running_gateway(_held_end_config(tmp_path, fake_slack, QUICK), clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> quick one")
        # Posted while the run's end is held.
        await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.text == "Quick answer."])
        [run] = await gw.store.runs_in([repo.RUNNING])
        _HeldEnd.release.set()
        await one_run_finished(gw)
        (reply,) = fake_slack.bot_messages("C0GEN")
        assert reply.text == "Quick answer." and reply.blocks is None
        assert [c.args["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["Quick answer."]
        assert fake_slack.calls_to("chat.update") == [], "the final edited what was already shown, or a button came"
        [row] = await gw.store.deliveries(run.id)
        assert row.final and row.platform_message_id == reply.ts and row.text == "Quick answer."


async def test_a_natively_streamed_reply_gets_the_button_beside_it(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack, SLOW)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = fake_slack.user_posts("D0ADA", "U0ADA", "New assistant thread")
        await fake_slack.say("D0ADA", "U0ADA", "write a long essay", thread_ts=root.ts)
        reply = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("D0ADA") if m.streaming), None))
        control = await fake_slack.wait_for(
            lambda: next((m for m in fake_slack.bot_messages("D0ADA") if stop_value(m)), None))
        [run] = await gw.store.runs_in([repo.RUNNING])
        assert control.thread_ts == root.ts and control is not reply
        assert stop_value(control) == f"stop:{run.id}"

        await fake_slack.click("U0ADA", control, f"stop:{run.id}")
        await wait_for(lambda: _stopped(gw, run.id, "Ada"), what="the run to end stopped")
        await fake_slack.wait_for(lambda: control in fake_slack.deleted)
        await fake_slack.wait_for(lambda: "Stopped by Ada" in reply.text and not reply.streaming)
        assert [m for m in fake_slack.bot_messages("D0ADA") if stop_value(m)] == []


async def test_the_final_edit_takes_the_button_away_in_the_same_call(tmp_path: Path, fake_slack: FakeSlack) -> None:
    """A reply whose final text is new since its last draft: that edit goes without the button, and no
    chat.update follows only to take it away (one call, not two).

    "New since its last draft" is made so, not left to timing. On a loaded machine the clock's autojump
    moved on while a draft was under way (it reads the store, it waits for the loop), past the model's
    pause or past the edit interval, and one draft showed two pieces meant for two (a fresh-clone
    failure). So each piece waits until the fake shows the one before it, and from the piece before
    the last until the final edit the clock stands still: no draft's time can come in between."""
    from gateway.clock import ManualClock
    from tests.support.patience import AUTOJUMP

    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's
    held: list[PostedMessage] = []  # the replies the clock stood still for, the latest last

    def replies() -> list[PostedMessage]:
        return fake_slack.bot_messages("C0GEN")

    def holding() -> bool:  # from " world" until the reply's final edit (its text alone, no button)
        return bool(held) and not (held[-1].text == "Hello world." and held[-1].blocks is None)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Hello"
        reply = await fake_slack.wait_for(  # posted, and the button put on
            lambda: next((m for m in replies() if m.edits[-1:] == ["Hello"] and stop_value(m)), None))
        await clock.sleep(2.0)  # past the edit interval: the next piece is a draft edit
        held.append(reply)
        yield " world"
        await fake_slack.wait_for(lambda: reply.edits[-1:] == ["Hello world"] and stop_value(reply))
        yield "."  # the clock still: only the final shows it

    register_model("stop-button-final", lambda: FunctionModel(stream_function=stream))
    async with running_gateway(_config(tmp_path, fake_slack, "stop-button-final"), clock=clock) as gw:
        paced_idle = clock.idle
        clock.idle = lambda: paced_idle() and not holding()
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hi")
        reply = await fake_slack.wait_for(lambda: next((m for m in replies() if m.text == "Hello world."), None))
        # A second message in the thread runs only once the first run is all done (its Stop control too).
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> again", thread_ts=root.ts)
        await fake_slack.wait_for(lambda: len([m for m in replies() if m.text == "Hello world."]) == 2)
        assert reply.blocks is None
        assert reply.edits[-2:] == ["Hello world", "Hello world."], "the final text was set once"
        assert (stop_in(reply.block_edits[-2]) or "").startswith("stop:") and reply.block_edits[-1] is None
        finals = [c for c in fake_slack.calls_to("chat.update")
                  if c.args.get("ts") == reply.ts and c.args.get("text") == "Hello world."]
        assert len(finals) == 1, "a chat.update followed the final edit only to take the button away"
