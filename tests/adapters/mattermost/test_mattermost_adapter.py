"""The adapter against the fake server: what reaches the core, and what people see in the chat."""

from __future__ import annotations

import json
import time
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from gateway.clock import ManualClock
from gateway.messages import ChatKind
from gateway.outbound.adapter import (
    ApprovalCard,
    ApprovalItem,
    Decision,
    ItemState,
    NotVisible,
    PlatformError,
    RateLimited,
    ReplyTarget,
)
from tests.fakes.mattermost import wait_until
from tests.support.patience import AUTOJUMP

from .conftest import BOT_TOKEN, World
from tests.support.dispatcher import FakeDispatcher

from .helpers import free_socket, make_adapter, serve_routes, target_for


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_TOKEN", BOT_TOKEN)


@pytest.fixture
def core() -> FakeDispatcher:
    return FakeDispatcher()


@pytest.fixture
async def adapter(world: World, core: FakeDispatcher) -> AsyncIterator[MattermostAdapter]:
    a = make_adapter(world.url)
    await a.start(core)
    await wait_until(lambda: a.health().connected)
    try:
        yield a
    finally:
        await a.stop()


async def _sentinel(world: World, core: FakeDispatcher) -> None:
    """Post a DM and wait until the core has it: everything sent before it has been handled."""
    await world.fake.user_post(world.alice["id"], world.dm["id"], "sentinel")
    await wait_until(lambda: "sentinel" in core.texts())


async def test_connects_and_reports_health(world: World, adapter: MattermostAdapter) -> None:
    health = adapter.health()
    assert health.connected and "@agentbot" in health.detail


async def test_a_dm_reaches_the_core_and_the_reply_lands_in_the_dm(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    post = await world.fake.user_post(world.alice["id"], world.dm["id"], "hello bot")
    (msg,) = await wait_until(lambda: core.submitted)
    assert (msg.chat_kind, msg.mentioned, msg.thread) == (ChatKind.DM, True, None)
    assert msg.workspace == world.url.removeprefix("http://")  # the server: ids are server-wide
    assert (msg.sender.account_id, msg.sender.display_name, msg.event_id) == (world.alice["id"], "alice", post["id"])
    reply_id = await adapter.post_message(target_for(msg), "Hello Alice")
    reply = world.fake.posts[reply_id]
    assert (reply["channel_id"], reply["root_id"], reply["message"]) == (world.dm["id"], "", "Hello Alice")


async def test_a_channel_mention_gets_one_threaded_reply_edited_in_place(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot summarise the week")
    (msg,) = await wait_until(lambda: core.submitted)
    assert (msg.chat_kind, msg.mentioned, msg.text) == (ChatKind.CHANNEL, True, "summarise the week")
    assert msg.workspace == world.url.removeprefix("http://")  # the same workspace as in a DM
    target = target_for(msg)
    reply_id = await adapter.post_message(target, "Working")
    await adapter.edit_message(target, reply_id, "Working on it")
    await adapter.edit_message(target, reply_id, "Done: a quiet week.")
    assert world.fake.posts[reply_id]["root_id"] == root["id"]
    assert world.fake.history(reply_id) == ["Working", "Working on it", "Done: a quiet week."]
    assert [p["id"] for p in world.fake.posts_by(world.bot["id"])] == [reply_id]
    await _sentinel(world, core)
    assert core.texts() == ["summarise the week", "sentinel"]  # its own posts and edits never come back in


async def test_a_thread_the_bot_is_in_continues_without_a_mention(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot start")
    await wait_until(lambda: core.submitted)
    await adapter.post_message(target_for(core.submitted[0]), "Started.")
    await world.fake.user_post(world.alice["id"], world.town["id"], "and next?", root_id=root["id"])
    other = await world.fake.user_post(world.bob["id"], world.town["id"], "unrelated thread")
    await world.fake.user_post(world.alice["id"], world.town["id"], "me too", root_id=other["id"])
    await _sentinel(world, core)
    by_text = {m.text: m for m in core.submitted}
    assert (by_text["and next?"].thread, by_text["and next?"].reply_to_bot, by_text["and next?"].mentioned) == (
        root["id"], True, False)
    assert by_text["me too"].reply_to_bot is False
    assert target_for(by_text["and next?"]).thread == root["id"]


async def test_after_a_restart_the_thread_is_looked_up(world: World, core: FakeDispatcher) -> None:
    root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot hi")
    await world.fake.user_post(world.bot["id"], world.town["id"], "Hi!", root_id=root["id"])
    fresh = make_adapter(world.url)
    await fresh.start(core)
    try:
        await wait_until(lambda: fresh.health().connected)
        await world.fake.user_post(world.alice["id"], world.town["id"], "follow-up", root_id=root["id"])
        (msg,) = await wait_until(lambda: core.submitted)
        assert msg.reply_to_bot is True
    finally:
        await fresh.stop()


async def test_own_bot_system_and_foreign_team_posts_are_not_handed_over(world: World, core: FakeDispatcher) -> None:
    a = make_adapter(world.url, mattermost={"teams": ["acme"]})
    await a.start(core)
    try:
        await wait_until(lambda: a.health().connected)
        await world.fake.user_post(world.bot["id"], world.town["id"], "my own words")
        await world.fake.user_post(world.other_bot["id"], world.town["id"], "@agentbot beep")
        await world.fake.user_post(world.alice["id"], world.town["id"], "alice joined", type="system_join_channel")
        await world.fake.user_post(world.bob["id"], world.elsewhere["id"], "@agentbot from umbrella")
        await world.fake.user_post(world.alice["id"], world.group["id"], "@agentbot in the group")
        await _sentinel(world, core)
        assert core.texts() == ["in the group", "sentinel"]
        assert core.submitted[0].chat_kind is ChatKind.GROUP and core.submitted[0].mentioned
    finally:
        await a.stop()


async def test_a_redelivered_post_carries_the_same_event_id(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    post = await world.fake.user_post(world.alice["id"], world.dm["id"], "once only")
    await wait_until(lambda: core.submitted)
    await world.fake.redeliver(post["id"])
    await wait_until(lambda: len(core.submitted) == 2)
    assert [m.event_id for m in core.submitted] == [post["id"], post["id"]]


async def test_a_malformed_event_is_dropped_and_the_adapter_carries_on(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        await world.fake.push_event(world.bot["id"], "posted", {"channel_type": "O", "post": "{broken"})
        await world.fake.push_event(world.bot["id"], "reaction_added", {"reaction": 42})
        await _sentinel(world, core)
    assert core.texts() == ["sentinel"]
    assert "malformed posted event" in caplog.text and adapter.health().connected


async def test_a_dropped_websocket_resumes_and_misses_nothing(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    await world.fake.drop_websockets()
    await world.fake.user_post(world.alice["id"], world.dm["id"], "said while you were away")
    await wait_until(lambda: "said while you were away" in core.texts())
    assert world.fake.websocket_connects == 2 and world.fake.websocket_resumes == 1 and adapter.health().connected
    # A server restart loses the queue: a new hello, and the new stream is followed.
    await world.fake.drop_websockets(forget=True)
    await wait_until(lambda: world.fake.live_websockets() == 1)
    await world.fake.user_post(world.alice["id"], world.dm["id"], "after the restart")
    await wait_until(lambda: "after the restart" in core.texts())
    # The fresh stream's catch-up may fetch recent posts a second time: the ledger takes each once.
    assert set(core.texts()) == {"said while you were away", "after the restart"}
    assert world.fake.websocket_resumes == 1  # the restarted server could not resume: a fresh stream


async def test_429_becomes_rate_limited_with_the_servers_wait(world: World, core: FakeDispatcher) -> None:
    # The server's 7 s on a clock the adapter and the fake share, which jumps to it once all is quiet.
    world.fake.clock = clock = ManualClock(autojump=AUTOJUMP)
    adapter = make_adapter(world.url, clock=clock)
    clock.idle = lambda: adapter.server_limit is None or adapter.server_limit.in_flight == 0
    await adapter.start(core)
    await wait_until(lambda: adapter.health().connected)
    try:
        target = ReplyTarget("mattermost", "mm", "", world.dm["id"], None, ChatKind.DM)
        world.fake.rate_limit("POST", r"^/api/v4/posts$", reset=7)
        with pytest.raises(RateLimited) as info:
            await adapter.post_message(target, "too fast")
        assert info.value.retry_after == 7
        post_id = await adapter.post_message(target, "after waiting")
        refused, posted = [at for (method, path, _), at in zip(world.fake.requests, world.fake.request_times,
                                                               strict=True) if (method, path) == ("POST", "/api/v4/posts")]
        assert posted - refused >= 7, "the next call waited out the server's reset"
        world.fake.rate_limit("PUT", r"/patch$", reset=2)
        with pytest.raises(RateLimited):
            await adapter.edit_message(target, post_id, "edit too fast")
        assert [p["message"] for p in world.fake.posts_by(world.bot["id"])] == ["after waiting"]
    finally:
        await adapter.stop()


async def test_a_create_cut_off_mid_call_is_retried_without_a_duplicate(world: World, adapter: MattermostAdapter) -> None:
    target = ReplyTarget("mattermost", "mm", "", world.dm["id"], None, ChatKind.DM)
    world.fake.break_after_create = 1
    post_id = await adapter.post_message(target, "exactly once")
    assert [p["id"] for p in world.fake.posts_by(world.bot["id"])] == [post_id]
    assert len(world.fake.calls("POST", r"^/api/v4/posts$")) == 2


async def test_after_stop_calls_fail_as_platform_errors(world: World, core: FakeDispatcher) -> None:
    a = make_adapter(world.url)
    await a.start(core)
    await a.stop()
    with pytest.raises(PlatformError):
        await a.edit_message(ReplyTarget("mattermost", "mm", "", world.dm["id"], None, ChatKind.DM), "x", "late")


async def test_a_message_over_the_limit_is_refused_by_the_server(world: World, adapter: MattermostAdapter) -> None:
    target = ReplyTarget("mattermost", "mm", "", world.dm["id"], None, ChatKind.DM)
    assert adapter.limits.max_message_chars == 16_383
    await adapter.post_message(target, "x" * 16_383)
    with pytest.raises(PlatformError):
        await adapter.post_message(target, "x" * 16_384)


async def test_typing_goes_over_the_websocket(world: World, adapter: MattermostAdapter) -> None:
    await adapter.show_typing(ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], "root1", ChatKind.CHANNEL))
    typing = await wait_until(lambda: world.fake.typing)
    assert typing == [{"user_id": world.bot["id"], "channel_id": world.town["id"], "parent_id": "root1", "via": "websocket"}]


async def test_tell_privately_is_a_dm(world: World, adapter: MattermostAdapter) -> None:
    target = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], None, ChatKind.CHANNEL)
    await adapter.tell_privately(target, world.bob["id"], "only for you")
    (post,) = world.fake.posts_by(world.bot["id"])
    channel = world.fake.channels[post["channel_id"]]
    assert channel["type"] == "D" and set(world.fake.members[channel["id"]]) == {world.bot["id"], world.bob["id"]}
    assert world.fake.calls("POST", r"/posts/ephemeral") == []


async def test_a_bad_token_shows_in_health_and_never_in_logs(
    world: World, core: FakeDispatcher, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MM_TOKEN", "wrong-secret-token")
    a = make_adapter(world.url)
    with caplog.at_level(logging.DEBUG):
        await a.start(core)
        await wait_until(lambda: "401" in a.health().detail)
        await a.stop()
    assert not a.health().connected
    assert "wrong-secret-token" not in caplog.text


# --- approvals ----------------------------------------------------------------------------

def _card(state: ItemState = ItemState.PENDING, decided_by: str | None = None) -> ApprovalCard:
    items = (
        ApprovalItem("ap-7f3k2x9q", "delete_file", "files", '{\n  "path": "/srv/report.pdf"\n}', state, decided_by),
        ApprovalItem("ap-m2n8v1c4", "send_mail", "mail", '{\n  "to": "ops@example.com"\n}', state, decided_by),
    )
    return ApprovalCard("card-9z8y7x", "run-1", items, "only alice can decide")


async def test_approval_by_button_with_valid_and_forged_signatures(world: World) -> None:
    core = FakeDispatcher(deciders={world.alice["id"]}, refusal="Only alice can decide this.")
    sock = free_socket()
    public_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    adapter = make_adapter(world.url, public_url=public_url)
    target = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], None, ChatKind.CHANNEL)

    async def core_updates_the_card(call: object) -> None:
        decided = {c.approval_id: c for c in core.clicks}
        items = tuple(
            ApprovalItem(i.approval_id, i.tool_name, i.capability, i.arguments,
                         ItemState.APPROVED if i.approval_id in decided else ItemState.PENDING,
                         "alice" if i.approval_id in decided else None)
            for i in _card().items
        )
        await adapter.update_card(target, card_id, ApprovalCard("card-9z8y7x", "run-1", items, "only alice can decide"))

    core.on_accepted = core_updates_the_card
    async with serve_routes(adapter, sock):
        await adapter.start(core)
        try:
            await wait_until(lambda: adapter.health().connected)
            card_id = await adapter.post_card(target, _card())
            buttons = world.fake.buttons(card_id)
            assert [b["id"] for b in buttons] == ["approve1", "deny1", "approve2", "deny2", "approveall"]
            assert all(b["type"] == "button" and b["id"].isalnum() for b in buttons)
            assert "delete_file" in world.fake.posts[card_id]["message"]
            # Nobody reading the post sees where the buttons lead or what they carry.
            fetched = world.fake.client_post(world.fake.posts[card_id])
            assert "ap-7f3k2x9q" not in json.dumps(fetched)

            # Bob may not decide: he alone is told so, and the card stays as it was.
            result = await world.fake.click(world.bob["id"], card_id, "approve1")
            assert result.status == 200 and result.ephemeral_text == "Only alice can decide this."
            assert world.fake.ephemerals[-1]["user_id"] == world.bob["id"]
            assert len(world.fake.buttons(card_id)) == 5

            # A forged request: a real context with its decision flipped, and one with no signature.
            real = world.fake.posts[card_id]["props"]["attachments"][0]["actions"][1]["integration"]["context"]
            forged = [{**real, "decision": "approve"}, {"approval_id": "ap-7f3k2x9q", "decision": "approve"}]
            async with aiohttp.ClientSession() as s:
                for context in forged:
                    body = {"user_id": world.alice["id"], "user_name": "alice", "channel_id": world.town["id"],
                            "post_id": card_id, "trigger_id": "t", "type": "button", "context": context}
                    async with s.post(f"{public_url}/mattermost/actions/mm", json=body) as resp:
                        assert resp.status == 401
                # Someone else's signed context replayed into another channel is refused too.
                body = {"user_id": world.alice["id"], "channel_id": world.dm["id"], "context": real}
                async with s.post(f"{public_url}/mattermost/actions/mm", json=body) as resp:
                    assert resp.status == 401
            assert [c.decider.account_id for c in core.clicks] == [world.bob["id"]]

            # Alice approves the first call: the core updates the card, its buttons go.
            result = await world.fake.click(world.alice["id"], card_id, "approve1")
            assert result.status == 200 and result.ephemeral_text == ""
            last = core.clicks[-1]
            assert (last.approval_id, last.decision, last.decider.display_name, last.surface, last.binding_id) == (
                "ap-7f3k2x9q", Decision.APPROVE, "alice", "mattermost", "mm")
            assert [b["id"] for b in world.fake.buttons(card_id)] == ["approve2", "deny2", "approveall"]
            assert "Approved by alice" in world.fake.posts[card_id]["message"]
        finally:
            await adapter.stop()


async def test_a_decided_card_has_no_buttons_left(world: World, core: FakeDispatcher) -> None:
    adapter = make_adapter(world.url, public_url="https://gateway.example")
    await adapter.start(core)
    try:
        target = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], None, ChatKind.CHANNEL)
        card_id = await adapter.post_card(target, _card())
        assert world.fake.buttons(card_id)
        actions = world.fake.posts[card_id]["props"]["attachments"][0]["actions"]
        assert actions[0]["integration"]["url"] == "https://gateway.example/mattermost/actions/mm"
        await adapter.update_card(target, card_id, _card(ItemState.DENIED, "alice"))
        post = world.fake.posts[card_id]
        assert post["props"] == {} and "Denied by alice" in post["message"]
        assert "only alice can decide" not in post["message"]
    finally:
        await adapter.stop()


async def test_approval_by_reaction_without_a_public_url(world: World) -> None:
    core = FakeDispatcher(deciders={world.alice["id"]}, refusal="Only alice can decide this.")
    adapter = make_adapter(world.url)
    await adapter.start(core)
    try:
        await wait_until(lambda: adapter.health().connected)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot clean up")
        target = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], root["id"], ChatKind.CHANNEL)
        card_id = await adapter.post_card(target, _card())
        post = world.fake.posts[card_id]
        assert post["root_id"] == root["id"] and world.fake.buttons(card_id) == []
        assert ":+1:" in post["message"] and ":-1:" in post["message"]

        await world.fake.react(world.alice["id"], card_id, "smile")  # not a decision
        await world.fake.react(world.alice["id"], root["id"], "+1")  # not a card
        await world.fake.react(world.bob["id"], card_id, "+1")  # may not decide
        await world.fake.react(world.alice["id"], card_id, "-1")
        await wait_until(lambda: len(core.decided) == 2)
        assert [(c.decider.account_id, c.decision) for c in core.clicks] == [
            (world.bob["id"], Decision.APPROVE), (world.bob["id"], Decision.APPROVE),
            (world.alice["id"], Decision.DENY), (world.alice["id"], Decision.DENY)]
        assert {c.approval_id for c in core.clicks} == {"ap-7f3k2x9q", "ap-m2n8v1c4"}
    finally:
        await adapter.stop()


# --- channel tools ------------------------------------------------------------------------

async def test_a_channel_the_bot_cannot_see_is_not_visible(world: World, adapter: MattermostAdapter) -> None:
    directory = adapter.directory()
    assert directory is not None
    gone = ReplyTarget("mattermost", "mm", world.team["id"], "nosuchchannel0000000000000", None, ChatKind.CHANNEL)
    with pytest.raises(NotVisible):  # bad news for the channel tools, not a fault to retry
        await directory.channel_info(gone)


async def test_the_directory_answers_all_four_questions(world: World, adapter: MattermostAdapter) -> None:
    directory = adapter.directory()
    assert directory is not None and directory.supported == {
        "get_channel_info", "list_channel_members", "search_channels", "read_channel_history"}
    town = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], None, ChatKind.CHANNEL)

    info = await directory.channel_info(town)
    assert (info.name, info.purpose, info.topic, info.member_count, info.is_private) == (
        "Town Square", "Company-wide chatter", "Be kind", 4, False)

    members, cut = await directory.channel_members(town, 2)
    assert [(m.name, m.is_bot) for m in members] == [("agentbot", True), ("alice", False)] and cut
    members, cut = await directory.channel_members(town, 10)
    assert [m.name for m in members] == ["agentbot", "alice", "bob", "otherbot"] and not cut
    assert members[2].display_name == "Bobby"

    found, cut = await directory.search_channels(town, "shipping", 5)
    assert [c.name for c in found] == ["Release Train"] and not cut
    from_dm = ReplyTarget("mattermost", "mm", "", world.dm["id"], None, ChatKind.DM)
    found, cut = await directory.search_channels(from_dm, "o", 1)  # a DM has no team: the bot's teams
    assert len(found) == 1 and cut
    found, _ = await directory.search_channels(town, "plans", 5)
    assert found == []  # private channels are not searchable

    for i in range(4):
        await world.fake.user_post(world.alice["id"], world.town["id"], f"note {i}")
    root = await world.fake.user_post(world.bob["id"], world.town["id"], "a thread")
    await world.fake.user_post(world.alice["id"], world.town["id"], "a reply", root_id=root["id"])
    history, cut = await directory.channel_history(town, 3)
    assert [(h.author, h.text) for h in history] == [("alice", "note 3"), ("bob", "a thread"), ("alice", "a reply")]
    assert cut
    thread = ReplyTarget("mattermost", "mm", world.team["id"], world.town["id"], root["id"], ChatKind.CHANNEL)
    history, cut = await directory.channel_history(thread, 10)
    assert [(h.author, h.text) for h in history] == [("bob", "a thread"), ("alice", "a reply")] and not cut


async def test_a_stream_the_server_cannot_resume_is_caught_up_over_rest(
    world: World, adapter: MattermostAdapter, core: FakeDispatcher
) -> None:
    """The server restarted (its resume queue gone) and the bot was away while people posted:
    the new stream's hello is followed by a REST catch-up, so nothing said meanwhile is missed."""
    await _sentinel(world, core)
    world.fake.rate_limit("GET", r"^/api/v4/websocket$", times=2)  # away for a while
    await world.fake.drop_websockets(forget=True)
    await world.fake.user_post(world.alice["id"], world.dm["id"], "said while the server restarted")
    await world.fake.user_post(world.bob["id"], world.town["id"], f"@{world.bot['username']} and in town")
    await world.fake.user_post(world.bob["id"], world.town["id"], "chatter that does not address the bot")
    await wait_until(lambda: "and in town" in core.texts(), timeout=20)
    await wait_until(lambda: "said while the server restarted" in core.texts(), timeout=20)
    assert world.fake.websocket_resumes == 0  # a fresh stream: only the catch-up could find these
    # A drop the server can resume is not caught up again: nothing older comes back.
    before = core.texts().count("said while the server restarted")
    await world.fake.drop_websockets()
    await world.fake.user_post(world.alice["id"], world.dm["id"], "after a drop the server resumed")
    await wait_until(lambda: "after a drop the server resumed" in core.texts())
    assert world.fake.websocket_resumes == 1
    assert core.texts().count("said while the server restarted") == before


async def test_a_catch_up_still_owed_at_stop_is_owed_by_the_next_start(world: World, core: FakeDispatcher) -> None:
    """The daemon was down, and the catch-up at its start fails (the server keeps refusing the channel
    list) while live posts go on: where it stopped reading stays where the catch-up must start, so
    the posts of the outage are not skipped by the next start."""
    earlier = str(int(time.time() * 1000) - 600_000)  # ten minutes ago, as the last process left it
    core.state[("mm", "seen_at_ms")] = core.state[("mm", "reading_since_ms")] = earlier
    world.fake.rate_limit("GET", r"/users/[^/]+/teams/[^/]+/channels$", times=1000)
    a = make_adapter(world.url)
    await a.start(core)
    try:
        await wait_until(lambda: a.health().connected)
        await _sentinel(world, core)  # live posts are handled meanwhile
    finally:
        await a.stop()
    assert core.state[("mm", "seen_at_ms")] == earlier
