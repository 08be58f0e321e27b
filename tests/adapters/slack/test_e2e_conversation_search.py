"""Conversation search on Slack through the real daemon: a private channel's thread is found while
the person is a member (confirmed with conversations.members, paged), and neither found nor opened
once they left it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.membership import TTL
from gateway.runs.llm import REGISTERED
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support import search_model

from .conftest import eventually


@pytest.fixture
def model() -> Iterator[str]:
    yield search_model.register()
    REGISTERED.pop(search_model.MODEL, None)


def _config(tmp_path: Path, fake: FakeSlack, model: str) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Searcher", "model": model, "capabilities": [{"id": "conversation_search"}]}},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
    )


async def _ask(fake: FakeSlack, text: str) -> str:
    def answers() -> list[str]:
        return [m.text for m in fake.bot_messages("D0ADA") if m.text.startswith("The tool said")]

    before = len(answers())
    await fake.say("D0ADA", "U0ADA", text)
    return (await fake.wait_for(lambda: len(a := answers()) > before and a))[-1]


async def test_a_private_channel_thread_counts_only_while_the_person_is_a_member(
        tmp_path: Path, fake_slack: FakeSlack, model: str) -> None:
    # A big private channel: Ada is on the second page of conversations.members.
    crowd = [f"U{i:04d}" for i in range(250)]
    secret = fake_slack.add_channel("C0SEC", "secret-plans", kind="group", members=[*crowd, "U0BOT", "U0ADA"])
    clock = fake_slack.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's
    async with running_gateway(_config(tmp_path, fake_slack, model), clock=clock) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0SEC", "U0ADA", "<@U0BOT> the codename is zebrafish")
        await fake_slack.wait_for(lambda: any(m.text == "noted" and m.thread_ts == root.ts
                                              for m in fake_slack.bot_messages("C0SEC")))

        found = await _ask(fake_slack, "find zebrafish")
        assert "Slack channel" in found and "codename" in found, found
        conversation = search_model.conversation_id(found)
        assert len(fake_slack.calls_to("conversations.members")) == 2, "paged to the second page"

        secret.members.remove("U0ADA")  # Ada leaves the private channel
        clock.advance(TTL + 1)
        gone = await _ask(fake_slack, "find zebrafish")
        assert "Slack channel" not in gone and "codename" not in gone and "left out" not in gone, gone
        opened = await _ask(fake_slack, f"open {conversation}")
        assert f"There is no conversation '{conversation}' among this person's" in opened
        assert "codename" not in opened
