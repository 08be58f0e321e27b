"""Slack slash commands the app defines reach the gateway's commands (as `!` does where it defines
none): answered privately, acked, never a model run. Through slack-bolt, the fake Slack and the daemon."""

from __future__ import annotations

from pathlib import Path

from gateway.runs.llm import register_model
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support.files_model import Recorder

from .conftest import eventually


async def test_slash_commands_are_answered_privately_in_dms_and_channels(tmp_path: Path, fake_slack: FakeSlack) -> None:
    recorder = Recorder()
    register_model("slack-slash", recorder.model)
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "api_url": fake_slack.api_url}
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Cmd", "model": "slack-slash"}},
                          bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
    async with running_gateway(config) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)

        whoami = await fake_slack.slash_command("U0ADA", "D0ADA", "/whoami")
        (answer,) = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.channel == "D0ADA"])
        assert answer.user == "U0ADA" and answer.text.startswith("I know you as one person with 1 account")
        assert fake_slack.acked(whoami)

        # In a channel, without mentioning the bot: the command is addressed to the app by name.
        await fake_slack.slash_command("U0BOB", "C0GEN", "/help")
        (help_,) = await fake_slack.wait_for(lambda: [e for e in fake_slack.ephemerals if e.channel == "C0GEN"])
        assert help_.user == "U0BOB" and "/whoami" in help_.text
        await fake_slack.slash_command("U0BOB", "C0GEN", "/memory", "stop Nothing.md")
        await fake_slack.wait_for(lambda: len([e for e in fake_slack.ephemerals if e.channel == "C0GEN"]) == 2)
        assert "try /help" not in fake_slack.ephemerals[-1].text
        assert recorder.requests == [] and fake_slack.bot_messages() == []  # nothing ran, nothing public
