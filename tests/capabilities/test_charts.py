"""create_chart: a chart asked for in a conversation arrives there as a PNG that decodes, through each
platform's own upload (the real SDKs against the fakes); a chart with nothing in it is a retry naming
what is missing, and nothing is posted."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.adapters.mattermost.conftest import BOT_TOKEN as MM_BOT_TOKEN, World, world  # noqa: F401  (fixture)
from tests.adapters.slack.conftest import eventually, fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.conftest import running_gateway, wait_for, write_config
from tests.support.settled import settled
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

from . import support
from .scripted import say_calls

SIGNUPS = {"kind": "bar", "title": "Signups last week", "x_values": ["Mon", "Tue", "Wed", "Thu", "Fri"],
           "series": [{"name": "signups", "values": [12, 30, 18, 44, 25]}], "x_label": "day", "y_label": "signups"}
AGENT = {"name": "Charts", "model": "scripted", "instructions": "Draw.", "capabilities": [{"id": "charts"}]}


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def slack_config(tmp_path: Path, fake: FakeSlack) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake.api_url}
    return write_config(tmp_path / "config", agents={"assistant": AGENT},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


@pytest.mark.parametrize("where", ["dm", "thread"])
async def test_a_chart_asked_for_on_slack_arrives_there_as_a_png(tmp_path: Path, fake_slack: FakeSlack, where: str) -> None:
    support.SEEN.append(support.Seen())
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        if where == "dm":
            channel, text, thread = "D0ADA", say_calls(("create_chart", SIGNUPS)), None
        else:
            channel, text = "C0GEN", "<@U0BOT> " + say_calls(("create_chart", SIGNUPS))
        root, _ = await fake_slack.say(channel, "U0ADA", text)
        thread = None if where == "dm" else root.ts
        (shared,) = await fake_slack.wait_for(lambda: fake_slack.shared_files)
        await fake_slack.wait_for(lambda: any("posted" in m.text or "shared" in m.text
                                              for m in fake_slack.bot_messages(channel) if not m.files))

    assert (shared.channel, shared.thread_ts) == (channel, thread)
    assert shared.title == "signups-last-week.png"
    assert png_size(shared.data) == (1200, 720)
    assert not fake_slack.calls_to("files.upload"), "the retired files.upload was called"
    upload_url = fake_slack.calls_to("files.getUploadURLExternal")[0].args
    assert upload_url["filename"] == "signups-last-week.png" and int(upload_url["length"]) == len(shared.data)
    (result,) = support.SEEN[-1].tool_results
    assert "PNG" not in result and "shared signups-last-week.png" in result


async def test_an_empty_chart_is_a_retry_naming_what_is_missing(tmp_path: Path, fake_slack: FakeSlack) -> None:
    support.SEEN.append(support.Seen())
    empty_axis = {**SIGNUPS, "x_values": []}
    no_series = {**SIGNUPS, "series": []}
    short = {**SIGNUPS, "series": [{"name": "signups", "values": [1, 2]}]}
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await fake_slack.say("D0ADA", "U0ADA", say_calls(("create_chart", empty_axis), ("create_chart", no_series),
                                                        ("create_chart", short)))
        await fake_slack.wait_for(lambda: fake_slack.bot_messages("D0ADA"))
    seen = support.SEEN[-1]
    # A retry while the tool's retries last (the middle call used the last: its words come back as text).
    assert "`x_values` has no points" in seen.retries[0]
    assert "`series` is empty" in seen.tool_results[0] and seen.tool_results[0].startswith("This call is still not valid")
    assert "series 'signups' has 2 values but `x_values` has 5 points" in seen.retries[1]
    assert not fake_slack.shared_files and not fake_slack.calls_to("files.getUploadURLExternal")


ADA_TG = FakeTelegram.user(42, "Ada", "ada")
FORUM_ID = -100300


@pytest.fixture
async def fake_telegram(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.private_chat(ADA_TG)
        server.add_chat(FORUM_ID, "supergroup", title="Forum", is_forum=True)
        yield server


@pytest.mark.parametrize("where", ["private", "topic"])
async def test_a_chart_asked_for_on_telegram_arrives_there_as_a_photo(tmp_path: Path, fake_telegram: FakeTelegram,
                                                                     where: str) -> None:
    support.SEEN.append(support.Seen())
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake_telegram.api_url}
    cfg = write_config(tmp_path / "config", agents={"assistant": AGENT},
                       bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram,
                                        "admission": {"dm": "open"}}})
    async with running_gateway(cfg) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")
        if where == "private":
            chat, topic = ADA_TG["id"], None
            fake_telegram.push_message(chat, ADA_TG, say_calls(("create_chart", SIGNUPS)))
        else:
            chat, topic = FORUM_ID, fake_telegram.add_topic(FORUM_ID, "Metrics", ADA_TG)
            text = "@gateway_bot " + say_calls(("create_chart", SIGNUPS))
            fake_telegram.push_message(chat, ADA_TG, text, entities=fake_telegram.mention(text), thread_id=topic)
        photo = await fake_telegram.wait_for(lambda: [m for m in fake_telegram.sent(chat) if m.files], what="a photo")
        await fake_telegram.wait_for(lambda: support.SEEN[-1].tool_results, what="the tool's answer")
    (msg,) = photo
    ((kind, name, data),) = msg.files
    assert kind == "photo" and msg.thread_id == topic
    assert png_size(data) == (1200, 720)
    assert name == "signups-last-week.png" and msg.text == "Signups last week"  # the title as its caption
    assert "shared" in support.SEEN[-1].tool_results[0]


async def test_a_chart_telegram_refuses_as_too_large_is_told_to_the_model_with_the_limit_and_sent_once(
        tmp_path: Path, fake_telegram: FakeTelegram) -> None:
    support.SEEN.append(support.Seen())
    fake_telegram.max_photo_bytes = 1000  # the Bot API answers 413 "Request Entity Too Large" past it
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake_telegram.api_url}
    cfg = write_config(tmp_path / "config", agents={"assistant": AGENT},
                       bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram,
                                        "admission": {"dm": "open"}}})
    async with running_gateway(cfg) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")
        fake_telegram.push_message(ADA_TG["id"], ADA_TG, say_calls(("create_chart", SIGNUPS)))
        await fake_telegram.wait_for(lambda: support.SEEN[-1].tool_results, what="the tool's answer")
        await settled(gw, fake_telegram)
    (result,) = support.SEEN[-1].tool_results
    assert "too large" in result and "Request Entity Too Large" in result
    assert "photo of at most 10 MB" in result and "other file of at most 50 MB" in result
    assert [c.method for c in fake_telegram.calls if c.method in ("sendPhoto", "sendDocument", "sendMediaGroup")] \
        == ["sendPhoto"]  # one try: the same bytes would be refused again
    assert not [m for m in fake_telegram.sent(ADA_TG["id"]) if m.files]


async def test_a_chart_asked_for_in_a_mattermost_thread_arrives_in_that_thread(
        tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    support.SEEN.append(support.Seen())
    monkeypatch.setenv("MM_CHARTS_TOKEN", MM_BOT_TOKEN)
    cfg = write_config(tmp_path / "config", agents={"assistant": AGENT},
                       bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                                        "mattermost": {"url": world.url, "token": "env:MM_CHARTS_TOKEN"}}})
    fake, town = world.fake, world.town["id"]
    async with running_gateway(cfg) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        root = await fake.user_post(world.alice["id"], town, "@agentbot " + say_calls(("create_chart", SIGNUPS)))
        (post,) = await wait_for(lambda: [p for p in fake.posts_in(town) if p["file_ids"]], what="the chart's post")
        await wait_for(lambda: support.SEEN[-1].tool_results, what="the tool's answer")
    assert post["root_id"] == root["id"] and post["user_id"] == world.bot["id"]
    (file_id,) = post["file_ids"]
    info, data = fake.files[file_id]
    assert info["name"] == "signups-last-week.png" and info["post_id"] == post["id"]
    assert png_size(data) == (1200, 720)
    assert post["message"] == "Signups last week"




async def test_a_workspace_file_shared_into_a_slack_thread_arrives_with_its_name_once_approved(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    support.SEEN.append(support.Seen())
    agent = {**AGENT, "capabilities": [{"id": "sandbox"}]}  # share_file is side-effecting: gated by default
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "config", agents={"assistant": agent},
                       bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    table = "day,signups\nMon,12\nTue,30\n"
    script = say_calls(("write_file", {"path": "out/signups.csv", "content": table}),
                       ("share_file", {"path": "out/signups.csv"}))
    async with running_gateway(cfg) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> " + script)
        card = await fake_slack.wait_for(lambda: next((m for m in fake_slack.bot_messages("C0GEN") if m.blocks), None))
        assert "share_file" in str(card.blocks) and not fake_slack.shared_files  # parked: nothing posted yet
        approve = next(e["value"] for b in card.blocks or [] if b["type"] == "actions" for e in b["elements"]
                       if e["value"].startswith("approve:"))
        await fake_slack.click("U0ADA", card, approve)
        (shared,) = await fake_slack.wait_for(lambda: fake_slack.shared_files)
        answer = await fake_slack.wait_for(lambda: next((m for m in fake_slack.bot_messages("C0GEN")
                                                         if "Shared signups.csv" in m.text), None))
    assert (shared.title, shared.data, shared.channel, shared.thread_ts) == ("signups.csv", table.encode(), "C0GEN", root.ts)
    assert len(fake_slack.shared_files) == 1
    # The answer below the card is a message of its own: the file's message was not taken for the reply.
    assert not answer.files and answer.ts != shared.message_ts
    file_message = fake_slack.message("C0GEN", shared.message_ts)
    assert file_message is not None and file_message.text == "" and not file_message.edits


async def test_a_chart_asked_for_in_the_web_chat_is_listed_and_served_under_the_api_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    support.SEEN.append(support.Seen())
    monkeypatch.setenv("TEST_API_TOKEN", "s3cret-token")
    cfg = write_config(tmp_path / "config", agents={"assistant": AGENT},
                       gateway={"http": {"listen": "127.0.0.1:0", "api_token": "env:TEST_API_TOKEN"}})
    auth = {"Authorization": "Bearer s3cret-token"}
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url, headers=auth) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": say_calls(("create_chart", SIGNUPS))})
        assert r.status == 202
        await wait_for(lambda: support.SEEN[-1].tool_results, what="the tool's answer")
        listing = await (await s.get(f"/api/v1/conversations/{conv}/messages")).json()
        (share,) = listing["files"]
        (chart,) = share["files"]
        assert chart["name"] == "signups-last-week.png" and share["caption"] == "Signups last week"
        async with s.get(chart["url"]) as got:
            assert got.status == 200 and got.headers["Content-Type"] == "image/png"
            assert got.headers["X-Content-Type-Options"] == "nosniff"
            assert png_size(await got.read()) == (1200, 720)
        async with aiohttp.ClientSession(gw.url) as stranger:  # the same auth as the API
            assert (await stranger.get(chart["url"])).status == 401
        other = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        assert (await s.get(chart["url"].replace(conv, other))).status == 404  # only in its own conversation
        # Deleting the conversation erases its files with it.
        assert (await s.delete(f"/api/v1/conversations/{conv}", json={})).status in (200, 204)
        assert await gw.store.get_state("web", f"files:{conv}") is None
        assert await gw.store.get_state("web", f"file:{conv}:{chart['id']}") is None


@pytest.mark.browser
async def test_the_web_page_shows_the_chart_it_asked_for(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    from tests.test_web_browser import _launch_args

    support.SEEN.append(support.Seen())
    cfg = write_config(tmp_path / "config", agents={"assistant": AGENT})
    async with running_gateway(cfg) as gw, async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(**_launch_args(tmp_path / "profile"))  # type: ignore[arg-type]
        try:
            page = await context.new_page()
            await page.goto(gw.url + "/")
            await page.wait_for_url("**/#*", timeout=10_000)
            await page.locator("textarea#text").fill(say_calls(("create_chart", SIGNUPS)))
            await page.locator("button#send").click()
            image = page.locator("img.shared-file")
            await expect(image).to_have_attribute("alt", "signups-last-week.png", timeout=10_000)
            await page.wait_for_function("() => document.querySelector('img.shared-file')?.naturalWidth > 0",
                                         timeout=10_000)
            assert await image.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [1200, 720]
            await page.reload()  # from the conversation's listing, not only the live event
            await page.wait_for_function("() => document.querySelector('img.shared-file')?.naturalWidth === 1200",
                                         timeout=10_000)
        finally:
            await context.close()
