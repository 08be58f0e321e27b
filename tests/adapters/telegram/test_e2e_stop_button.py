"""The ⏹ Stop button on Telegram, end to end on the real daemon against the fake Bot API.

The button sits under the streaming reply and is passed again on every edit (editMessageText without
reply_markup drops the keyboard), and is taken away when the reply is final. Only the requester (or a
decider) may press it: anyone else gets an alert from answerCallbackQuery and nothing happens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.clock import ManualClock
from gateway.runs.llm import register_model
from gateway.store import repo
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import ChatMessage, FakeTelegram
from tests.test_stop import BRIEF_WORDS, QUICK, brief_model, one_run_finished, quick_model

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

from .team import ADA, BOB, GROUP_ID, fake  # noqa: F401  (fake: the fixture)
BRIEF = "telegram-stop-brief"
# A reply that goes on until it is stopped (10 minutes of words): the slow model's ten seconds were the test's
# whole time for the button, an edit after it, Bob's press and Ada's; on a loaded machine (3 s of them here, 5-6 s
# to spare) a slower run let the reply finish first, and its final edit took the button away, as it should.
LONG, LONG_WORDS = "telegram-stop-long", 3000


def _config(tmp_path: Path, fake: FakeTelegram, model: str) -> Path:
    register_model(LONG, lambda: brief_model(LONG_WORDS))
    register_model(BRIEF, brief_model)
    register_model(QUICK, quick_model)
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    return write_config(tmp_path / "config", agents={"assistant": {"name": "Slow", "model": model}},
                        bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram}})


def stop_data(markup: dict[str, Any] | None) -> str | None:
    rows = (markup or {}).get("inline_keyboard") or []
    return next((b.get("callback_data") for row in rows for b in row if "Stop" in b.get("text", "")), None)


def _edits_of(fake: FakeTelegram, msg: ChatMessage) -> list[dict[str, Any]]:
    return [c.params for c in fake.calls_to("editMessageText") if int(c.params["message_id"]) == msg.message_id]


async def _ask(fake: FakeTelegram, gw: Any, text: str) -> tuple[ChatMessage, repo.Run]:
    await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")
    ask = f"@{fake.bot_username} {text}"
    fake.push_message(GROUP_ID, ADA, ask, entities=fake.mention(ask))
    reply = await fake.wait_for(lambda: next((m for m in fake.sent(GROUP_ID) if m.text.startswith("word0")), None),
                                what="the reply")
    [run] = await gw.store.runs_in([repo.RUNNING])
    return reply, run


async def test_the_button_rides_every_edit_only_the_requester_stops_and_it_is_gone_at_the_end(
        tmp_path: Path, fake: FakeTelegram) -> None:
    async with running_gateway(_config(tmp_path, fake, LONG)) as gw:
        reply, run = await _ask(fake, gw, "write a long essay")
        data = await fake.wait_for(lambda: stop_data(reply.reply_markup), what="the Stop button")
        assert data == f"stop:{run.id}"
        seen = len(reply.text)
        await fake.wait_for(lambda: len(reply.text) > seen, what="an edit after the button", timeout=15)
        assert stop_data(reply.reply_markup) == data, "the edit kept the button"

        query = fake.push_callback(BOB, reply, data)
        answer = await fake.wait_for(lambda: fake.answers.get(query), what="Bob's answer")
        assert answer["text"] == "Only Ada or someone who may decide approvals here can stop this."
        assert answer.get("show_alert") in (True, "true")
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]
        assert stop_data(reply.reply_markup) == data

        query = fake.push_callback(ADA, reply, data)
        await fake.wait_for(lambda: fake.answers.get(query), what="Ada's answer")

        async def stopped() -> bool:
            row = await gw.store.run(run.id)
            return row is not None and row.status == repo.STOPPED and row.reason == "stopped by Ada"

        await wait_for(stopped, what="the run to end stopped")
        await fake.wait_for(lambda: "Stopped by Ada" in reply.text and reply.reply_markup is None,
                            what="the stopped line, without the button")
        assert "⏹ Stopped by Ada; before that I wrote what is above." in reply.text
        assert f"word{LONG_WORDS - 1}" not in reply.text
        # Every edit from the button's arrival on passed it along (the final one too, before it was taken
        # away). An edit before it may lack it: the button waits for room in the chat's budget, and a
        # reply's text is worth more (a fresh-clone run under load put one edit first).
        calls = [c for c in fake.calls
                 if c.method in ("editMessageText", "editMessageReplyMarkup")
                 and int(c.params["message_id"]) == reply.message_id]
        first = next(i for i, c in enumerate(calls) if stop_data(c.params.get("reply_markup")) == data)
        edits = [c.params for c in calls[first:] if c.method == "editMessageText"]
        assert len(edits) >= 2 and all(stop_data(e.get("reply_markup")) == data for e in edits), [
            (c.method, stop_data(c.params.get("reply_markup")), len(c.params.get("text", ""))) for c in calls]


async def test_a_reply_that_finishes_loses_its_button(tmp_path: Path, fake: FakeTelegram) -> None:
    async with running_gateway(_config(tmp_path, fake, BRIEF)) as gw:
        reply, run = await _ask(fake, gw, "say a few words")
        await fake.wait_for(lambda: stop_data(reply.reply_markup), what="the Stop button")

        await one_run_finished(gw)
        await fake.wait_for(lambda: reply.reply_markup is None, what="the button taken away")
        assert reply.text.strip().endswith(f"word{BRIEF_WORDS - 1}")
        # The final edit took it away itself: no second call against the group's 20 a minute.
        assert _edits_of(fake, reply)[-1].get("reply_markup") is None
        removals = [c for c in fake.calls_to("editMessageReplyMarkup")
                    if int(c.params["message_id"]) == reply.message_id and c.params.get("reply_markup") is None]
        assert removals == []


async def test_a_quick_answer_is_one_message_never_edited_and_gets_no_button(tmp_path: Path, fake: FakeTelegram) -> None:
    """In a group every call counts against its 20 a minute: a quick answer costs one."""
    # The first-draft hold is read from the gateway's clock, which does not move here: however slow
    # the machine, the answer is in before the hold ends, as a quick answer is (on the real clock a
    # loop stall between the two pieces longer than the hold posts "Quick " as a draft, then edits it).
    clock = fake.clock = ManualClock()
    async with running_gateway(_config(tmp_path, fake, QUICK), clock=clock) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")
        ask = f"@{fake.bot_username} quick one"
        fake.push_message(GROUP_ID, ADA, ask, entities=fake.mention(ask))

        await one_run_finished(gw)
        (reply,) = fake.sent(GROUP_ID)
        assert reply.text == "Quick answer." and reply.reply_markup is None
        assert len(fake.calls_to("sendMessage")) == 1
        assert fake.calls_to("editMessageText") == [] and fake.calls_to("editMessageReplyMarkup") == []
