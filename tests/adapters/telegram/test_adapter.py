"""The real python-telegram-bot, driven by the adapter, against the fake Bot API.

A small recording Dispatcher stands in for the core here (what the adapter hands over and
when); the end-to-end tests in test_e2e.py run the same paths through the real daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.adapter_registry import AdapterContext
from adapters.read_position import ReadPosition
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.bot import TelegramBot
from bindings.models import BindingSpec, GatewayConfig
from gateway.clock import ManualClock
from gateway.messages import ChatKind
from gateway.outbound.adapter import (
    ApprovalCard,
    ApprovalItem,
    Decision,
    DecisionOutcome,
    ItemState,
    NotVisible,
    PlatformError,
    RateLimited,
    ReplyTarget,
)
from tests.fakes.telegram import FakeTelegram
from tests.support.dispatcher import FakeDispatcher
from tests.support.patience import AUTOJUMP

# python-telegram-bot's own RetryAfter reads its deprecated int property while building itself.
pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

ADA = FakeTelegram.user(42, "Ada", "ada", last_name="Lovelace")
BOB = FakeTelegram.user(43, "Bob", "bob")
GROUP_ID, FORUM_ID = -100200, -100300


def make_adapter(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch, *, mode: str = "polling",
                 public_url: str | None = None, **admission: Any) -> TelegramAdapter:
    monkeypatch.setenv("TG_TEST_TOKEN", fake.token)
    monkeypatch.setenv("TG_TEST_SECRET", "hook-secret_123")
    section: dict[str, Any] = {"token": "env:TG_TEST_TOKEN", "api_url": fake.api_url, "mode": mode}
    if mode == "webhook":
        section["webhook_secret"] = "env:TG_TEST_SECRET"
    binding = BindingSpec.model_validate({"id": "tg", "platform": "telegram", "agent": "assistant",
                                          "telegram": section, "admission": admission})
    gateway = GatewayConfig.model_validate({"http": {"public_url": public_url}} if public_url else {})
    return TelegramAdapter(binding, AdapterContext(gateway, clock=fake.clock))  # the fake's: one time for both


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    # The adapters here run on the fake's clock, which jumps over each wait once all is quiet: the
    # budgets (one message a second in a chat) still pace every call, in no real time.
    async with FakeTelegram(clock=ManualClock(autojump=AUTOJUMP)) as server:
        server.private_chat(ADA)
        server.private_chat(BOB)
        server.add_chat(GROUP_ID, "group", title="Team")
        server.add_chat(FORUM_ID, "supergroup", title="Forum", is_forum=True, username="forum_public")
        yield server


@contextlib.asynccontextmanager
async def connected(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[
        tuple[TelegramAdapter, FakeDispatcher]]:
    """An adapter polling the fake on its manual clock, connected; stopped after."""
    adapter, dispatcher = make_adapter(fake, monkeypatch), FakeDispatcher()
    assert isinstance(fake.clock, ManualClock)
    fake.clock.idle = lambda: adapter.pacer.in_flight == 0  # no jump while a call is on its way
    await adapter.start(dispatcher)
    try:
        await fake.wait_for(lambda: adapter.health().connected, what="the adapter to connect")
        yield adapter, dispatcher
    finally:
        await adapter.stop()


@pytest.fixture
async def polling(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[
        tuple[TelegramAdapter, FakeDispatcher]]:
    async with connected(fake, monkeypatch) as started:
        yield started


def target(chat_id: int, kind: ChatKind, thread: str | None = None) -> ReplyTarget:
    return ReplyTarget("telegram", "tg", "123456", str(chat_id), thread, kind)


def card(*states: ItemState) -> ApprovalCard:
    items = tuple(ApprovalItem(secrets.token_urlsafe(16), f"tool_{n}", "files", '{"path": "/x"}', state,
                               "Ada" if state is not ItemState.PENDING else None) for n, state in enumerate(states))
    return ApprovalCard(secrets.token_urlsafe(16), "run1", items, "only Ada can decide")


# --- receiving ---------------------------------------------------------------------------


async def test_private_message_is_taken_and_confirmed_after_submit(fake: FakeTelegram, polling: Any) -> None:
    adapter, dispatcher = polling
    update_id, _ = fake.push_message(ADA["id"], ADA, "hello there")
    await fake.wait_for(lambda: dispatcher.submitted, what="the message to be submitted")
    msg = dispatcher.submitted[0]
    assert (msg.chat_kind, msg.channel, msg.text, msg.event_id) == (ChatKind.DM, "42", "hello there", str(update_id))
    assert (msg.sender.account_id, msg.sender.display_name) == ("42", "Ada Lovelace")
    assert fake.calls_to("deleteWebhook"), "polling starts by removing any webhook"
    # The offset is stored, and the next poll confirms the update on Telegram's side.
    assert await fake.wait_for(lambda: dispatcher.state.get(("tg", f"update_offset:{fake.bot_id}")) == str(update_id + 1))
    await fake.wait_for(lambda: fake.confirmed_through == update_id, what="Telegram to see the confirmation")


async def test_group_mention_and_reply_to_bot(fake: FakeTelegram, polling: Any) -> None:
    adapter, dispatcher = polling
    text = "👋 @gateway_bot summarize please"
    fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
    await fake.wait_for(lambda: dispatcher.submitted)
    assert (dispatcher.submitted[0].chat_kind, dispatcher.submitted[0].mentioned) == (ChatKind.GROUP, True)
    assert dispatcher.submitted[0].text == "👋 summarize please"

    posted = await adapter.post_message(target(GROUP_ID, ChatKind.GROUP), adapter.render("**Summary:** all good"))
    answer = fake.messages[(GROUP_ID, int(posted))]
    assert answer.text == "Summary: all good" and answer.parse_mode == "HTML"
    fake.push_message(GROUP_ID, BOB, "why?", reply_to=answer)
    fake.push_message(GROUP_ID, BOB, "chatter not for the bot")
    await fake.wait_for(lambda: len(dispatcher.submitted) == 3)
    assert [(m.text, m.mentioned, m.reply_to_bot) for m in dispatcher.submitted[1:]] == [
        ("why?", False, True), ("chatter not for the bot", False, False)]


async def test_forum_topic_replies_cards_and_typing_stay_in_the_topic(fake: FakeTelegram, polling: Any) -> None:
    adapter, dispatcher = polling
    topic = fake.add_topic(FORUM_ID, "Deploys", ADA)
    text = "@gateway_bot status?"
    fake.push_message(FORUM_ID, ADA, text, entities=fake.mention(text), thread_id=topic)
    await fake.wait_for(lambda: dispatcher.submitted)
    msg = dispatcher.submitted[0]
    assert (msg.topic, msg.reply_to_bot) == (str(topic), False)

    where = target(FORUM_ID, ChatKind.GROUP, thread=msg.topic)
    await adapter.show_typing(where)
    reply = await adapter.post_message(where, adapter.render("All green."))
    card_ref = await adapter.post_card(where, card(ItemState.PENDING))
    assert fake.messages[(FORUM_ID, int(reply))].thread_id == topic
    assert fake.messages[(FORUM_ID, int(card_ref))].thread_id == topic
    assert fake.calls_to("sendChatAction")[-1].params == {"chat_id": FORUM_ID, "action": "typing",
                                                          "message_thread_id": topic}
    general = await adapter.post_message(target(FORUM_ID, ChatKind.GROUP), "in General")
    assert fake.messages[(FORUM_ID, int(general))].thread_id is None


async def test_edits_are_flagged_and_malformed_updates_dropped(fake: FakeTelegram, polling: Any) -> None:
    adapter, dispatcher = polling
    _, original = fake.push_message(ADA["id"], ADA, "frist")
    await fake.wait_for(lambda: dispatcher.submitted)
    fake.push_raw({"message": {"message_id": "not a number", "chat": "?"}})
    fake.push_raw({"message": {"message_id": 9, "date": 0}})
    fake.push_raw({"message": {"message_id": 10, "chat": {"id": [1]}, "is_topic_message": True,
                               "message_thread_id": {}}})  # unhashable where ids belong
    fake.push_raw({"no_update_id": True}, numbered=False)
    fake.push_edit(original, "first")
    await fake.wait_for(lambda: len(dispatcher.submitted) == 2, what="the edit after three malformed updates")
    assert [(m.text, m.is_edit) for m in dispatcher.submitted] == [("frist", False), ("first", True)]
    assert adapter.health().connected


async def test_a_chat_waiting_on_the_core_does_not_hold_up_another_chat(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    """One poll's batch is handed over per chat: each chat's updates in order, other chats meanwhile.
    The offset stays before the first update not yet taken, so a stop then loses nothing."""
    dispatcher = FakeDispatcher()
    dispatcher.hold = {"B"}
    fake.push_message(ADA["id"], ADA, "A")
    fake.push_message(ADA["id"], ADA, "B")
    fake.push_message(ADA["id"], ADA, "after B")
    fake.push_message(BOB["id"], BOB, "from Bob")
    first = make_adapter(fake, monkeypatch)
    await first.start(dispatcher)
    await asyncio.wait_for(dispatcher.held.wait(), 10)
    await fake.wait_for(lambda: "from Bob" in dispatcher.texts(), what="Bob's message while Ada's waits")
    assert dispatcher.texts() == ["A", "from Bob"]  # Ada's later message still waits its turn
    await first.stop()

    dispatcher.hold = set()
    second = make_adapter(fake, monkeypatch)
    await second.start(dispatcher)
    try:
        await fake.wait_for(lambda: "after B" in dispatcher.texts(), what="Ada's messages after the restart")
        ada = [t for t in dispatcher.texts() if t != "from Bob"]
        assert ada == ["A", "B", "after B"]  # in order, none lost (Bob's may come twice: the ledger's job)
    finally:
        await second.stop()


async def test_restart_keeps_the_offset_nothing_replayed_nothing_dropped(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatcher = FakeDispatcher()
    dispatcher.hold = {"B"}
    first = make_adapter(fake, monkeypatch)
    await first.start(dispatcher)
    fake.push_message(ADA["id"], ADA, "A")
    fake.push_message(ADA["id"], ADA, "B")
    await asyncio.wait_for(dispatcher.held.wait(), 10)  # A taken, B in the middle of submit
    await first.stop()  # stopped mid-batch, before Telegram was told anything was taken
    assert fake.confirmed_through == 0
    fake.push_message(ADA["id"], ADA, "C")  # arrives while the gateway is down

    dispatcher.hold = set()
    second = make_adapter(fake, monkeypatch)
    await second.start(dispatcher)
    try:
        await fake.wait_for(lambda: len(dispatcher.submitted) >= 3, what="B and C after the restart")
        assert dispatcher.texts() == ["A", "B", "C"]
        first_poll_after_restart = [c for c in fake.calls_to("getUpdates")][-1]
        assert first_poll_after_restart.params["offset"] > int(dispatcher.submitted[0].event_id)
    finally:
        await second.stop()


async def test_a_crash_after_the_core_took_an_update_before_it_was_confirmed_loses_and_doubles_nothing(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window between a submit returning and the next getUpdates (the one that confirms it):
    a process killed there wrote no offset and told Telegram nothing, so the update comes again;
    the ledger takes it once, and what came after it is read too."""
    dispatcher = FakeDispatcher()
    real_poll = TelegramBot.get_updates_raw
    crashed = asyncio.Event()

    async def dies_before_confirming(bot: TelegramBot, offset: int | None) -> list[Any]:
        if offset:  # the poll that would confirm what the core took: the process dies first
            crashed.set()
            await asyncio.Event().wait()
        return await real_poll(bot, offset)

    with monkeypatch.context() as dying:
        dying.setattr(TelegramBot, "get_updates_raw", dies_before_confirming)
        dying.setattr(ReadPosition, "advance", lambda position, value: None)  # a kill writes no offset
        first = make_adapter(fake, monkeypatch)
        await first.start(dispatcher)
        fake.push_message(ADA["id"], ADA, "A")
        await asyncio.wait_for(crashed.wait(), 10)
        assert dispatcher.texts() == ["A"]
        await first.stop()
    assert fake.confirmed_through == 0 and not dispatcher.state

    second = make_adapter(fake, monkeypatch)
    await second.start(dispatcher)
    try:
        b, _ = fake.push_message(ADA["id"], ADA, "B")
        await fake.wait_for(lambda: fake.confirmed_through == b, what="B taken and confirmed after the restart")
        assert dispatcher.texts() == ["A", "A", "B"]  # A read again: not lost
        assert [m.text for m in dispatcher.accepted] == ["A", "B"]  # and taken once
    finally:
        await second.stop()


async def test_get_updates_429_is_waited_out_without_a_busy_loop(fake: FakeTelegram,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake.fail_next("getUpdates", retry_after=30)  # a long flood wait: the fake's clock jumps to its end
    fake.push_message(ADA["id"], ADA, "after the flood wait")
    adapter, dispatcher = make_adapter(fake, monkeypatch), FakeDispatcher()
    await adapter.start(dispatcher)
    try:
        await fake.wait_for(lambda: dispatcher.submitted)
        refused, *later = fake.calls_to("getUpdates")
        assert later, "polling resumed"
        assert all(poll.at - refused.at >= 30.0 for poll in later), "no poll inside the retry_after window"
    finally:
        await adapter.stop()


# --- replying ----------------------------------------------------------------------------


async def test_send_429_becomes_rate_limited(fake: FakeTelegram, polling: Any) -> None:
    adapter, _ = polling
    fake.fail_next("sendMessage", retry_after=7)
    with pytest.raises(RateLimited) as raised:
        await adapter.post_message(target(ADA["id"], ChatKind.DM), "hi")
    assert raised.value.retry_after == 7.0
    fake.fail_next("editMessageText", retry_after=2)
    posted = await adapter.post_message(target(ADA["id"], ChatKind.DM), "hi")
    with pytest.raises(RateLimited):
        await adapter.edit_message(target(ADA["id"], ChatKind.DM), posted, "hi again")


async def test_refused_html_is_resent_as_plain_text(fake: FakeTelegram, polling: Any) -> None:
    adapter, _ = polling
    where = target(ADA["id"], ChatKind.DM)
    posted = await adapter.post_message(where, "<b>unclosed &amp; bold")
    shown = fake.messages[(ADA["id"], int(posted))]
    assert (shown.text, shown.parse_mode) == ("unclosed & bold", None)
    await adapter.edit_message(where, posted, "<i>still <b>wrong</i>")
    assert shown.text == "still wrong"


async def test_edit_history_and_not_modified_is_not_an_error(fake: FakeTelegram, polling: Any) -> None:
    adapter, _ = polling
    where = target(ADA["id"], ChatKind.DM)
    posted = await adapter.post_message(where, adapter.render("Thinking"))
    await adapter.edit_message(where, posted, adapter.render("Thinking about **it**"))
    await adapter.edit_message(where, posted, adapter.render("Thinking about **it**"))  # identical: fine
    shown = fake.messages[(ADA["id"], int(posted))]
    assert shown.edits == ["Thinking"] and shown.text == "Thinking about it"
    with pytest.raises(PlatformError, match="(?i)message to edit not found"):
        await adapter.edit_message(where, "999", "x")


async def test_tell_privately_uses_the_private_chat(fake: FakeTelegram, polling: Any) -> None:
    adapter, _ = polling
    await adapter.tell_privately(target(GROUP_ID, ChatKind.GROUP), "42", "only you: <not html>")
    assert [m.text for m in fake.sent(ADA["id"])] == ["only you: <not html>"]
    assert fake.sent(GROUP_ID) == []


# --- approvals ---------------------------------------------------------------------------


async def test_callback_approvals_including_a_click_by_someone_else(fake: FakeTelegram, polling: Any) -> None:
    adapter, dispatcher = polling
    where = target(GROUP_ID, ChatKind.GROUP)
    pending = card(ItemState.PENDING)
    ref = await adapter.post_card(where, pending)
    shown = fake.messages[(GROUP_ID, int(ref))]
    approve, deny, approve_all = shown.buttons
    assert (approve["callback_data"], approve_all["callback_data"]) == (
        f"a:{pending.items[0].approval_id}", f"all:{pending.card_id}")

    dispatcher.outcome = DecisionOutcome(False, "Only Ada can decide this.")
    by_bob = fake.push_callback(BOB, shown, approve["callback_data"])
    await fake.wait_for(lambda: by_bob in fake.answers, what="Bob's click to be answered")
    assert fake.answers[by_bob] == {"callback_query_id": by_bob, "text": "Only Ada can decide this.",
                                    "show_alert": True}
    assert shown.buttons, "a refused click changes nothing"

    dispatcher.outcome = DecisionOutcome(True, "Approved.")
    by_ada = fake.push_callback(ADA, shown, deny["callback_data"])
    await fake.wait_for(lambda: by_ada in fake.answers)
    assert fake.answers[by_ada].get("show_alert") is False
    assert {(d.binding_id, d.surface) for d in dispatcher.clicks} == {("tg", "telegram")}
    assert [(d.approval_id, d.decision, d.decider.account_id) for d in dispatcher.clicks] == [
        (pending.items[0].approval_id, Decision.APPROVE, "43"), (pending.items[0].approval_id, Decision.DENY, "42")]

    decided = ApprovalCard(pending.card_id, "run1", (ApprovalItem(
        pending.items[0].approval_id, "tool_0", "files", '{"path": "/x"}', ItemState.DENIED, "Ada"),), "")
    await adapter.update_card(where, ref, decided)
    await adapter.update_card(where, ref, decided)  # a second update of the same state is fine
    assert shown.buttons == [] and "❌ Denied by Ada" in shown.text

    stale = fake.push_callback(ADA, shown, "something-else")
    await fake.wait_for(lambda: stale in fake.answers)
    assert fake.answers[stale]["show_alert"] is True and len(dispatcher.clicks) == 2


# --- webhook -----------------------------------------------------------------------------


@pytest.fixture
async def webhook(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[
        tuple[TelegramAdapter, FakeDispatcher, str]]:
    """The adapter in webhook mode, its routes served the way the daemon serves them."""
    app = web.Application()
    runner = web.AppRunner(app)
    holder: dict[str, TelegramAdapter] = {}

    async def route(request: web.Request) -> web.StreamResponse:  # routes exist before the port is known
        return await holder["adapter"]._webhook(request)

    app.router.add_post("/telegram/webhook/tg", route)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    adapter, dispatcher = make_adapter(fake, monkeypatch, mode="webhook", public_url=base), FakeDispatcher()
    assert [r.path for r in adapter.http_routes()] == ["/telegram/webhook/tg"]  # type: ignore[attr-defined]
    holder["adapter"] = adapter
    await adapter.start(dispatcher)
    await fake.wait_for(lambda: adapter.health().connected)
    yield adapter, dispatcher, f"{base}/telegram/webhook/tg"
    await adapter.stop()
    await runner.cleanup()


async def test_webhook_delivers_with_the_secret_and_refuses_without(fake: FakeTelegram, webhook: Any) -> None:
    adapter, dispatcher, url = webhook
    assert fake.webhook == {"url": url, "secret_token": "hook-secret_123",
                            "allowed_updates": ["message", "edited_message", "callback_query"]}
    update_id, _ = fake.push_message(ADA["id"], ADA, "via webhook")
    # The fake records a delivery once its answer is back, which can come after the dispatcher has it.
    await fake.wait_for(lambda: dispatcher.submitted and fake.webhook_deliveries)
    assert dispatcher.texts() == ["via webhook"] and (update_id, 200) in fake.webhook_deliveries

    forged = {"update_id": 1, "message": {"message_id": 1, "date": 0, "chat": {"id": 42, "type": "private"},
                                          "from": ADA, "text": "forged"}}
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
            async with http.post(url, json=forged, headers=headers) as resp:
                assert resp.status == 401
        async with http.post(url, data="not json", headers={"X-Telegram-Bot-Api-Secret-Token": "hook-secret_123"}) as resp:
            assert resp.status == 400
    assert dispatcher.texts() == ["via webhook"], "nothing ran for the forged requests"

    await adapter.stop()  # e.g. a reload swapping the binding: Telegram is told to come back later
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=forged, headers={"X-Telegram-Bot-Api-Secret-Token": "hook-secret_123"}) as resp:
            assert resp.status == 503
    assert dispatcher.texts() == ["via webhook"]


# --- directory and logs ------------------------------------------------------------------


async def test_directory_answers_info_and_administrators_only(fake: FakeTelegram, polling: Any) -> None:
    adapter, _ = polling
    chat = fake.chats[FORUM_ID]
    chat.description, chat.member_count = "Where deploys are discussed", 57
    chat.admins = [fake.admin_member(BOB), fake.admin_member(ADA, owner=True)]
    directory = adapter.directory()
    assert directory is not None and directory.supported == {"get_channel_info", "list_channel_members"}
    info = await directory.channel_info(target(FORUM_ID, ChatKind.GROUP))
    assert (info.name, info.purpose, info.member_count, info.is_private) == (
        "Forum", "Where deploys are discussed", 57, False)
    members, truncated = await directory.channel_members(target(FORUM_ID, ChatKind.GROUP), 10)
    assert [(m.account_id, m.display_name) for m in members] == [
        ("42", "Ada Lovelace (owner)"), ("43", "Bob (administrator)")]
    assert truncated is False
    members, truncated = await directory.channel_members(target(FORUM_ID, ChatKind.GROUP), 1)
    assert len(members) == 1 and truncated is True
    with pytest.raises(PlatformError):
        await directory.channel_history(target(FORUM_ID, ChatKind.GROUP), 5)
    with pytest.raises(NotVisible):  # a chat the bot is not in is bad news, not a fault
        await directory.channel_info(target(-100999, ChatKind.GROUP))


async def test_secrets_never_reach_a_log_line(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("aiohttp", "telegram", "adapters"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.DEBUG)
    dispatcher = FakeDispatcher()
    polling_adapter = make_adapter(fake, monkeypatch)
    await polling_adapter.start(dispatcher)
    fake.push_message(ADA["id"], ADA, "hi")
    await fake.wait_for(lambda: dispatcher.submitted)
    await polling_adapter.post_message(target(ADA["id"], ChatKind.DM), "reply")
    await polling_adapter.stop()
    hooked = make_adapter(fake, monkeypatch, mode="webhook", public_url="http://127.0.0.1:9")
    await hooked.start(dispatcher)
    await fake.wait_for(lambda: fake.webhook)
    await hooked.stop()
    # The loggers did log (polling's start, and the webhook's; getUpdates goes through no PTB method that logs it).
    assert "deleteWebhook" in caplog.text and "setWebhook" in caplog.text
    assert fake.token not in caplog.text
    assert "hook-secret_123" not in caplog.text


async def test_a_rejected_token_shows_in_health_without_the_token(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    adapter = make_adapter(fake, monkeypatch)
    monkeypatch.setenv("TG_TEST_TOKEN", "999:not-the-fake-token")  # the fake answers 401 Unauthorized
    await adapter.start(FakeDispatcher())
    try:
        await fake.wait_for(lambda: "rejected" in adapter.health().detail, what="the rejection in health")
        assert not adapter.health().connected
        assert "not-the-fake-token" not in adapter.health().detail
        assert "connection lost" in caplog.text and "not-the-fake-token" not in caplog.text
    finally:
        await adapter.stop()


async def test_membership_is_asked_with_get_chat_member(fake: FakeTelegram, polling: Any) -> None:
    """Conversation search's question: is this person in the group now (an admin, a member), or gone?"""
    adapter, _ = polling
    chat = fake.chats[GROUP_ID]
    chat.admins, chat.members = [fake.admin_member(BOB, owner=True)], {ADA["id"]}
    assert await adapter.is_member(target(GROUP_ID, ChatKind.GROUP), str(ADA["id"])) is True
    assert await adapter.is_member(target(GROUP_ID, ChatKind.GROUP), str(BOB["id"])) is True
    chat.members.clear()  # Ada left the group
    assert await adapter.is_member(target(GROUP_ID, ChatKind.GROUP), str(ADA["id"])) is False
    assert [c.params["user_id"] for c in fake.calls_to("getChatMember")] == [ADA["id"], BOB["id"], ADA["id"]]
    with pytest.raises(NotVisible):  # a chat the bot is not in cannot say: the caller leaves it out
        await adapter.is_member(target(-100999, ChatKind.GROUP), str(ADA["id"]))


async def test_a_binding_loads_the_ca_bundle_once(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its two transports (calls, and the long poll) verify with one context: loading the bundle is ~30 ms of
    the daemon's start before READY, and a second load gave them nothing the first had not."""
    import httpx

    from adapters.telegram import request

    loads: list[object] = []
    load = httpx.create_ssl_context

    def counted() -> Any:
        loads.append(None)
        return load()

    monkeypatch.setattr(request.httpx, "create_ssl_context", counted)
    async with connected(fake, monkeypatch):
        assert len(loads) == 1


async def test_messages_are_taken_while_the_command_menu_is_still_being_registered(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    """The "/" menu (setMyCommands) is registered once connected, not before: the binding reports itself
    connected (the daemon's READY waits for that) and takes a message while Telegram has not answered."""
    answer_menu = asyncio.Event()
    register = fake._api_setMyCommands

    async def held(params: Any) -> Any:
        await answer_menu.wait()
        return await register(params)

    monkeypatch.setattr(fake, "_api_setMyCommands", held)
    try:
        async with connected(fake, monkeypatch) as (_, dispatcher):
            fake.push_message(ADA["id"], ADA, "hello")
            await fake.wait_for(lambda: dispatcher.submitted, what="the message to be submitted")
            assert fake.commands == {}, "the menu is still unanswered"
            answer_menu.set()
            await fake.wait_for(lambda: len(fake.commands) == 2, what="the menu for private and group chats")
    finally:
        answer_menu.set()
