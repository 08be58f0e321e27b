"""posted events -> InboundMessage, as a table (pure: no server involved)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.mattermost.normalize import (
    MalformedEvent,
    NormalizeContext,
    Skip,
    normalize_post,
    parse_posted,
    parse_reaction,
    strip_mention,
)
from gateway.messages import ChatKind

BOT, ALICE, TEAM = "botid000000000000000000000", "aliceid0000000000000000000", "teamid00000000000000000000"
CTX = NormalizeContext(binding_id="mm", bot_user_id=BOT, bot_username="agentbot", workspace="mm.test",
                       base_url="http://mm.test")


def frame(message: str, *, channel_type: str = "O", user: str = ALICE, root: str = "", mentions: list[str] | None = None,
          props: dict[str, Any] | None = None, post_type: str = "", team: str | None = None, **post: Any) -> dict[str, Any]:
    p = {"id": "post1", "create_at": 1, "update_at": 1, "edit_at": 0, "delete_at": 0, "user_id": user,
         "channel_id": "chan1", "root_id": root, "message": message, "type": post_type, "props": props or {}, **post}
    data: dict[str, Any] = {"channel_type": channel_type, "channel_name": "town-square", "post": json.dumps(p),
                            "sender_name": "@alice",
                            "team_id": team if team is not None else ("" if channel_type in "DG" else TEAM)}
    if mentions:
        data["mentions"] = json.dumps(mentions)
    return {"event": "posted", "data": data, "broadcast": {"channel_id": "chan1"}, "seq": 5}


# (id, frame, context, expected fields or the skip reason)
CASES: list[tuple[str, dict[str, Any], NormalizeContext, dict[str, Any] | str]] = [
    ("dm is always addressed", frame("hello", channel_type="D", mentions=[BOT]), CTX,
     {"chat_kind": ChatKind.DM, "mentioned": True, "text": "hello", "workspace": "mm.test", "thread": None}),
    ("channel mention is stripped", frame("@agentbot: what's up?", mentions=[BOT]), CTX,
     {"chat_kind": ChatKind.CHANNEL, "mentioned": True, "text": "what's up?", "workspace": "mm.test"}),
    ("mention mid-sentence", frame("hey @AgentBot, summarise this", mentions=[BOT]), CTX,
     {"mentioned": True, "text": "hey summarise this"}),
    ("channel without mention", frame("just chatting"), CTX, {"mentioned": False, "text": "just chatting"}),
    ("@channel puts everyone in mentions but does not address the bot", frame("@channel lunch!", mentions=[BOT]), CTX,
     {"mentioned": False}),
    ("group dm names every member in mentions", frame("hi all", channel_type="G", mentions=[BOT]), CTX,
     {"chat_kind": ChatKind.GROUP, "mentioned": False, "workspace": "mm.test"}),
    ("group dm with an explicit mention", frame("@agentbot help", channel_type="G", mentions=[BOT]), CTX,
     {"chat_kind": ChatKind.GROUP, "mentioned": True, "text": "help"}),
    ("private channel is a channel", frame("@agentbot hi", channel_type="P", mentions=[BOT]), CTX,
     {"chat_kind": ChatKind.CHANNEL, "mentioned": True}),
    ("thread reply carries the root", frame("and then?", root="root1"), CTX, {"thread": "root1", "mentioned": False}),
    ("the post id is the event id", frame("x"), CTX, {"event_id": "post1", "message_id": "post1", "is_edit": False}),
    ("a longer username is not the bot", frame("@agentbotx hi"), CTX, {"mentioned": False, "text": "@agentbotx hi"}),
    ("an email address is not a mention", frame("mail me at ops@agentbot.example"), CTX, {"mentioned": False}),
    ("sender", frame("x"), CTX, {"sender.account_id": ALICE, "sender.display_name": "alice", "sender.is_bot": False}),
    ("files are named", frame("see file", metadata={"files": [{"id": "f1", "name": "plan.pdf", "mime_type": "application/pdf",
                                                              "size": 12}]}), CTX,
     {"attachments": "plan.pdf|application/pdf|12|http://mm.test/api/v4/files/f1"}),
    ("own post", frame("@agentbot hi", user=BOT), CTX, "own post"),
    ("system post", frame("alice joined", post_type="system_join_channel"), CTX, "system post"),
    ("deleted post", frame("gone", delete_at=5), CTX, "deleted post"),
    ("other bot", frame("@agentbot ping", props={"from_bot": "true"}), CTX, "from a bot or integration"),
    ("webhook", frame("@agentbot ping", props={"from_webhook": "true"}), CTX, "from a bot or integration"),
    ("other bot kept when the binding wants bots", frame("@agentbot ping", props={"from_bot": "true"}),
     NormalizeContext("mm", BOT, "agentbot", ignore_bots=False), {"sender.is_bot": True, "mentioned": True}),
    ("team not served", frame("@agentbot hi", team="elsewhere", mentions=[BOT]),
     NormalizeContext("mm", BOT, "agentbot", team_ids=frozenset({TEAM})), "team not served by this binding"),
    ("dm is not in a team, so the team filter lets it through", frame("hi", channel_type="D"),
     NormalizeContext("mm", BOT, "agentbot", team_ids=frozenset({TEAM})), {"chat_kind": ChatKind.DM}),
]


def _field(msg: Any, path: str) -> Any:
    for part in path.split("."):
        msg = getattr(msg, part)
    if path == "attachments":
        return ",".join(f"{a.name}|{a.mime_type}|{a.size}|{a.url}" for a in msg)
    return msg


@pytest.mark.parametrize(("frame_", "ctx", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_posted(frame_: dict[str, Any], ctx: NormalizeContext, expected: dict[str, Any] | str) -> None:
    result = normalize_post(parse_posted(frame_), ctx)
    if isinstance(expected, str):
        assert result == Skip(expected)
        return
    assert not isinstance(result, Skip)
    assert result.platform == "mattermost" and result.binding_id == "mm" and result.channel == "chan1"
    assert {k: _field(result, k) for k in expected} == expected


def test_an_edit_has_its_own_event_id() -> None:
    result = normalize_post(parse_posted(frame("fixed typo", edit_at=99)), CTX, is_edit=True)
    assert not isinstance(result, Skip)
    assert (result.event_id, result.message_id, result.is_edit) == ("post1:edit:99", "post1", True)


@pytest.mark.parametrize("bad", [
    {"event": "posted"},
    {"event": "posted", "data": {"channel_type": "O", "post": "{not json"}},
    {"event": "posted", "data": {"channel_type": "O", "post": "[1, 2]"}},
    {"event": "posted", "data": {"channel_type": "X", "post": json.dumps({"id": "p", "user_id": "u", "channel_id": "c"})}},
    {"event": "posted", "data": {"channel_type": "O", "post": json.dumps({"id": "p", "user_id": "u", "channel_id": "c"}),
                                 "mentions": "nope"}},
])
def test_malformed_events_raise_the_one_error_the_adapter_drops(bad: dict[str, Any]) -> None:
    with pytest.raises(MalformedEvent):
        normalize_post(parse_posted(bad), CTX)


def test_a_post_without_ids_is_malformed() -> None:
    with pytest.raises(MalformedEvent):
        normalize_post(parse_posted(frame("x", id="")), CTX)


def test_reaction_frames() -> None:
    reaction = {"user_id": ALICE, "post_id": "p1", "emoji_name": "+1", "create_at": 1}
    assert parse_reaction({"data": {"reaction": json.dumps(reaction)}})["emoji_name"] == "+1"
    with pytest.raises(MalformedEvent):
        parse_reaction({"data": {"reaction": json.dumps({"user_id": ALICE})}})


@pytest.mark.parametrize(("text", "stripped"), [
    ("@agentbot hello", "hello"),
    ("@agentbot, hello", "hello"),
    ("hello @agentbot", "hello"),
    ("hello @agentbot.", "hello ."),
    ("@agentbot", ""),
])
def test_strip_mention(text: str, stripped: str) -> None:
    assert strip_mention(text, "agentbot") == stripped
