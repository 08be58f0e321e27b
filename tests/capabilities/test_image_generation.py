"""generate_image: drawn by pydantic-ai's ImageGenerator against a fake OpenAI images endpoint over HTTP,
with the key from secret_id; gated (it spends money and posts), so nothing is drawn or posted until a
person approves, and then the image is posted once in the thread; refused at load without a key."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from aiohttp import web
from pydantic_ai.images.result import ImageGenerationResult
from pydantic_ai.usage import RequestUsage

from bindings.loader import load_config
from gateway import extensions
from gateway.ops import cli
from gateway.runs.agent_run import run_agent
from gateway.store import repo
from tests.adapters.slack.conftest import eventually, fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.conftest import dump_yaml, running_gateway, wait_for, write_config
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.support.settled import settled

from . import support
from .scripted import say_calls
from .shaping_script import SCRIPT, call, say
from .support import agent, world
from .test_shared_capabilities import ALICE, BOB, CHANNEL, DM_ALICE
from .test_charts import png_size


def _png() -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(2, 2), dpi=64)
    FigureCanvasAgg(fig)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def _config(tmp_path: Path, fake: FakeSlack, images: FakeOpenAI, **entry: object) -> Path:
    agent = {"name": "Painter", "model": "scripted", "instructions": "Draw.",
             "capabilities": [{"id": "image_generation", "config": {"base_url": images.base_url}, **entry}]}
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake.api_url}
    return write_config(tmp_path / "config", agents={"assistant": agent},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


async def test_a_generated_image_is_gated_and_posted_once_after_approval_and_its_cost_recorded_with_the_run(
        tmp_path: Path, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-image-key")
    images = await FakeOpenAI().start()
    images.image = _png()
    support.SEEN.append(support.Seen())
    try:
        async with running_gateway(_config(tmp_path, fake_slack, images, secret_id="env:TEST_IMAGE_KEY")) as gw:
            await eventually(lambda: gw.adapters["acme"].health().connected)
            root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> " + say_calls(
                ("generate_image", {"prompt": "A lighthouse at dusk, watercolour"})))
            card = await fake_slack.wait_for(lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.blocks), None))
            assert "generate_image" in str(card.blocks)
            assert not images.image_requests and not fake_slack.shared_files  # nothing drawn, nothing posted
            approve = next(e["value"] for b in card.blocks or [] if b["type"] == "actions" for e in b["elements"]
                           if e["value"].startswith("approve:"))
            await fake_slack.click("U0ADA", card, approve)
            (shared,) = await fake_slack.wait_for(lambda: fake_slack.shared_files)
            await eventually(lambda: support.SEEN[-1].tool_results)
            await settled(gw, fake_slack)
            (run,) = await gw.store.runs_in(["finished"])
            metrics = gw.metrics.render().decode()
    finally:
        await images.stop()
    # Its cost, recorded with the run: pydantic-ai's price for the usage the image endpoint reported.
    expected = float(ImageGenerationResult([], prompt="", model_name="gpt-image-2", provider_name="openai",
                                           usage=RequestUsage(input_tokens=12, output_tokens=272)).cost().total_price)
    assert expected > 0 and (run.images, round(run.media_cost_usd, 6), run.media_unpriced) == (1, round(expected, 6), 0)
    labels = 'agent="assistant",kind="image",model="gpt-image-2"'
    assert f'agent_gateway_media_requests_total{{{labels},priced="yes"}} 1.0' in metrics
    assert f'agent_gateway_media_amount_total{{{labels},unit="images"}} 1.0' in metrics
    assert f'agent_gateway_media_cost_usd_total{{{labels}}} {expected}' in metrics
    assert await asyncio.to_thread(cli.main, ["runs", "list", "--json", "--config", str(tmp_path / "config")]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["run_id"] == run.id and listed["usage"]["images"] == 1
    assert listed["usage"]["media_cost_usd"] == round(expected, 6) and not listed["usage"]["media_cost_partial"]
    assert f"about ${expected:.3f}" in support.SEEN[-1].tool_results[0]
    ((body, auth),) = images.image_requests
    assert body["prompt"] == "A lighthouse at dusk, watercolour" and body["model"] == "gpt-image-2"
    assert auth == "Bearer sk-image-key"
    assert (shared.channel, shared.thread_ts) == ("C0GEN", root.ts) and shared.data == images.image
    assert shared.title == "a-lighthouse-at-dusk-watercolour.png" and png_size(shared.data) == (128, 128)
    assert len(fake_slack.shared_files) == 1
    assert "Shared a-lighthouse-at-dusk-watercolour.png" in support.SEEN[-1].tool_results[0]


def test_image_generation_without_a_key_is_refused_at_load(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "config", agents={"assistant": {
        "name": "Painter", "model": "demo", "capabilities": [{"id": "image_generation"}]}})
    extensions.register_checks()  # as the CLI and the daemon do before loading: the capabilities' own checks
    with pytest.raises(Exception, match=r"image_generation needs a key: set secret_id"):
        load_config(cfg)


# --- one client for the config, not one per run ---------------------------------------------------------------

RUNS = 4


def _drawing(images: FakeOpenAI) -> dict[str, object]:
    return {"id": "image_generation", "config": {"base_url": images.base_url}, "secret_id": "env:TEST_IMAGE_KEY",
            "tool_approval": {"generate_image": "never"}}


async def test_many_runs_draw_over_one_connection_which_is_closed_when_the_gateway_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run made its own OpenAI client and never closed it: a connection (an fd) left open per run."""
    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-image-key")
    images = await FakeOpenAI().start()
    images.image = _png()
    opened: set[int] = set()
    try:
        async with world(tmp_path, agents={"assistant": agent(_drawing(images), model="shaping-scripted")}) as w:
            for n in range(RUNS):
                SCRIPT.reset(call("generate_image", prompt=f"a lighthouse, take {n}"), say("done"))
                turn = await w.turn(ALICE if n % 2 else BOB, DM_ALICE if n % 2 else CHANNEL, f"draw {n}")
                result = await run_agent(w.gw.runner.build_agent(turn), f"draw {n}", deps=turn)
                await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
                assert "drawn but not posted" in SCRIPT.requests[1].tool_results()[0]  # the fake chat takes no files
                opened |= support.open_connections_to(images.port)
            still_open = support.open_connections_to(images.port)
        after_stop = support.open_connections_to(images.port)
    finally:
        await images.stop()
    assert len(images.image_requests) == RUNS
    assert len(opened) == len(still_open) == 1, f"{RUNS} runs opened {len(opened)} connections, {len(still_open)} open"
    assert not after_stop, f"{len(after_stop)} connections to the image server left open after the gateway stopped"


async def test_a_rotated_key_closes_the_client_of_the_key_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client per key: each rotation made one more, and the old ones stayed open for the daemon's life.
    The newest is kept; the one before is closed once no run draws through it."""
    images = await FakeOpenAI().start()
    images.image = _png()
    open_after: list[int] = []
    try:
        async with world(tmp_path, agents={"assistant": agent(_drawing(images), model="shaping-scripted")}) as w:
            for n in range(4):
                monkeypatch.setenv("TEST_IMAGE_KEY", f"sk-rotated-{n}")
                await _draw(w, f"a kite, take {n}")
                await wait_for(lambda: len(support.open_connections_to(images.port)) <= 1,
                               what="the key before's client closed")
                open_after.append(len(support.open_connections_to(images.port)))
    finally:
        await images.stop()
    assert [auth for _, auth in images.image_requests] == [f"Bearer sk-rotated-{n}" for n in range(4)]
    assert open_after == [1, 1, 1, 1], open_after


async def _draw(w: support.World, prompt: str) -> str:
    """One run of Alice's that draws `prompt`; what the tool told the model."""
    SCRIPT.reset(call("generate_image", prompt=prompt), say("done"))
    turn = await w.turn(ALICE, DM_ALICE, prompt)
    result = await run_agent(w.gw.runner.build_agent(turn), prompt, deps=turn)
    await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
    return str(SCRIPT.requests[1].tool_results()[0])


class HeldImages(FakeOpenAI):
    """The image server, answering a drawing only once `hold` is set (while one is set)."""

    hold: asyncio.Event | None = None
    holding = False

    async def _images(self, request: web.Request) -> web.Response:
        if self.hold is not None:
            self.holding = True
            await self.hold.wait()
        return await super()._images(request)


# People ask seconds to minutes apart: longer than httpx's 5 s keep-alive expiry, which closed the connection
# between two drawings so each paid a new TCP (and, to OpenAI, TLS) handshake.
PAUSE = 6.5


async def test_a_drawing_after_a_pause_reuses_the_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image client kept idle connections 5 s (httpx's default): the second drawing opened a second one."""
    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-image-key")
    images = await FakeOpenAI().start()
    images.image = _png()
    try:
        async with world(tmp_path, agents={"assistant": agent(_drawing(images), model="shaping-scripted")}) as w:
            await _draw(w, "a lighthouse")
            await asyncio.sleep(PAUSE)
            assert "drawn but not posted" in await _draw(w, "a harbour")
            assert len(support.open_connections_to(images.port)) == 1
        assert not support.open_connections_to(images.port)  # and closed at stop
    finally:
        await images.stop()
    assert len(images.image_requests) == 2
    assert len(set(images.media_peers)) == 1, f"two drawings came on {len(set(images.media_peers))} connections"


async def test_a_reload_that_replaces_the_image_config_closes_its_connection_once_the_draw_in_flight_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An admin changed the image config and reloaded: the old config's client (an open connection to the
    image server) stayed open until the gateway stopped, one more per edit. The run drawing through it at
    the reload finishes its drawing, then that connection is closed; the new config's runs open one of their
    own; removing image generation closes that one too."""
    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-image-key")
    images = await HeldImages().start()
    images.image = _png()
    agent_file = tmp_path / "agents" / "assistant.yaml"
    try:
        async with world(tmp_path, agents={"assistant": agent(_drawing(images), model="shaping-scripted")}) as w:
            await _draw(w, "a lighthouse")
            assert len(support.open_connections_to(images.port)) == 1

            images.hold = asyncio.Event()
            in_flight = asyncio.create_task(_draw(w, "a harbour"))
            await wait_for(lambda: images.holding, what="the old config's run drawing")
            edited = _drawing(images)
            edited["config"]["quality"] = "low"
            agent_file.write_text(dump_yaml(agent(edited, model="shaping-scripted")))
            assert (await w.gw.reload_from_disk())[0]
            images.hold.set()
            # Drawn, over the connection it started on (the fake chat takes no files): not cut by the reload.
            assert "drawn but not posted" in await asyncio.wait_for(in_flight, 30)
            await wait_for(lambda: not support.open_connections_to(images.port),
                           what="the old config's connection closed")

            images.hold = None
            await _draw(w, "a lighthouse, in pencil")
            assert images.image_requests[-1][0].get("quality") == "low"
            assert len(support.open_connections_to(images.port)) == 1

            agent_file.write_text(dump_yaml(agent(model="shaping-scripted")))
            assert (await w.gw.reload_from_disk())[0]
            await wait_for(lambda: not support.open_connections_to(images.port),
                           what="the removed config's connection closed")
    finally:
        await images.stop()


async def test_a_key_put_in_place_is_used_from_the_next_run_and_until_then_the_tool_is_not_offered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built once for the config, the tool still follows its key: with none readable it is not offered (it
    could only refuse), and once the key reads the next run draws with it, without a reload."""
    monkeypatch.delenv("TEST_IMAGE_KEY", raising=False)
    images = await FakeOpenAI().start()
    images.image = _png()
    offered = []
    try:
        async with world(tmp_path, agents={"assistant": agent(_drawing(images), model="shaping-scripted")}) as w:
            for n in range(2):
                if n == 1:
                    monkeypatch.setenv("TEST_IMAGE_KEY", "sk-put-in-place")
                SCRIPT.reset(*([call("generate_image", prompt="a kite")] if n else []), say("done"))
                turn = await w.turn(ALICE, DM_ALICE, f"draw {n}")
                result = await run_agent(w.gw.runner.build_agent(turn), f"draw {n}", deps=turn)
                await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
                offered.append("generate_image" in SCRIPT.requests[0].tools)
    finally:
        await images.stop()
    assert offered == [False, True]
    ((body, auth),) = images.image_requests
    assert body["prompt"] == "a kite" and auth == "Bearer sk-put-in-place"
