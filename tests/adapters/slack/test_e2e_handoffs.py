"""End to end on the fake Slack: a handoff's answer appears in the same thread under the other agent's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.capabilities.scripted import say_calls
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack

from .conftest import eventually


def member(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "model": "scripted", "instructions": f"You are {name}.",
            "capabilities": [{"id": "handoffs"}]}


async def test_a_handoff_posts_the_targets_answer_in_the_thread_under_its_name(tmp_path: Path,
                                                                             fake_slack: FakeSlack) -> None:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "api_url": fake_slack.api_url}
    cfg = write_config(
        tmp_path / "config",
        agents={"assistant": member("Assistant", "Answers"), "researcher": member("Researcher", "Finds things out")},
        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
    )
    script = say_calls(("send_to_agent", {"agent": "researcher", "message": "compare the three vendors", "wait": False}))
    async with running_gateway(cfg) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", f"<@U0BOT> {script}")

        def answered() -> Any:
            posts = [m for m in fake_slack.bot_messages("C0GEN") if m.username == "Researcher"]
            return posts and "compare the three vendors" in posts[0].text and posts

        [report] = await fake_slack.wait_for(answered)
        [own] = [m for m in fake_slack.bot_messages("C0GEN") if m.username is None]
        assert report.thread_ts == own.thread_ts == root.ts, "both answers are in the thread the person started"
        assert own.text.startswith("Handed over to Researcher"), "the assistant's own answer, under the app's name"
        assert not report.text.startswith("*Researcher:*"), "Slack shows the name itself: no header"
        assert "untrusted-content" in report.text, "the researcher read the message as data in an envelope"
