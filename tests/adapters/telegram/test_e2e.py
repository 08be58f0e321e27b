"""End to end: the real daemon (store, admission, pairing, queue, runner, delivery, approvals)
with a Telegram binding pointed at the fake Bot API. A person writes in Telegram; the test
reads what Telegram shows: the bot's messages, their edits, keyboards, topics, alerts.

The model streams its answer in pieces and moves the gateway's ManualClock between them, so
the core's edit pacing lets each piece through as an edit without the test sleeping.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.ops import cli
from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.daemon import Gateway
from gateway.runs.llm import register_model
from tests.support.gated_git import CAPABILITY, RAN
from tests.conftest import free_port, running_gateway, wait_for, write_config
from tests.fakes.telegram import ChatMessage, FakeTelegram

# python-telegram-bot's own RetryAfter reads its deprecated int property while building itself.
pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

ADA = FakeTelegram.user(42, "Ada", "ada")
BOB = FakeTelegram.user(43, "Bob", "bob")
GROUP_ID, FORUM_ID = -100200, -100300
MODEL, GATED_MODEL, LOOKUP_MODEL = "telegram-e2e-scripted", "telegram-e2e-gated", "telegram-e2e-lookup"
OFFERED: list[dict[str, str]] = []  # per model request: tool name -> the description the model read


class Scripted:
    """Answers "**Hello** there, turn N." in three streamed pieces; remembers its prompts."""

    def __init__(self) -> None:
        self.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's: a 429's wait takes no time
        self.prompts: list[str] = []

    def model(self) -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            turns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
                     if isinstance(p, UserPromptPart)]
            self.prompts.append(str(turns[-1].content))
            for piece in ("**Hello**", " there,", f" turn {len(turns)}."):
                yield piece
                # The next piece takes 2 s of the clock, past the 1 s edit interval: an edit. The
                # clock jumps to each timer due meanwhile (the first draft's hold) once all is quiet.
                await self.clock.sleep(2.0)

        return FunctionModel(stream_function=stream)


def _gated_model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            yield {0: DeltaToolCall(name="delete_branch", json_args=json.dumps({"branch": "old-feature"}),
                                    tool_call_id="call-1")}
            return
        yield f"Result: {str(returns[-1].content)[:60]}"

    return FunctionModel(stream_function=stream)


def _lookup_model() -> FunctionModel:
    """Calls both channel tools, then repeats what they returned."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        OFFERED.append({t.name: t.description or "" for t in info.function_tools})
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            yield {0: DeltaToolCall(name="get_channel_info", json_args="{}", tool_call_id="c1"),
                   1: DeltaToolCall(name="list_channel_members", json_args="{}", tool_call_id="c2")}
            return
        yield "\n".join(str(r.content) for r in returns)

    return FunctionModel(stream_function=stream)


@pytest.fixture
def scripted(fake: FakeTelegram) -> Scripted:
    script = Scripted()
    fake.clock = script.clock  # the fake counts its budgets in the gateway's time
    register_model(MODEL, script.model)
    register_model(GATED_MODEL, _gated_model)
    register_model(LOOKUP_MODEL, _lookup_model)
    RAN.clear()
    OFFERED.clear()
    return script


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        monkeypatch.setenv("TEST_TELEGRAM_WEBHOOK_SECRET", "e2e-secret")
        server.private_chat(ADA)
        server.private_chat(BOB)
        server.add_chat(GROUP_ID, "group", title="Team")
        server.add_chat(FORUM_ID, "supergroup", title="Forum", is_forum=True)
        yield server


def config(tmp_path: Path, fake: FakeTelegram, *, dm: str | None = "open", model: str = MODEL,
           mode: str = "polling", listen: str | None = None, drafts: bool | None = None, **binding_extra: Any) -> Path:
    telegram: dict[str, Any] = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": mode}
    if drafts is not None:
        telegram["drafts"] = drafts
    gateway: dict[str, Any] = {}
    if mode == "webhook":
        telegram["webhook_secret"] = "env:TEST_TELEGRAM_WEBHOOK_SECRET"
        gateway["http"] = {"listen": listen, "public_url": f"http://{listen}"}
    binding: dict[str, Any] = {"platform": "telegram", "agent": "assistant", "telegram": telegram, **binding_extra}
    if dm is not None:
        binding["admission"] = {"dm": dm}
    agent: dict[str, Any] = {"name": "Telegram test agent", "model": model, "instructions": "Be brief."}
    if model == GATED_MODEL:
        agent["capabilities"] = [{"id": CAPABILITY}]
    return write_config(tmp_path / "config", agents={"assistant": agent}, bindings={"tg": binding},
                        gateway=gateway)


async def connected(gw: Gateway) -> None:
    await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")


def final(n: int) -> str:
    return f"Hello there, turn {n}."


async def answers(fake: FakeTelegram, chat_id: int, count: int, last: str) -> list[ChatMessage]:
    """Wait until the bot has exactly `count` messages in the chat and the last reads `last`."""
    return await fake.wait_for(lambda: len(m := fake.sent(chat_id)) == count and m[-1].text == last and m,
                               what=f"{count} bot message(s) ending with {last!r} in {chat_id}")


async def test_private_message_gets_one_streamed_html_reply_edited_when_drafts_are_off(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake, drafts=False), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "hi there")
        (reply,) = await answers(fake, ADA["id"], 1, final(1))
        assert reply.raw == "<b>Hello</b> there, turn 1." and reply.parse_mode == "HTML"
        # One message, edited as it streamed (drafts are off), as often as the chat's budget allows; the
        # first piece is shown alone when the first draft's hold ends (the model took 2 s more).
        assert reply.edits[:1] == ["Hello"] and all(final(1).startswith(e) for e in reply.edits)
        assert fake.drafts == {} and fake.throttled == []
        assert scripted.prompts == ["hi there"]


async def test_private_message_streams_as_a_draft(tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "hi there")
        (reply,) = await answers(fake, ADA["id"], 1, final(1))
        assert reply.raw == "<b>Hello</b> there, turn 1." and reply.parse_mode == "HTML"
        # A private chat streams as a message draft (a preview), then the reply is one message, never edited.
        ((chat, _), shown), = fake.drafts.items()
        assert chat == ADA["id"] and shown[0] == "Hello" and all(final(1).startswith(s) for s in shown)
        assert reply.edits == [] and fake.throttled == []
        assert scripted.prompts == ["hi there"]
        typing = fake.calls_to("sendChatAction")
        assert typing and typing[0].params == {"chat_id": ADA["id"], "action": "typing"}


async def test_group_answers_mentions_and_replies_to_the_bot_only(tmp_path: Path, fake: FakeTelegram,
                                                                   scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(GROUP_ID, BOB, "lunch anyone?")
        text = "@gateway_bot what's new?"
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        (first,) = await answers(fake, GROUP_ID, 1, final(1))
        fake.push_message(GROUP_ID, BOB, "and since then?", reply_to=first)
        await answers(fake, GROUP_ID, 2, final(2))  # the group chat is one conversation
        assert scripted.prompts[0].endswith("what's new?") and "@gateway_bot" not in scripted.prompts[0]
        assert scripted.prompts[1].endswith("and since then?")
        fake.push_message(GROUP_ID, ADA, "thanks all")
        # A later mention proves the daemon read past "thanks all" without answering it.
        fake.push_message(GROUP_ID, ADA, "@gateway_bot bye", entities=fake.mention("@gateway_bot bye"))
        await answers(fake, GROUP_ID, 3, final(3))
        assert len(scripted.prompts) == 3 and not any("lunch" in p or p.endswith("thanks all")
                                                      for p in scripted.prompts)


async def test_forum_topics_are_separate_conversations_and_replies_stay_in_them(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        deploys, incidents = fake.add_topic(FORUM_ID, "Deploys", ADA), fake.add_topic(FORUM_ID, "Incidents", BOB)
        text = "@gateway_bot status?"
        fake.push_message(FORUM_ID, ADA, text, entities=fake.mention(text), thread_id=deploys)
        (in_deploys,) = await answers(fake, FORUM_ID, 1, final(1))
        fake.push_message(FORUM_ID, BOB, text, entities=fake.mention(text), thread_id=incidents)
        (_, in_incidents) = await answers(fake, FORUM_ID, 2, final(1))  # turn 1: a new conversation
        fake.push_message(FORUM_ID, ADA, "and now?", thread_id=deploys, reply_to=in_deploys)
        third = (await answers(fake, FORUM_ID, 3, final(2)))[-1]
        assert (in_deploys.thread_id, in_incidents.thread_id, third.thread_id) == (deploys, incidents, deploys)
        assert all(c.params.get("message_thread_id") in (deploys, incidents) for c in fake.calls_to("sendChatAction"))


async def test_pairing_from_first_contact_to_admitted(tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    directory = config(tmp_path, fake, dm=None)  # Telegram's default: dm: pairing
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "hello?")
        (notice,) = await fake.wait_for(lambda: fake.sent(ADA["id"]), what="the pairing code")
        code = notice.text.split("Your pairing code is ")[1][:8]
        assert f"agent-gateway pairing approve {code}" in notice.text and "<b>" in notice.raw
        fake.push_message(ADA["id"], ADA, "hello??")  # asking again within minutes: no second notice
        fake.push_message(BOB["id"], BOB, "me too")  # proves the daemon read past Ada's second message
        await fake.wait_for(lambda: fake.sent(BOB["id"]))
        assert len(fake.sent(ADA["id"])) == 1 and scripted.prompts == []

        # The admin approves from the command line (another process, same database).
        assert await asyncio.to_thread(cli.main, ["pairing", "approve", code, "--config", str(directory)]) == 0
        fake.push_message(ADA["id"], ADA, "hello again")
        await answers(fake, ADA["id"], 2, final(1))
        assert scripted.prompts == ["hello again"]
        assert len(fake.sent(BOB["id"])) == 1  # Bob is still waiting for an admin


async def test_callback_approvals_in_a_topic_including_a_click_by_someone_else(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake, model=GATED_MODEL), clock=scripted.clock) as gw:
        await connected(gw)
        topic = fake.add_topic(FORUM_ID, "Repo", ADA)
        text = "@gateway_bot delete old-feature"
        fake.push_message(FORUM_ID, ADA, text, entities=fake.mention(text), thread_id=topic)
        card = await fake.wait_for(lambda: next((m for m in fake.sent(FORUM_ID) if m.buttons), None), what="a card")
        assert card.thread_id == topic
        assert "delete_branch" in card.text and "old-feature" in card.text and "Only Ada can decide" in card.text
        approve = next(b["callback_data"] for b in card.buttons if b["callback_data"].startswith("a:"))
        assert len(approve.encode()) <= 64 and RAN == []

        by_bob = fake.push_callback(BOB, card, approve)
        await fake.wait_for(lambda: by_bob in fake.answers, what="Bob's click answered")
        assert fake.answers[by_bob]["show_alert"] is True
        assert "Only Ada can decide this" in fake.answers[by_bob]["text"]
        assert card.buttons and RAN == []

        by_ada = fake.push_callback(ADA, card, approve)
        await fake.wait_for(lambda: by_ada in fake.answers)
        assert fake.answers[by_ada].get("show_alert") is False
        result = await fake.wait_for(lambda: [m for m in fake.sent(FORUM_ID) if m.text == "Result: deleted old-feature"])
        assert result[0].thread_id == topic
        await fake.wait_for(lambda: not card.buttons, what="the card's buttons to go")
        assert "Approved by Ada" in card.text and RAN == ["old-feature"]

        again = fake.push_callback(ADA, card, approve)  # a stale client still shows the button
        await fake.wait_for(lambda: again in fake.answers)
        assert "already" in fake.answers[again]["text"].lower() and RAN == ["old-feature"]


async def test_callback_data_forged_from_another_chat_decides_nothing_under_deciders_channel(
        tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    """`callback_data` is the client's to write (the Bot API warns the message may hold no button with that
    data): Bob, who is not in the group, sends a card's approve data from his own chat with the bot. Under
    `deciders: channel` the one deciders rule asks Telegram whether he is in the card's chat
    (getChatMember): he is not, so nothing runs; Ada, who is, still decides."""
    fake.chats[GROUP_ID].members.add(ADA["id"])
    directory = config(tmp_path, fake, model=GATED_MODEL, dm="off", approvals={"deciders": "channel"})
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        text = "@gateway_bot delete old-feature"
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        card = await fake.wait_for(lambda: next((m for m in fake.sent(GROUP_ID) if m.buttons), None), what="a card")
        approve = next(b["callback_data"] for b in card.buttons if b["callback_data"].startswith("a:"))
        _, own = fake.push_message(BOB["id"], BOB, "hello")

        forged = fake.push_callback(BOB, own, approve)
        await fake.wait_for(lambda: forged in fake.answers, what="the forged click answered")
        assert fake.answers[forged]["show_alert"] is True and "does not confirm you are in it" in fake.answers[forged]["text"]
        assert card.buttons and "Approved" not in card.text and RAN == []

        by_ada = fake.push_callback(ADA, card, approve)
        await fake.wait_for(lambda: by_ada in fake.answers)
        await fake.wait_for(lambda: [m for m in fake.sent(GROUP_ID) if m.text == "Result: deleted old-feature"])
        assert "Approved by Ada" in card.text and RAN == ["old-feature"]


async def test_restart_keeps_the_offset(tmp_path: Path, fake: FakeTelegram, scripted: Scripted) -> None:
    directory = config(tmp_path, fake)
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        first, _ = fake.push_message(ADA["id"], ADA, "before the restart")
        await answers(fake, ADA["id"], 1, final(1))
    fake.push_message(ADA["id"], ADA, "while it was down")
    polls_before = len(fake.calls_to("getUpdates"))
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        await answers(fake, ADA["id"], 2, final(2))
    # The new daemon asked from the stored offset, not from whatever Telegram still held.
    assert fake.calls_to("getUpdates")[polls_before].params["offset"] == first + 1
    assert scripted.prompts == ["before the restart", "while it was down"]  # nothing replayed or dropped


async def test_429_with_retry_after_still_delivers_one_reply(tmp_path: Path, fake: FakeTelegram,
                                                             scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        fake.fail_next("editMessageText", retry_after=1, times=2)
        text = "@gateway_bot go"  # in a group: a private chat streams as a draft, without edits
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        (reply,) = await answers(fake, GROUP_ID, 1, final(1))
        refused = [c for c in fake.calls_to("editMessageText")][:2]
        later = fake.calls_to("editMessageText")[2:]
        assert len(refused) == 2 and later, "the final edit came after the refusals"
        assert later[-1].at - refused[-1].at >= 1.0  # retry_after honoured, not hammered
        assert reply.text == final(1)



async def test_webhook_mode_and_a_request_without_the_secret(tmp_path: Path, fake: FakeTelegram,
                                                             scripted: Scripted) -> None:
    listen = f"127.0.0.1:{free_port()}"
    async with running_gateway(config(tmp_path, fake, mode="webhook", listen=listen), clock=scripted.clock) as gw:
        await connected(gw)
        url = f"http://{listen}/telegram/webhook/tg"
        assert fake.webhook is not None and fake.webhook["url"] == url
        assert fake.webhook["secret_token"] == "e2e-secret"
        fake.push_message(ADA["id"], ADA, "via webhook")
        await answers(fake, ADA["id"], 1, final(1))

        forged = {"update_id": 99999, "message": {"message_id": 77, "date": 0, "from": ADA, "text": "forged",
                                                  "chat": {"id": ADA["id"], "type": "private"}}}
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "not-it"}):
                async with http.post(url, json=forged, headers=headers) as resp:
                    assert resp.status == 401
        fake.push_message(ADA["id"], ADA, "real one")
        await answers(fake, ADA["id"], 2, final(2))
        assert scripted.prompts == ["via webhook", "real one"]  # the forged update never ran

        # Telegram redelivers an update it thinks failed: the ledger (by update_id) runs it once.
        update = {**forged, "update_id": 5555, "message": {**forged["message"], "text": "twice?"}}
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                async with http.post(url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "e2e-secret"}) as resp:
                    assert resp.status == 200
        await answers(fake, ADA["id"], 3, final(3))
        fake.push_message(ADA["id"], ADA, "last")
        await answers(fake, ADA["id"], 4, final(4))
        assert scripted.prompts == ["via webhook", "real one", "twice?", "last"]


async def test_channel_tools_answer_info_and_administrators_only(tmp_path: Path, fake: FakeTelegram,
                                                                 scripted: Scripted) -> None:
    chat = fake.chats[GROUP_ID]
    chat.description, chat.member_count = "Release coordination", 12
    chat.admins = [fake.admin_member(ADA, owner=True), fake.admin_member(BOB)]
    tools = {"tools": ["get_channel_info", "list_channel_members", "search_channels", "read_channel_history"]}
    directory = config(tmp_path, fake, model=LOOKUP_MODEL, channel_tools=tools)
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        text = "@gateway_bot who runs this group?"
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        (reply,) = await fake.wait_for(lambda: [m for m in fake.sent(GROUP_ID) if "members: 12" in m.text])
        assert "name: Team" in reply.text and "purpose: Release coordination" in reply.text
        assert "Ada (owner) (@ada)" in reply.text and "Bob (administrator) (@bob)" in reply.text
    # What the Bot API cannot answer is not offered to the model at all.
    assert sorted(OFFERED[0]) == ["get_channel_info", "list_channel_members"]
    # The model is told what the member list really is before it calls the tool.
    members = OFFERED[0]["list_channel_members"]
    assert "lists only the chat's owner and administrators, not every member" in members
    assert "administrators" not in OFFERED[0]["get_channel_info"]


async def test_the_command_menu_is_registered_per_chat_type_and_help_answers(tmp_path: Path, fake: FakeTelegram,
                                                                            scripted: Scripted) -> None:
    from gateway.inbound.commands import COMMANDS

    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        await fake.wait_for(lambda: len(fake.commands) == 2, what="setMyCommands for private and group chats")
        private = [name for name, _ in fake.commands["all_private_chats"]]
        group = [name for name, _ in fake.commands["all_group_chats"]]
        assert private == [c.name for c in COMMANDS if not c.hidden]
        assert group == [c.name for c in COMMANDS if not c.hidden and c.where == "any"] and "link" not in group
        assert all("`" not in description for _, description in fake.commands["all_private_chats"])

        fake.push_message(ADA["id"], ADA, "/help")
        (answer,) = await fake.wait_for(lambda: fake.sent(ADA["id"]) or None, what="the /help answer")
        assert "/link [CODE]" in answer.text and "/whoami" in answer.text
        assert scripted.prompts == [], "a command is answered by the gateway, not the model"


async def test_an_update_during_a_database_lock_is_answered_once(tmp_path: Path, fake: FakeTelegram,
                                                                 scripted: Scripted) -> None:
    """Another process holds SQLite's write lock past the bound: the poller does not confirm
    the update (its offset stays), waits, and answers it once the lock is gone."""
    from tests.support.locking import another_process_holds_the_lock

    directory = config(tmp_path, fake)
    database = {"url": f"sqlite+aiosqlite:///{directory / 'gateway.db'}", "busy_timeout_seconds": 0.3}
    write_config(directory, agents={"assistant": {"name": "Telegram test agent", "model": MODEL, "instructions": "."}},
                 bindings={"tg": {"platform": "telegram", "agent": "assistant", "admission": {"dm": "open"},
                                  "telegram": {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url}}},
                 gateway={"database": database})
    async with running_gateway(directory, clock=scripted.clock) as gw:
        await connected(gw)
        held: list[list[Any]] = []  # what Ada was sent at the end of the lock, while it is still held
        async with another_process_holds_the_lock(directory / "gateway.db", seconds=1.5,
                                                  while_held=lambda: held.append(fake.sent(ADA["id"]))) as released:
            update_id, _ = fake.push_message(ADA["id"], ADA, "during the lock")
            await released.wait()
            assert held == [[]]
        await answers(fake, ADA["id"], 1, final(1))
        assert scripted.prompts == ["during the lock"]
        # Confirmed only after it was taken.
        await fake.wait_for(lambda: any(c.params.get("offset") == update_id + 1 for c in fake.calls_to("getUpdates")),
                            what="the offset past the update")


async def test_a_group_reply_is_edited_in_place_not_drafted(tmp_path: Path, fake: FakeTelegram,
                                                            scripted: Scripted) -> None:
    async with running_gateway(config(tmp_path, fake), clock=scripted.clock) as gw:
        await connected(gw)
        text = "@gateway_bot hi"
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        (reply,) = await answers(fake, GROUP_ID, 1, final(1))
        assert fake.drafts == {} and reply.edits[:1] == ["Hello"] and fake.throttled == []


async def test_a_refused_draft_falls_back_to_posting_and_editing_for_the_binding(tmp_path: Path, fake: FakeTelegram,
                                                                                 scripted: Scripted) -> None:
    fake.fail_next("sendMessageDraft", error_code=400, description="Bad Request: method is not available")
    async with running_gateway(config(tmp_path, fake, drafts=True), clock=scripted.clock) as gw:
        await connected(gw)
        fake.push_message(ADA["id"], ADA, "hi there")
        (reply,) = await answers(fake, ADA["id"], 1, final(1))
        assert fake.drafts == {} and all(final(1).startswith(e) for e in reply.edits)
        fake.push_message(ADA["id"], ADA, "again")
        await answers(fake, ADA["id"], 2, final(2))
        assert len(fake.calls_to("sendMessageDraft")) == 1, "refused once, remembered for the binding"
