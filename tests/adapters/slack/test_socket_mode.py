"""The real slack-bolt app over Socket Mode against the fake Slack: events in, acks out.

The core is a FakeDispatcher here; these tests check the adapter's half: what it hands
to `submit`, when it acks, what it drops, and that it survives bad input and dropped sockets.
"""

from __future__ import annotations

import asyncio

import pytest

from adapters.slack.adapter import SlackAdapter
from gateway.messages import ChatKind
from gateway.outbound.adapter import ReplyTarget
from gateway.store.availability import StoreUnavailable
from tests.fakes.slack import FakeSlack

from tests.support.dispatcher import FakeDispatcher

from .conftest import eventually, start_adapter


def target(channel: str = "C0GEN", thread: str | None = None, kind: ChatKind = ChatKind.CHANNEL) -> ReplyTarget:
    return ReplyTarget("slack", "acme", "T0TEAM", channel, thread, kind)


async def test_connects_with_hello_and_knows_itself(fake_slack: FakeSlack, adapter: SlackAdapter) -> None:
    assert adapter.health().connected
    assert fake_slack.connections_opened == 1
    assert [c.token for c in fake_slack.calls_to("apps.connections.open")] == ["xapp-fake-app-token"]
    assert fake_slack.calls_to("auth.test")


async def test_channel_mention_pair_runs_once_and_both_are_acked(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    msg, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> what is our release date?")
    assert len(envelopes) == 2  # `message` and `app_mention`
    await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
    # The second waits while the first is handled; once it is stored, the core says so and the
    # second is acked unread, never handed over.
    assert len(dispatcher.submitted) == len(dispatcher.dropped) == len(dispatcher.accepted) == 1
    accepted = dispatcher.accepted[0]
    assert accepted.text == "what is our release date?"
    assert accepted.mentioned and accepted.chat_kind is ChatKind.CHANNEL
    assert accepted.sender.account_id == "U0ADA" and accepted.sender.display_name == "Ada"
    assert accepted.message_id == msg.ts and accepted.thread is None and accepted.workspace == "T0TEAM"


async def test_mention_first_order_also_runs_once(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    _, envelopes = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hi", mention_first=True)
    await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
    assert len(dispatcher.accepted) == 1


@pytest.mark.parametrize("mention_first", [False, True])
async def test_a_stored_messages_twin_is_acked_and_never_handed_over(
        fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher, mention_first: bool) -> None:
    msg, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> once")
    first, twin = reversed(events) if mention_first else events
    sent = await fake_slack.send_event(first)
    await fake_slack.wait_for(lambda: fake_slack.acked(sent))
    assert len(dispatcher.accepted) == 1
    again = await fake_slack.send_event(twin)
    await fake_slack.wait_for(lambda: fake_slack.acked(again))
    assert [m.event_id for m in dispatcher.submitted] == [dispatcher.accepted[0].event_id]
    assert dispatcher.dropped == [f"C0GEN:{msg.ts}"]


async def test_a_twin_arriving_while_its_first_is_stored_waits_for_it_and_is_acked_unread(
        fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    dispatcher.gate = asyncio.Event()  # the first is being stored until the gate opens
    msg, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> at once")
    first = await fake_slack.send_event(events[0])
    await eventually(lambda: dispatcher.submitted)
    twin = await fake_slack.send_event(events[1])
    # Envelopes are taken in order: once a later one is acked, the twin has arrived (and waits).
    later = await fake_slack.send_event({"type": "reaction_added", "user": "U0ADA", "reaction": "eyes", "item": {}, "event_ts": "1.1"})
    await fake_slack.wait_for(lambda: fake_slack.acked(later))
    assert not fake_slack.acked(first) and not fake_slack.acked(twin)
    dispatcher.gate.set()
    await fake_slack.wait_for(lambda: fake_slack.acked(first) and fake_slack.acked(twin))
    assert len(dispatcher.submitted) == len(dispatcher.accepted) == 1 and dispatcher.dropped == [f"C0GEN:{msg.ts}"]


async def test_a_twin_whose_first_was_refused_carries_the_message(
        fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    dispatcher.gate = asyncio.Event()
    dispatcher.refuse = StoreUnavailable("the database is locked", 1.0)  # the first is not stored
    _, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> still answered")
    first = await fake_slack.send_event(events[0])
    await eventually(lambda: dispatcher.submitted)
    twin = await fake_slack.send_event(events[1])
    dispatcher.gate.set()
    await fake_slack.wait_for(lambda: fake_slack.acked(twin))
    refused, carried = dispatcher.submitted  # the twin waited for the first, then went the whole way
    assert dispatcher.accepted == [carried] and carried.event_id != refused.event_id and dispatcher.dropped == []
    assert not fake_slack.acked(first)  # Slack delivers it again; the ledger then drops it


async def test_ack_waits_for_submit(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    dispatcher.gate = asyncio.Event()
    _, (envelope,) = await fake_slack.say("D0ADA", "U0ADA", "hello")
    await eventually(lambda: dispatcher.submitted)
    # submit() has not returned: the message is not durable yet, so no ack may have gone out.
    # An event that never reaches submit() is acked meanwhile; once it is, the first still is not.
    other = await fake_slack.send_event({"type": "reaction_added", "user": "U0ADA", "reaction": "eyes", "item": {}, "event_ts": "1.1"})
    await fake_slack.wait_for(lambda: fake_slack.acked(other))
    assert not fake_slack.acked(envelope)
    dispatcher.gate.set()
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))


async def test_dm_and_group_dm(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    await fake_slack.say("D0ADA", "U0ADA", "hi there")
    await fake_slack.say("G0TRIO", "U0BOB", "morning all")
    await eventually(lambda: len(dispatcher.accepted) == 2)
    dm, group = dispatcher.accepted
    assert dm.chat_kind is ChatKind.DM and not dm.mentioned and dm.thread is None and dm.text == "hi there"
    assert group.chat_kind is ChatKind.GROUP and group.sender.display_name == "Bob"


async def test_thread_reply_without_mention(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> start")
    # Handed over first: Ada's first message waits for her name (users.info), which a reply coming
    # the moment it is known would find cached and pass (a person replies in a thread seconds later).
    await eventually(lambda: dispatcher.accepted)
    answer_ts = await adapter.post_message(target(thread=root.ts), "Sure.")
    await fake_slack.say("C0GEN", "U0ADA", "and then?", thread_ts=root.ts)
    await eventually(lambda: len(dispatcher.accepted) == 2)
    follow_up = dispatcher.accepted[1]
    assert follow_up.thread == root.ts and not follow_up.mentioned and follow_up.text == "and then?"
    assert answer_ts != root.ts


async def test_mention_in_private_channel_asks_slack_for_the_kind(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    # app_mention has no channel_type; a G… id may be a group DM, which only conversations.info tells.
    msg, events = fake_slack.user_posts("G0TRIO", "U0ADA", "<@U0BOT> ping")
    await fake_slack.send_event(events[1])  # only the app_mention
    await eventually(lambda: dispatcher.accepted)
    assert dispatcher.accepted[0].chat_kind is ChatKind.GROUP
    assert [c.args["channel"] for c in fake_slack.calls_to("conversations.info")] == ["G0TRIO"]


async def test_files_are_named_to_the_core(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    files = [{"id": "F1", "name": "q3.csv", "title": "q3.csv", "mimetype": "text/csv", "filetype": "csv", "size": 2048, "url_private": "https://files.slack.test/q3.csv"}]
    await fake_slack.say("D0ADA", "U0ADA", "summarize this", files=files)
    await eventually(lambda: dispatcher.accepted)
    (attachment,) = dispatcher.accepted[0].attachments
    assert (attachment.name, attachment.mime_type, attachment.size) == ("q3.csv", "text/csv", 2048)


async def test_own_posts_echoed_back_are_acked_and_ignored(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    await adapter.post_message(target(), "I said something")
    echo = await fake_slack.wait_for(lambda: [e for e in fake_slack.sent_envelopes if e["payload"]["event"].get("bot_id") == "B0BOT"])
    await fake_slack.wait_for(lambda: fake_slack.acked(echo[0]["envelope_id"]))
    assert dispatcher.submitted == []


async def test_system_events_and_other_types_are_acked_not_submitted(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    envelopes = [
        await fake_slack.send_event({"type": "message", "subtype": "channel_join", "user": "U0BOB", "text": "<@U0BOB> has joined the channel", "channel": "C0GEN", "ts": "1.1", "channel_type": "channel"}),
        await fake_slack.send_event({"type": "message", "subtype": "message_deleted", "hidden": True, "channel": "C0GEN", "ts": "1.2", "deleted_ts": "1.1", "channel_type": "channel"}),
        await fake_slack.send_event({"type": "reaction_added", "user": "U0ADA", "reaction": "tada", "item": {"type": "message", "channel": "C0GEN", "ts": "1.1"}, "event_ts": "1.3"}),
        await fake_slack.send_event({"type": "member_joined_channel", "user": "U0BOB", "channel": "C0GEN", "channel_type": "C", "team": "T0TEAM"}),
        await fake_slack.send_event({"type": "message", "user": "U0777", "bot_id": "B0777", "text": "deploy done", "channel": "C0GEN", "ts": "1.4", "channel_type": "channel"}),
    ]
    await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in envelopes))
    assert dispatcher.submitted == []


async def test_malformed_input_is_dropped_and_the_adapter_keeps_working(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    await fake_slack.send_raw("this is not json")
    broken = [
        await fake_slack.send_event({"type": "message", "user": "U0ADA", "text": "no channel, no ts"}),
        await fake_slack.send_event({"type": "app_mention", "channel": "C0GEN", "user": "U0ADA"}),
        await fake_slack.send_envelope({"envelope_id": "env-no-event", "type": "events_api", "payload": {"type": "event_callback", "team_id": "T0TEAM", "event_id": "Ev1", "event": {"type": "message", "channel": "C0GEN", "ts": 5}}}),
    ]
    await fake_slack.wait_for(lambda: all(fake_slack.acked(e) for e in broken))
    await fake_slack.say("D0ADA", "U0ADA", "still there?")
    await eventually(lambda: dispatcher.accepted)
    assert [m.text for m in dispatcher.accepted] == ["still there?"]
    assert adapter.health().connected


async def test_a_frame_is_parsed_once(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher,
                                      monkeypatch) -> None:
    """Checking a frame must not parse it a second time: slack_sdk's listeners get the frame parsed
    where it was checked (each parse of a mention's frame ~17 us of the loop, bench/README.md)."""
    import json

    parsed: list[str] = []
    real_loads = json.loads

    def loads(s: str | bytes, *args: object, **kwargs: object) -> object:
        if isinstance(s, str) and "parse me once" in s:
            parsed.append(s)
        return real_loads(s, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(json, "loads", loads)
    _, (envelope,) = await fake_slack.say("D0ADA", "U0ADA", "parse me once")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    assert [m.text for m in dispatcher.accepted] == ["parse me once"]
    assert len(parsed) == 1


async def test_redelivery_with_retry_attempt_runs_nothing_new(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    _, events = fake_slack.user_posts("D0ADA", "U0ADA", "hello once")
    body = fake_slack.event_callback(events[0])
    first = await fake_slack.send_event(events[0], body=body)
    again = await fake_slack.send_event(events[0], body=body, retry_attempt=1)
    await fake_slack.wait_for(lambda: fake_slack.acked(first) and fake_slack.acked(again))
    # The redelivery waits for the first, then the core knows it: acked unread.
    assert len(dispatcher.submitted) == len(dispatcher.accepted) == 1 and dispatcher.dropped == [f"D0ADA:{events[0]['ts']}"]


async def test_reconnects_after_a_dropped_socket(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    await fake_slack.drop_connections()
    await fake_slack.wait_for(lambda: fake_slack.connections_opened >= 2)
    await eventually(lambda: adapter.health().connected)
    _, (envelope,) = await fake_slack.say("D0ADA", "U0ADA", "after the drop")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    assert [m.text for m in dispatcher.accepted] == ["after the drop"]
    assert len(fake_slack.calls_to("apps.connections.open")) >= 2  # a fresh URL each time


async def test_follows_a_disconnect_frame(fake_slack: FakeSlack, adapter: SlackAdapter, dispatcher: FakeDispatcher) -> None:
    await fake_slack.request_reconnect()
    await fake_slack.wait_for(lambda: fake_slack.connections_opened >= 2)
    _, (envelope,) = await fake_slack.say("D0ADA", "U0ADA", "after refresh")
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    assert [m.text for m in dispatcher.accepted] == ["after refresh"]


async def test_a_failing_connection_open_is_retried(fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> None:
    fake_slack.fail_next("apps.connections.open", status=500, error="internal_error", retry_after=None, times=2)
    adapter = await start_adapter(fake_slack, dispatcher)
    try:
        assert len(fake_slack.calls_to("apps.connections.open")) == 3
        assert adapter.health().connected
    finally:
        await adapter.stop()


async def test_missing_secret_shows_in_health_without_the_value(fake_slack: FakeSlack, dispatcher: FakeDispatcher, monkeypatch) -> None:
    from gateway.adapter_registry import AdapterContext
    from bindings.models import GatewayConfig

    from .conftest import slack_binding

    monkeypatch.delenv("TEST_SLACK_APP_TOKEN")
    adapter = SlackAdapter(slack_binding(fake_slack), AdapterContext(gateway=GatewayConfig()))
    await adapter.start(dispatcher)
    health = adapter.health()
    assert not health.connected and "TEST_SLACK_APP_TOKEN" in health.detail
    assert "xoxb" not in health.detail
    await adapter.stop()
    assert fake_slack.calls == []


async def test_a_wrong_token_shows_in_health(fake_slack: FakeSlack, dispatcher: FakeDispatcher, monkeypatch) -> None:
    from gateway.adapter_registry import AdapterContext
    from bindings.models import GatewayConfig

    from .conftest import slack_binding

    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", "xoxb-revoked")
    adapter = SlackAdapter(slack_binding(fake_slack), AdapterContext(gateway=GatewayConfig()))
    await adapter.start(dispatcher)
    try:
        await eventually(lambda: "invalid_auth" in adapter.health().detail)
        assert not adapter.health().connected and "xoxb" not in adapter.health().detail
    finally:
        await adapter.stop()


async def test_no_secret_reaches_a_log_line(fake_slack: FakeSlack, dispatcher: FakeDispatcher, caplog) -> None:
    import logging

    from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET

    caplog.set_level(logging.DEBUG)
    adapter = await start_adapter(fake_slack, dispatcher)
    try:
        await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> hi")
        await eventually(lambda: dispatcher.accepted)
        await adapter.post_message(target(), "reply")
        await fake_slack.request_reconnect()
        await fake_slack.wait_for(lambda: fake_slack.connections_opened >= 2)
    finally:
        await adapter.stop()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "apps.connections.open" in logged or "auth.test" in logged  # debug logging was on
    for secret in (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET):
        assert secret not in logged


async def test_opening_a_binding_does_not_walk_the_call_stack(fake_slack: FakeSlack, dispatcher: FakeDispatcher,
                                                              monkeypatch) -> None:
    """Bolt names an unnamed app after its caller's file through `inspect.stack()`, which resolves the real
    path of every loaded module's file: 40-65 ms of the daemon's start before READY (bench/README.md).
    The adapter names its app, so a start never gets there; it still connects."""
    import inspect

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect.stack() called while a Slack binding opened")

    monkeypatch.setattr(inspect, "stack", refuse)
    adapter = await start_adapter(fake_slack, dispatcher)
    try:
        assert adapter.health().connected
    finally:
        await adapter.stop()
