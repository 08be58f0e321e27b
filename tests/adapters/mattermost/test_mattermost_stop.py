"""The Stop action on Mattermost, through the real daemon and the fake server: it rides on the
streaming reply, Bob's click changes nothing (he alone is told why), Alice's ends the run within
a second, and the action is gone from the stopped reply."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clock import Clock, ManualClock
from gateway.runs.llm import register_model
from gateway.store import repo
from tests.conftest import running_gateway, wait_for, write_config
from tests.test_stop import BRIEF_WORDS, QUICK, SLOW, brief_model, one_run_finished, quick_model, slow_model

from .conftest import BOT_TOKEN, World
from tests.conftest import free_port

from .test_mattermost_e2e import _bot_posts, _connected


BRIEF = "mattermost-stop-brief"


def _config(tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch, model: str) -> Path:
    """A Mattermost binding with a public URL (so replies carry a Stop action) on `model`."""
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    register_model(SLOW, slow_model)
    register_model(BRIEF, brief_model)
    register_model(QUICK, quick_model)
    port = free_port()
    return write_config(
        tmp_path / "config", agents={"assistant": {"name": "Stoppable", "model": model}},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}}},
        gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}},
    )


@contextlib.asynccontextmanager
async def _running(tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch, model: str,
                   clock: Clock | None = None) -> AsyncIterator[Any]:
    """The daemon on `_config`, its Mattermost binding connected."""
    async with running_gateway(_config(tmp_path, world, monkeypatch, model), clock=clock) as gw:
        await _connected(gw)
        yield gw


async def _alice_asks(world: World, text: str) -> dict[str, Any]:
    """Alice mentions the bot in town-square with `text`: the root post."""
    return await world.fake.user_post(world.alice["id"], world.town["id"], f"@agentbot {text}")


async def test_stop_action_only_for_the_requester(tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _running(tmp_path, world, monkeypatch, SLOW) as gw:
        root = await _alice_asks(world, "write a long essay")
        (reply,) = await wait_for(lambda: [p for p in _bot_posts(world, world.town, root["id"])
                                           if world.fake.buttons(p["id"])], what="the Stop action")
        assert [b["id"] for b in world.fake.buttons(reply["id"])] == ["stop"]
        [run] = await gw.store.runs_in([repo.RUNNING])

        result = await world.fake.click(world.bob["id"], reply["id"], "stop")
        assert result.status == 200 and "can stop this" in result.ephemeral_text
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]

        pressed = time.monotonic()
        result = await world.fake.click(world.alice["id"], reply["id"], "stop")
        assert result.status == 200 and result.ephemeral_text == ""

        async def stopped() -> bool:
            row = await gw.store.run(run.id)
            return row is not None and row.status == repo.STOPPED

        await wait_for(stopped, what="the run to stop")
        assert time.monotonic() - pressed < 5.0  # the reply runs 10 s: cut well short (a generous bound on a busy machine)
        post = world.fake.posts[reply["id"]]
        await wait_for(lambda: not world.fake.buttons(reply["id"]), what="the Stop action to go")
        assert post["message"].startswith("word0 ") and "Stopped by alice" in post["message"]




async def test_a_reply_that_finishes_loses_its_stop_action_with_its_final_patch(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _running(tmp_path, world, monkeypatch, BRIEF) as gw:
        root = await _alice_asks(world, "say a few words")
        (reply,) = await wait_for(lambda: [p for p in _bot_posts(world, world.town, root["id"])
                                           if world.fake.buttons(p["id"])], what="the Stop action")

        await one_run_finished(gw)
        post = world.fake.posts[reply["id"]]
        assert not world.fake.buttons(reply["id"]) and post["message"].strip().endswith(f"word{BRIEF_WORDS - 1}")
        patches = [body for _, _, body in world.fake.calls("PUT", rf"/posts/{reply['id']}/patch")]
        # Taken away once, by the last patch: with the final text where it differs from the last draft,
        # on its own where that draft (shown without its trailing space) already read as the final.
        removals = [b for b in patches if b.get("props") == {}]
        assert len(removals) == 1 and patches[-1] is removals[0], patches


async def test_a_quick_answer_is_one_post_never_patched_so_never_marked_edited(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first-draft hold is read from the gateway's clock, which does not move here: however slow
    # the machine, the answer is in before the hold ends, as a quick answer is.
    async with _running(tmp_path, world, monkeypatch, QUICK, clock=ManualClock()) as gw:
        adapter = gw.adapters["mm"]
        adapter.limits = type(adapter).limits  # type: ignore[misc]  # the platform's own, with its first-draft hold
        root = await _alice_asks(world, "quick one")

        await one_run_finished(gw)
        (reply,) = _bot_posts(world, world.town, root["id"])
        assert reply["message"] == "Quick answer." and not world.fake.buttons(reply["id"])
        assert world.fake.calls("PUT", r"/posts/.*/patch") == [], "the reply was edited (Mattermost marks it Edited)"
