"""Replies, cards, clicks, private notes and the channel directory, through the real SDK
against the fake Slack: what lands in the channel is what a person would see."""

from __future__ import annotations

import json
import logging

import pytest

from adapters.slack.adapter import SlackAdapter
from adapters.slack.budget import SlackBudget
from bindings.models import LoggingConfig
from gateway.ops.logs import OWN_LOGGERS, configure_logging
from gateway.outbound.budget import Rule
from gateway.clock import ManualClock
from gateway.messages import ChatKind
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ItemState, NotVisible, PlatformError, RateLimited, ReplyTarget
from tests.fakes.slack import BOT_TOKEN, DROPPED, FakeSlack

from tests.support.dispatcher import FakeDispatcher

from .conftest import eventually, start_adapter


def target(channel: str = "C0GEN", thread: str | None = None, kind: ChatKind = ChatKind.CHANNEL) -> ReplyTarget:
    return ReplyTarget("slack", "acme", "T0TEAM", channel, thread, kind)


def approval_card(*states: ItemState, decided_by: str | None = None) -> ApprovalCard:
    items = tuple(
        ApprovalItem(f"appr-{n}", f"delete_branch_{n}", "git", '{\n  "branch": "old"\n}', state, decided_by if state is not ItemState.PENDING else None)
        for n, state in enumerate(states or (ItemState.PENDING,))
    )
    return ApprovalCard(card_id="card-Q7", run_id="run-1", items=items, deciders="only Ada can decide")


# --- replies --------------------------------------------------------------------------------


async def test_reply_streams_as_edits_of_one_threaded_message(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    root, _ = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> explain")
    where = target(thread=root.ts)
    ts = await adapter.post_message(where, adapter.render("Thinking…"))
    for partial in ("**Step 1**", "**Step 1**\n- read", "**Step 1**\n- read\n- [docs](https://d.test)"):
        await adapter.edit_message(where, ts, adapter.render(partial))
    (reply,) = fake_slack.bot_messages("C0GEN")
    assert reply.ts == ts and reply.thread_ts == root.ts
    assert reply.edits == ["*Step 1*", "*Step 1*\n• read", "*Step 1*\n• read\n• <https://d.test|docs>"]
    assert reply.text == "*Step 1*\n• read\n• <https://d.test|docs>"
    post = fake_slack.calls_to("chat.postMessage")[0]
    assert post.args["thread_ts"] == root.ts and post.args["unfurl_links"] is False


async def test_top_level_dm_reply_has_no_thread(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    await adapter.post_message(target("D0ADA", None, ChatKind.DM), "hi")
    (reply,) = fake_slack.bot_messages("D0ADA")
    assert reply.thread_ts is None and "thread_ts" not in fake_slack.calls_to("chat.postMessage")[0].args


async def test_429_on_chat_update_is_rate_limited_with_retry_after(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    ts = await adapter.post_message(target(), "draft")
    fake_slack.fail_next("chat.update", retry_after=3)
    with pytest.raises(RateLimited) as caught:
        await adapter.edit_message(target(), ts, "draft, longer")
    assert caught.value.retry_after == 3 and caught.value.method == "chat.update"
    assert len(fake_slack.calls_to("chat.update")) == 1  # the adapter itself does not retry: the core paces
    await adapter.edit_message(target(), ts, "final")
    assert fake_slack.message("C0GEN", ts).edits == ["final"]


async def test_429_on_post_and_other_errors(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    fake_slack.fail_next("chat.postMessage", retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await adapter.post_message(target(), "hello")
    assert caught.value.retry_after == 7
    with pytest.raises(PlatformError, match="channel_not_found") as other:
        await adapter.post_message(target("C0NOPE"), "hello")
    assert not isinstance(other.value, RateLimited)
    assert fake_slack.bot_messages() == []


async def test_show_typing_uses_thread_status_where_allowed(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    await adapter.show_typing(target(thread="111.222"))
    (status,) = fake_slack.calls_to("assistant.threads.setStatus")
    assert status.args == {"channel_id": "C0GEN", "thread_ts": "111.222", "status": "is thinking…"}
    await adapter.show_typing(target("D0ADA", None, ChatKind.DM))  # no thread: nothing to set
    assert len(fake_slack.calls_to("assistant.threads.setStatus")) == 1


async def test_show_typing_is_a_no_op_where_refused(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    fake_slack.status_allowed = False
    await adapter.show_typing(target(thread="1.1"))  # refused: no error for the core
    await adapter.show_typing(target(thread="2.2"))  # not asked again in this channel
    assert len(fake_slack.calls_to("assistant.threads.setStatus")) == 1
    fake_slack.fail_next("assistant.threads.setStatus", retry_after=30)
    await adapter.show_typing(target("C0ENG", thread="3.3"))  # a 429 on a cosmetic call is swallowed


async def test_thread_status_goes_out_as_the_sdk_would_send_it(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    """The status skips the SDK's call machinery (`api.JsonPost`); Slack receives what the SDK itself sends
    for it: the same URL, headers, token and body, byte for byte."""
    await adapter.show_typing(target(thread="111.222"))
    await adapter._require_client().assistant_threads_setStatus(channel_id="C0GEN", thread_ts="111.222",
                                                                status="is thinking…")
    ours, sdk = fake_slack.calls_to("assistant.threads.setStatus")
    assert ours.token == sdk.token == BOT_TOKEN
    assert ours.headers == sdk.headers and ours.body == sdk.body
    assert ours.headers["Content-Type"] == "application/json;charset=utf-8"
    assert json.loads(ours.body) == {"channel_id": "C0GEN", "thread_ts": "111.222", "status": "is thinking…"}


async def test_a_429_on_the_status_is_not_retried_and_counts_against_its_budget(fake_slack: FakeSlack,
                                                                                adapter: SlackAdapter) -> None:
    # Three a minute per channel: a status may take two of them (`impatient`: the rest is left to the replies).
    adapter.budget = SlackBudget([Rule("assistant.threads.setStatus", 3, 60.0)])
    fake_slack.fail_next("assistant.threads.setStatus", retry_after=30)
    await adapter.show_typing(target(thread="1.1"))  # 429: swallowed, not retried
    await adapter.show_typing(target(thread="2.2"))  # the channel is not given up on: shown
    await adapter.show_typing(target(thread="3.3"))  # the 429 counted: the channel's minute is full, skipped
    await adapter.show_typing(target("C0ENG", thread="4.4"))
    assert [(c.args["thread_ts"], c.status) for c in fake_slack.calls_to("assistant.threads.setStatus")] == [
        ("1.1", 429), ("2.2", 200), ("4.4", 200)]


async def test_a_status_whose_connection_drops_is_sent_again_once_and_never_gives_up_the_channel(
        fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    """A kept-alive connection the server closed meanwhile: the status goes once more on a new one.
    Dropped twice, it is not shown, and no error reaches the core; the channel's next status goes."""
    fake_slack.fail_next("assistant.threads.setStatus", status=DROPPED)
    await adapter.show_typing(target(thread="1.1"))
    fake_slack.fail_next("assistant.threads.setStatus", status=DROPPED, times=2)
    await adapter.show_typing(target(thread="2.2"))
    await adapter.show_typing(target(thread="3.3"))
    assert [(c.args["thread_ts"], c.status) for c in fake_slack.calls_to("assistant.threads.setStatus")] == [
        ("1.1", DROPPED), ("1.1", 200), ("2.2", DROPPED), ("2.2", DROPPED), ("3.3", 200)]


async def test_at_debug_level_no_request_body_reaches_the_log(fake_slack: FakeSlack, adapter: SlackAdapter,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """slack_sdk writes each request and answer at DEBUG, bodies included: under the binding's own logger
    (the gateway's, written at `logging.level: debug`) a reply's text and a status line reached the log."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    own = {name: logging.getLogger(name).level for name in OWN_LOGGERS}
    configure_logging(LoggingConfig(level="debug"))
    try:
        logging.getLogger("adapters.slack.acme").debug("the binding's own detail")
        ts = await adapter.post_message(target(thread="5.5"), "planted reply about the zebra 51f0")
        await adapter.edit_message(target(thread="5.5"), ts, "planted edit about the zebra 51f0")
        await adapter.show_status(target(thread="5.5"), "planted status about the zebra 51f0")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in own.items():
            logging.getLogger(name).setLevel(was)
    written = capsys.readouterr().err
    assert "the binding's own detail" in written  # the level was in force
    assert len(fake_slack.calls_to("chat.update")) == 1 and fake_slack.calls_to("assistant.threads.setStatus")
    assert "zebra" not in written, [line for line in written.splitlines() if "zebra" in line]


async def test_tell_privately_is_ephemeral_in_the_thread(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    await adapter.tell_privately(target(thread="5.5"), "U0BOB", "The agent is busy; your message is queued.")
    (note,) = fake_slack.ephemerals
    assert (note.channel, note.user, note.thread_ts) == ("C0GEN", "U0BOB", "5.5")
    assert fake_slack.bot_messages() == []


# --- approval cards -------------------------------------------------------------------------


async def test_card_click_by_a_decider_reaches_decide_and_is_acked(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    where = target(thread="9.9")
    card_ts = await adapter.post_card(where, approval_card(ItemState.PENDING, ItemState.PENDING))
    card_msg = fake_slack.message("C0GEN", card_ts)
    assert card_msg.thread_ts == "9.9" and "delete_branch_0" in card_msg.text
    envelope = await fake_slack.click("U0ADA", card_msg, "approve:appr-1")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    (click,) = dispatcher.clicks
    assert (click.approval_id, click.decision, click.decider.account_id, click.decider.display_name) == ("appr-1", Decision.APPROVE, "U0ADA", "Ada")
    assert (click.binding_id, click.surface) == ("acme", "slack")
    assert fake_slack.ephemerals == []

    await adapter.update_card(where, card_ts, approval_card(ItemState.APPROVED, ItemState.APPROVED, decided_by="Ada"))
    updated = fake_slack.message("C0GEN", card_ts)
    assert all(b["type"] != "actions" for b in updated.blocks)  # the buttons are gone
    assert "Approved* by Ada" not in str(updated.blocks) and "Approved by Ada" in str(updated.blocks)


async def test_click_by_someone_else_gets_an_ephemeral_note(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    card_ts = await adapter.post_card(target(thread="9.9"), approval_card())
    envelope = await fake_slack.click("U0BOB", fake_slack.message("C0GEN", card_ts), "deny:appr-0")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    note = await fake_slack.wait_for(lambda: fake_slack.ephemerals)
    assert (note[0].user, note[0].channel, note[0].thread_ts, note[0].text) == ("U0BOB", "C0GEN", "9.9", "Only Ada can decide this.")
    assert dispatcher.clicks[0].decision is Decision.DENY
    assert fake_slack.calls_to("chat.update") == []


async def test_approve_all_carries_the_card_id(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    card_ts = await adapter.post_card(target(), approval_card())
    envelope = await fake_slack.click("U0ADA", fake_slack.message("C0GEN", card_ts), "approve_all:card-Q7")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    assert [(c.approval_id, c.decision) for c in dispatcher.clicks] == [("card-Q7", Decision.APPROVE_ALL)]


async def test_foreign_and_malformed_clicks_are_acked_and_decide_nothing(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    card_ts = await adapter.post_card(target(), approval_card())
    payload = fake_slack.block_actions("U0ADA", fake_slack.message("C0GEN", card_ts), "approve:appr-0")
    foreign = {**payload, "actions": [{**payload["actions"][0], "action_id": "someone_elses_button", "value": "approve:appr-0"}]}
    forged_value = {**payload, "actions": [{**payload["actions"][0], "value": "launch:missiles"}]}
    no_user = {k: v for k, v in payload.items() if k != "user"}
    envelopes = [await fake_slack.send_interactive(p) for p in (foreign, forged_value, no_user)]
    await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
    assert dispatcher.clicks == []


# --- channel directory ----------------------------------------------------------------------


async def test_directory_channel_info(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    directory = adapter.directory()
    assert directory.supported == {"get_channel_info", "list_channel_members", "search_channels", "read_channel_history"}
    info = await directory.channel_info(target())
    assert (info.id, info.name, info.purpose, info.member_count, info.is_private) == ("C0GEN", "general", "Company-wide announcements", 3, False)


async def test_directory_members_limited_with_flag(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    members, truncated = await adapter.directory().channel_members(target(), limit=2)
    assert [(m.account_id, m.name, m.display_name) for m in members] == [("U0ADA", "ada", "Ada"), ("U0BOB", "bob", "Bob")]
    assert truncated
    members, truncated = await adapter.directory().channel_members(target(), limit=10)
    assert [m.is_bot for m in members] == [False, False, True] and not truncated


async def test_directory_search_matches_name_and_purpose(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    found, truncated = await adapter.directory().search_channels(target(), "deploy", limit=5)
    assert [c.name for c in found] == ["engineering"] and not truncated
    found, _ = await adapter.directory().search_channels(target(), "#gen", limit=5)
    assert [c.name for c in found] == ["general"]
    found, truncated = await adapter.directory().search_channels(target(), "e", limit=1)
    assert len(found) == 1 and truncated
    assert fake_slack.calls_to("conversations.history") == []  # no messages are read to search


async def test_directory_search_pages_through_the_list(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    for n in range(450):
        fake_slack.add_channel(f"C1{n:04d}", f"proj-{n}", purpose="project room")
    fake_slack.add_channel("C2LAST", "needle-room")
    found, truncated = await adapter.directory().search_channels(target(), "needle", limit=5)
    assert [c.name for c in found] == ["needle-room"] and not truncated
    assert len(fake_slack.calls_to("conversations.list")) == 3


async def test_directory_channel_history_newest_last(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    for n in range(5):
        fake_slack.user_posts("C0GEN", "U0ADA" if n % 2 == 0 else "U0BOB", f"message {n} &amp; more")
    history, truncated = await adapter.directory().channel_history(target(), limit=3)
    assert [h.text for h in history] == ["message 2 & more", "message 3 & more", "message 4 & more"]
    assert [h.author for h in history] == ["Ada", "Bob", "Ada"] and truncated
    assert history[0].ts is not None and history[0].ts < history[-1].ts
    history, truncated = await adapter.directory().channel_history(target(), limit=50)
    assert len(history) == 5 and not truncated


async def test_directory_thread_history_uses_replies(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    root, _ = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> root")
    fake_slack.user_posts("C0GEN", "U0BOB", "unrelated top-level")
    for n in range(4):
        fake_slack.user_posts("C0GEN", "U0BOB", f"reply {n}", thread_ts=root.ts)
    history, truncated = await adapter.directory().channel_history(target(thread=root.ts), limit=2)
    assert [h.text for h in history] == ["reply 2", "reply 3"] and truncated
    history, truncated = await adapter.directory().channel_history(target(thread=root.ts), limit=10)
    assert [h.text for h in history] == ["root", "reply 0", "reply 1", "reply 2", "reply 3"] and not truncated
    assert fake_slack.calls_to("conversations.replies")


async def test_directory_refusals_are_platform_errors(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    # A channel the bot's token cannot see is bad news for the channel tools, not a fault.
    with pytest.raises(NotVisible, match="channel_not_found"):
        await adapter.directory().channel_info(target("C0GONE"))
    fake_slack.fail_next("conversations.history", retry_after=4)
    with pytest.raises(RateLimited):
        await adapter.directory().channel_history(target(), limit=5)


async def test_user_names_are_cached(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    for n in range(3):
        await fake_slack.say("D0ADA", "U0ADA", f"hi {n}")
    await eventually(lambda: len(dispatcher.accepted) == 3)
    assert [c.args["user"] for c in fake_slack.calls_to("users.info")] == ["U0ADA"]


async def test_a_cached_user_name_is_looked_up_again_an_hour_later_on_the_gateways_clock(
        fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> None:
    fake_slack.clock = clock = ManualClock()
    adapter = await start_adapter(fake_slack, dispatcher)  # on the fake's clock
    try:
        await fake_slack.say("D0ADA", "U0ADA", "hi")
        await eventually(lambda: len(dispatcher.accepted) == 1)
        clock.advance(59 * 60)
        await fake_slack.say("D0ADA", "U0ADA", "within the hour")
        await eventually(lambda: len(dispatcher.accepted) == 2)
        assert len(fake_slack.calls_to("users.info")) == 1, "cached"
        clock.advance(2 * 60)
        await fake_slack.say("D0ADA", "U0ADA", "an hour on")
        await eventually(lambda: len(dispatcher.accepted) == 3)
        assert [c.args["user"] for c in fake_slack.calls_to("users.info")] == ["U0ADA", "U0ADA"], "looked up again"
    finally:
        await adapter.stop()
