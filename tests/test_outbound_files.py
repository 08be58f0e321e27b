"""Files go out once: a share refused or cut short is never shown twice, and never lost silently.

The real SlackAdapter (slack_sdk) against the fake Slack, the real delivery rows in a SQLite file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.messages import ChatKind
from gateway.outbound.adapter import OutboundFile, PlatformError, ReplyTarget
from gateway.outbound.files import FileRefused, share_files
from tests.adapters.slack.conftest import eventually, fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.capabilities.test_charts import slack_config
from tests.conftest import running_gateway
from tests.fakes.slack import FakeSlack

REPORT = OutboundFile("report.csv", b"day,signups\nMon,12\nTue,30\n", "text/csv")
THREAD = ReplyTarget("slack", "acme", "T0TEAM", "C0GEN", "1700000001.000002", ChatKind.CHANNEL)


async def test_a_refused_share_is_tried_again_and_shares_once(tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        fake_slack.fail_next("files.completeUploadExternal", status=500, error="internal_error", retry_after=None)
        shared = await share_files(gw.adapters["acme"], THREAD, gw.store, "run-a", [REPORT])
    assert [f.title for f in fake_slack.shared_files] == ["report.csv"]
    assert fake_slack.shared_files[0].data == REPORT.data and fake_slack.shared_files[0].thread_ts == THREAD.thread
    assert len(fake_slack.calls_to("files.completeUploadExternal")) == 2
    assert len(fake_slack.calls_to("files.getUploadURLExternal")) == 1
    assert "shared report.csv" in shared.note


async def test_a_run_stopped_between_upload_and_share_shares_on_resume_without_uploading_again(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        fake_slack.fail_next("files.completeUploadExternal", status=500, error="internal_error", retry_after=None,
                             times=5)
        with pytest.raises(PlatformError):
            await share_files(gw.adapters["acme"], THREAD, gw.store, "run-b", [REPORT])
        assert not fake_slack.shared_files
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:  # the process restarted
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await share_files(gw.adapters["acme"], THREAD, gw.store, "run-b", [REPORT])
        again = await share_files(gw.adapters["acme"], THREAD, gw.store, "run-b", [REPORT])
    assert [f.title for f in fake_slack.shared_files] == ["report.csv"]
    assert len(fake_slack.calls_to("files.getUploadURLExternal")) == 1  # the bytes went up once
    assert "already shared" in again.note


async def test_a_kill_during_the_share_never_shares_twice_and_says_so(tmp_path: Path, fake_slack: FakeSlack) -> None:
    fake_slack.complete_hold = asyncio.Event()
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        sharing = asyncio.create_task(share_files(gw.adapters["acme"], THREAD, gw.store, "run-c", [REPORT]))
        await fake_slack.wait_for(lambda: fake_slack.shared_files)
        sharing.cancel()  # the kill: Slack shared it, the gateway never heard
        with pytest.raises(asyncio.CancelledError):
            await sharing
    fake_slack.complete_hold.set()
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        resumed = await share_files(gw.adapters["acme"], THREAD, gw.store, "run-c", [REPORT])
    assert len(fake_slack.shared_files) == 1
    assert resumed.message_id is None and "may have been shared" in resumed.note and "not sent again" in resumed.note


async def test_a_file_over_the_platform_limit_is_refused_in_words_and_nothing_is_sent(
        tmp_path: Path, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        adapter = gw.adapters["acme"]
        limits = adapter.file_limits  # type: ignore[attr-defined]
        monkeypatch.setattr(adapter, "file_limits", type(limits)({k: 10 for k in limits.max_bytes}, 10, 3900))
        with pytest.raises(FileRefused, match=r"report.csv is 26 bytes; slack takes document files of at most 10 bytes"):
            await share_files(adapter, THREAD, gw.store, "run-d", [REPORT])
    assert not fake_slack.calls_to("files.getUploadURLExternal")


async def test_telegram_posts_several_images_as_one_album_with_the_caption_cut_to_its_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.capabilities.test_charts import AGENT, FORUM_ID, png_size
    from tests.conftest import wait_for, write_config
    from tests.fakes.telegram import FakeTelegram

    from capabilities.charts import Series, render_png

    pngs = [render_png("line", f"Week {i}", ["Mon", "Tue"], [Series(name="n", values=[1, i])], "", "") for i in (1, 2)]
    async with FakeTelegram() as fake:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", fake.token)
        fake.add_chat(FORUM_ID, "supergroup", title="Forum", is_forum=True)
        topic = fake.add_topic(FORUM_ID, "Metrics", FakeTelegram.user(42, "Ada", "ada"))
        telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url}
        cfg = write_config(tmp_path / "config", agents={"assistant": AGENT},
                           bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram}})
        async with running_gateway(cfg) as gw:
            await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding to connect")
            target = ReplyTarget("telegram", "tg", "", str(FORUM_ID), str(topic), ChatKind.GROUP)
            files = [OutboundFile(f"week-{i}.png", png, "image/png") for i, png in enumerate(pngs, 1)]
            await share_files(gw.adapters["tg"], target, gw.store, "run-album", files, "x" * 3000)
        album = [m for m in fake.sent(FORUM_ID) if m.files]
    assert [c.method for c in fake.calls if c.method.startswith("send")] == ["sendMediaGroup"]
    assert [m.files[0][:2] for m in album] == [("photo", "week-1.png"), ("photo", "week-2.png")]
    assert all(m.thread_id == topic for m in album)
    assert len(album[0].text) == 1024 and album[0].text.endswith("…") and album[1].text == ""
    assert png_size(album[1].files[0][2])[0] == 1200


async def test_a_file_over_a_servers_own_limit_is_refused_in_words_after_one_try(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.adapters.mattermost.conftest import BOT_TOKEN as MM_TOKEN
    from tests.fakes.mattermost import FakeMattermost
    from tests.conftest import write_config

    fake = FakeMattermost()
    url = await fake.start()
    try:
        bot = fake.add_user("agentbot", is_bot=True, token=MM_TOKEN)
        team = fake.add_team("acme")
        town = fake.add_channel(team["id"], "town-square", members=[bot["id"]])
        fake.max_file_bytes = 10  # an admin set Maximum File Size far below the default
        monkeypatch.setenv("MM_FILES_TOKEN", MM_TOKEN)
        cfg = write_config(tmp_path / "config", bindings={"mm": {
            "platform": "mattermost", "agent": "assistant", "mattermost": {"url": url, "token": "env:MM_FILES_TOKEN"}}})
        async with running_gateway(cfg) as gw:
            await eventually(lambda: gw.adapters["mm"].health().connected)
            target = ReplyTarget("mattermost", "mm", team["id"], town["id"], None, ChatKind.CHANNEL)
            with pytest.raises(FileRefused, match=r"mattermost refused report.csv \(26 bytes\) as too large \(.*"
                                                  r"FileSettings.MaxFileSize: 100 MB unless changed\); nothing was posted"):
                await share_files(gw.adapters["mm"], target, gw.store, "run-e", [REPORT])
    finally:
        await fake.stop()
    assert [r for r in fake.requests if r[:2] == ("POST", "/api/v4/files")] == [("POST", "/api/v4/files", None)]
    assert not [p for p in fake.posts_in(town["id"]) if p["file_ids"]]


async def test_a_file_over_a_slack_workspaces_own_limit_is_refused_in_words_after_one_try(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    fake_slack.max_file_bytes = 10  # the team's admins restricted uploads of large files
    async with running_gateway(slack_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        with pytest.raises(FileRefused, match=r"slack refused report.csv \(26 bytes\) as too large \(.*"
                                              r"file_upload_size_restricted: this workspace's admins restrict"):
            await share_files(gw.adapters["acme"], THREAD, gw.store, "run-f", [REPORT])
    assert len(fake_slack.calls_to("files.getUploadURLExternal")) == 1
    assert not fake_slack.calls_to("files.completeUploadExternal") and not fake_slack.shared_files
