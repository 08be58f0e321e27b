"""Through the real daemon: the fake Mattermost, the adapter, the core, a SQLite file, a scripted model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from capabilities.registry import REGISTRY, CapabilityDecl, ToolDecl, register, simple

from gateway.clock import Clock, ManualClock
from gateway.daemon import Gateway
from gateway.runs.llm import REGISTERED, register_model
from gateway.outbound.adapter import PlatformLimits
from tests.conftest import free_port, running_gateway, wait_for, write_config
from tests.support.patience import AUTOJUMP
from tests.support.settled import settled

from .conftest import BOT_TOKEN, World

MODEL = "mattermost-e2e-scripted"


class Script:
    """A streaming model that says which turn of the conversation it is answering, and asks to
    delete a file when told to (a side-effecting tool: the run parks for approval). It waits
    between pieces on `clock`: a test that runs the gateway on a ManualClock gives it that one."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.clock = Clock()

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        last = messages[-1]
        results = [p for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))] if isinstance(
            last, ModelRequest) else []
        if results:
            part = results[0]
            said = part.model_response() if isinstance(part, RetryPromptPart) else str(part.content)
            yield f"The tool said: {said}"
            return
        prompts = [p.content for m in messages if isinstance(m, ModelRequest)
                   for p in m.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
        self.prompts.append(prompts[-1])
        if "delete" in prompts[-1] and info.function_tools:
            yield {0: DeltaToolCall(name="delete_file", json_args=json.dumps({"path": "/srv/report.pdf"}))}
            return
        for piece in (f"Turn {len(prompts)}. ", "You said: ", prompts[-1]):
            yield piece
            await self.clock.sleep(0.08)  # long enough for the (test-paced) edits to show each piece


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Iterator[Script]:
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    s = Script()
    register_model(MODEL, lambda: FunctionModel(stream_function=s.stream, model_name=MODEL))
    yield s
    REGISTERED.pop(MODEL, None)


DELETED: list[str] = []  # what the side-effecting test tool actually did


def delete_file(path: str) -> str:
    """Delete a file (in this test: only records that it ran)."""
    DELETED.append(path)
    return f"deleted {path}"


@pytest.fixture
def files_capability() -> Iterator[list[str]]:
    DELETED.clear()
    register(CapabilityDecl(
        id="mm_e2e_files", name="Files (test)", category="test", tools=(ToolDecl("delete_file", side_effecting=True),),
        build=lambda ctx: simple(tools=[delete_file]),
    ))
    yield DELETED
    REGISTRY.pop("mm_e2e_files", None)


def _config(tmp_path: Path, world: World, *, gateway: dict[str, Any] | None = None, **binding: Any) -> Path:
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Mattermost test agent", "model": MODEL,
                              "capabilities": [{"id": "mm_e2e_files"}] if "mm_e2e_files" in REGISTRY else []}},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}, **binding}},
        gateway=gateway,
    )



async def _connected(gw: Gateway) -> None:
    # Edits every 50 ms instead of every second, so a short test reply shows several edits.
    gw.adapters["mm"].limits = PlatformLimits(max_message_chars=16_383, min_edit_interval=0.05)  # type: ignore[misc]
    await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")


def _bot_posts(world: World, channel: dict[str, Any], root_id: str | None = None) -> list[dict[str, Any]]:
    return [p for p in world.fake.posts_in(channel["id"], root_id=root_id) if p["user_id"] == world.bot["id"]]


async def test_mention_gets_a_threaded_streamed_reply_and_the_thread_continues(
    tmp_path: Path, world: World, script: Script
) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot summarise the week")
        (reply,) = await wait_for(lambda: [p for p in _bot_posts(world, world.town, root["id"])
                                           if p["message"].endswith("summarise the week")], what="the reply")
        assert reply["root_id"] == root["id"]
        history = world.fake.history(reply["id"])
        assert len(history) >= 2 and history[0] != history[-1], "the reply is one post edited as it streams"
        assert history[-1] == "Turn 1. You said: alice: summarise the week"
        assert any(t["channel_id"] == world.town["id"] and t["parent_id"] == root["id"] for t in world.fake.typing)

        # A reply in the thread, without a mention: the same conversation, answered in the thread.
        await world.fake.user_post(world.alice["id"], world.town["id"], "and the week before?", root_id=root["id"])
        await wait_for(lambda: len(_bot_posts(world, world.town, root["id"])) == 2
                       and _bot_posts(world, world.town, root["id"])[1]["message"].startswith("Turn 2."),
                       what="the second answer")
        # Chatter outside the thread is not for the bot.
        await world.fake.user_post(world.bob["id"], world.town["id"], "lunch anyone?")
        await world.fake.user_post(world.alice["id"], world.dm["id"], "ping")
        await wait_for(lambda: [p for p in _bot_posts(world, world.dm) if p["message"] == "Turn 1. You said: ping"],
                       what="the DM answer")
        assert script.prompts == ["alice: summarise the week", "alice: and the week before?", "ping"]
        assert len(_bot_posts(world, world.town)) == 2


async def test_a_dm_is_answered_at_the_top_of_the_dm(tmp_path: Path, world: World, script: Script) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        await world.fake.user_post(world.alice["id"], world.dm["id"], "hello there")
        (reply,) = await wait_for(lambda: [p for p in _bot_posts(world, world.dm) if p["message"].endswith("hello there")])
        assert reply["root_id"] == "" and reply["message"] == "Turn 1. You said: hello there"
        await world.fake.user_post(world.alice["id"], world.dm["id"], "again")
        await wait_for(lambda: any(p["message"] == "Turn 2. You said: again" for p in _bot_posts(world, world.dm)))


async def test_a_redelivered_post_runs_nothing(tmp_path: Path, world: World, script: Script) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        post = await world.fake.user_post(world.alice["id"], world.dm["id"], "do it once")
        await wait_for(lambda: any(p["message"].endswith("do it once") for p in _bot_posts(world, world.dm)))
        await world.fake.redeliver(post["id"])  # what a second replica, or a replay, would see
        await world.fake.user_post(world.alice["id"], world.dm["id"], "next")
        await wait_for(lambda: any(p["message"].endswith("next") for p in _bot_posts(world, world.dm)))
        assert script.prompts == ["do it once", "next"]
        assert len(_bot_posts(world, world.dm)) == 2


async def test_posts_made_while_the_daemon_was_down_are_answered_once_when_it_starts(
    tmp_path: Path, world: World, script: Script
) -> None:
    """Mattermost keeps no queue for a bot that is not connected: where the stream was read to is
    kept in the store, and the next process catches up from there over REST. A first start
    answers no history."""
    await world.fake.user_post(world.alice["id"], world.dm["id"], "said before the bot ever ran")
    config = _config(tmp_path, world)
    async with running_gateway(config) as gw:
        await _connected(gw)
        await world.fake.user_post(world.alice["id"], world.dm["id"], "first")
        await wait_for(lambda: any(p["message"].endswith("first") for p in _bot_posts(world, world.dm)))
    await world.fake.user_post(world.alice["id"], world.dm["id"], "said while it was down")
    await world.fake.user_post(world.bob["id"], world.town["id"], "@agentbot and in town")
    async with running_gateway(config) as gw:
        await _connected(gw)
        await wait_for(lambda: any(p["message"].endswith("said while it was down") for p in _bot_posts(world, world.dm)),
                       what="the DM made while the daemon was down")
        await wait_for(lambda: _bot_posts(world, world.town), what="the mention made while the daemon was down")
        await world.fake.user_post(world.alice["id"], world.dm["id"], "after")
        await wait_for(lambda: any(p["message"].endswith("after") for p in _bot_posts(world, world.dm)))
    # The catch-up fetched "first" again (within its margin): the ledger took it once.
    assert sorted(script.prompts) == sorted(["first", "said while it was down", "bob: and in town", "after"])
    assert len(_bot_posts(world, world.dm)) == 3


async def test_the_websocket_drops_and_reconnects(tmp_path: Path, world: World, script: Script) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw, aiohttp.ClientSession(gw.url) as http:
        await _connected(gw)
        ready = await (await http.get("/readyz")).json()
        assert ready["bindings"]["mm"] == {"platform": "mattermost", "connected": True, "detail": "connected as @agentbot"}
        await world.fake.drop_websockets()
        await world.fake.user_post(world.alice["id"], world.dm["id"], "sent during the outage")
        await wait_for(lambda: any(p["message"].endswith("sent during the outage") for p in _bot_posts(world, world.dm)))
        assert world.fake.websocket_connects == 2
        assert (await (await http.get("/readyz")).json())["bindings"]["mm"]["connected"] is True


async def test_a_429_is_waited_out_and_the_reply_still_lands_once(tmp_path: Path, world: World, script: Script) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        world.fake.rate_limit("POST", r"^/api/v4/posts$", times=1, reset=1)
        await world.fake.user_post(world.alice["id"], world.dm["id"], "busy server")
        await wait_for(lambda: any(p["message"] == "Turn 1. You said: busy server" for p in _bot_posts(world, world.dm)))
        assert len(_bot_posts(world, world.dm)) == 1
        assert [body for _, _, body in world.fake.calls("POST", r"^/api/v4/posts$")][0] == "<429>"
        async with aiohttp.ClientSession(gw.url) as http:
            metrics = await (await http.get("/metrics")).text()
        assert 'gateway_platform_errors_total{kind="rate_limited",platform="mattermost"} 1.0' in metrics or \
            'gateway_platform_errors_total{platform="mattermost",kind="rate_limited"} 1.0' in metrics


async def test_a_burst_of_mentions_is_answered_within_the_servers_limit(tmp_path: Path, world: World,
                                                                        script: Script) -> None:
    world.fake.limit_rate(per_sec=10, max_burst=4)  # a strict server: a burst of 5, then 10 calls a second
    # The gateway's, the fake's and the model's: the server's refill takes no real time.
    world.fake.clock = script.clock = clock = ManualClock(autojump=AUTOJUMP)
    async with running_gateway(_config(tmp_path, world), clock=clock) as gw:
        await _connected(gw)
        roots = [await world.fake.user_post(world.alice["id"], world.town["id"], f"@agentbot question {i}")
                 for i in range(12)]

        def answered() -> bool:
            return all(any(p["message"].endswith(f"question {i}") for p in _bot_posts(world, world.town, root["id"]))
                       for i, root in enumerate(roots))
        await wait_for(answered, timeout=60, what="every answer")
        assert world.fake.throttled == [], "the gateway itself never causes a 429"
        assert all(len(_bot_posts(world, world.town, root["id"])) == 1 for root in roots)
        limit = gw.adapters["mm"].server_limit  # type: ignore[attr-defined]
        assert limit.waited > 0, "the burst was paced"


async def test_a_forged_action_callback_is_refused_by_the_daemon(tmp_path: Path, world: World, script: Script) -> None:
    config = _config(tmp_path, world)
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as http:
        await _connected(gw)
        body = {"user_id": world.alice["id"], "user_name": "alice", "channel_id": world.town["id"], "post_id": "p",
                "trigger_id": "t", "type": "button",
                "context": {"approval_id": "ap-guess", "decision": "approve", "sig": "0" * 64}}
        async with http.post("/mattermost/actions/mm", json=body) as resp:
            assert resp.status == 401
        async with http.post("/mattermost/actions/mm", data=b"not json") as resp:
            assert resp.status == 400
    assert script.prompts == []


async def _card(world: World, root_id: str) -> dict[str, Any]:
    (card,) = await wait_for(lambda: [p for p in _bot_posts(world, world.town, root_id) if "delete_file" in p["message"]],
                             what="the approval card")
    return card


async def test_approval_by_button_valid_and_forged(
    tmp_path: Path, world: World, script: Script, files_capability: list[str]
) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    config = _config(tmp_path, world, gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": public}})
    async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        assert card["root_id"] == root["id"] and "/srv/report.pdf" in card["message"]
        assert [b["id"] for b in world.fake.buttons(card["id"])] == ["approve1", "deny1", "approveall"]

        # Bob may not decide; only he is told, and nothing runs.
        result = await world.fake.click(world.bob["id"], card["id"], "approve1")
        assert result.status == 200 and "alice" in result.ephemeral_text.lower()
        # A forged request: the deny button's signed context with the decision switched.
        deny = world.fake.posts[card["id"]]["props"]["attachments"][0]["actions"][1]["integration"]
        assert deny["url"] == f"{public}/mattermost/actions/mm"
        body = {"user_id": world.alice["id"], "user_name": "alice", "channel_id": world.town["id"],
                "post_id": card["id"], "trigger_id": "t", "type": "button",
                "context": {**deny["context"], "decision": "approve"}}
        async with http.post(deny["url"], json=body) as resp:
            assert resp.status == 401
        assert files_capability == [] and len(world.fake.buttons(card["id"])) == 3

        # Alice approves: the card says so and loses its buttons, the tool runs once, the run resumes.
        result = await world.fake.click(world.alice["id"], card["id"], "approve1")
        assert result.status == 200 and result.ephemeral_text == ""
        await wait_for(lambda: any(p["message"] == "The tool said: deleted /srv/report.pdf"
                                   for p in _bot_posts(world, world.town, root["id"])), what="the resumed answer")
        assert files_capability == ["/srv/report.pdf"]
        assert world.fake.buttons(card["id"]) == [] and "Approved by alice" in world.fake.posts[card["id"]]["message"]
        # The buttons are gone, so a second click has nothing to press.
        assert (await world.fake.click(world.alice["id"], card["id"], "approve1")).status == 404
        assert files_capability == ["/srv/report.pdf"]


async def test_approval_by_reaction_without_public_url(
    tmp_path: Path, world: World, script: Script, files_capability: list[str]
) -> None:
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        assert world.fake.buttons(card["id"]) == [] and ":+1:" in card["message"]

        await world.fake.react(world.bob["id"], card["id"], "+1")  # bob may not decide: ignored
        await world.fake.react(world.alice["id"], card["id"], "-1")
        await wait_for(lambda: "Denied by alice" in world.fake.posts[card["id"]]["message"], what="the card update")
        await wait_for(lambda: any(p["message"].startswith("The tool said:") for p in _bot_posts(world, world.town, root["id"])),
                       what="the run continuing after the denial")
        assert files_capability == []
        assert ":+1:" not in world.fake.posts[card["id"]]["message"]


async def test_a_post_during_a_database_lock_is_answered_once(tmp_path: Path, world: World, script: Script) -> None:
    """Another process holds SQLite's write lock past the bound: the post is not counted as
    processed; the adapter submits it again until the store takes it, and it is answered once."""
    from tests.support.locking import another_process_holds_the_lock

    database = {"url": f"sqlite+aiosqlite:///{tmp_path / 'config' / 'gateway.db'}", "busy_timeout_seconds": 0.3}
    directory = _config(tmp_path, world, gateway={"database": database})
    async with running_gateway(directory) as gw:
        await _connected(gw)
        held: list[list[Any]] = []  # the bot's posts at the end of the lock, while it is still held
        async with another_process_holds_the_lock(directory / "gateway.db", seconds=1.5,
                                                  while_held=lambda: held.append(_bot_posts(world, world.dm))) as released:
            await world.fake.user_post(world.alice["id"], world.dm["id"], "during the lock")
            await released.wait()
            assert held == [[]]
        await wait_for(lambda: [p for p in _bot_posts(world, world.dm)
                                if p["message"] == "Turn 1. You said: during the lock"], what="the answer")
        await settled(gw, world.fake)  # nothing left that could post a second answer
        assert len(_bot_posts(world, world.dm)) == 1 and script.prompts == ["during the lock"]
