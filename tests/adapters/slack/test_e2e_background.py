"""A background delegation on Slack end to end (the real adapter against the fake Slack): in Ada's thread the
agent says the work is under way and its turn ends; when the delegate finishes, a report card lands in the same
thread — a quoted report under a bold heading, not a message anyone typed — and the agent's continuing reply follows."""

from __future__ import annotations

from pathlib import Path

from gateway.store import repo
from tests.capabilities.held import GATES, gate
from tests.capabilities.scripted import say_calls
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack

from .conftest import eventually


def _config(tmp_path: Path, fake: FakeSlack) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    assistant = {"name": "Assistant", "model": "held", "subagents": ["researcher"],
                 "capabilities": [{"id": "subagents", "config": {"mode": "async"}}]}
    researcher = {"name": "Researcher", "description": "Finds things out", "model": "held"}
    return write_config(tmp_path / "config", agents={"assistant": assistant, "researcher": researcher},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})


async def test_the_report_lands_in_the_thread_as_a_card_then_the_agent_continues(tmp_path: Path,
                                                                                fake_slack: FakeSlack) -> None:
    GATES.clear()
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        ask = say_calls(("task", {"agent": "researcher", "prompt": "HOLD:bg compare the three vendors"}))
        root, _ = await fake_slack.say("C0GEN", "U0ADA", f"<@U0BOT> {ask}")

        def in_thread() -> list[str]:
            return [m.text for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts]

        started = await fake_slack.wait_for(lambda: [t for t in in_thread() if "Started in the background" in t])
        assert len(started) == 1
        [first] = await wait_for(lambda: gw.store.runs_in(list(repo.ENDED)), what="the first turn to end")
        assert first.status == repo.FINISHED, "the turn that started it ended at once"

        gate("bg").set()
        await fake_slack.wait_for(lambda: len(in_thread()) >= 3, timeout=15)
        reply, card, continued = in_thread()[:3]
        assert reply == started[0]
        assert card.startswith("*📋 Report from background run ") and "(researcher, started by Ada): finished.*" in card
        assert "\n> " in card and "You said: HOLD:bg compare the three vendors" in card
        assert continued and not continued.startswith("*📋"), "the continuing turn is the agent's own reply"

        async def all_ended() -> bool:
            runs = await gw.store.runs_in([repo.QUEUED, repo.RUNNING, repo.PARKED])
            return not runs

        await wait_for(all_ended, what="the continuing turn to end")
        messages = await gw.store.messages(first.conversation_id)
        assert [m.role for m in messages] == ["user", "assistant", "report", "assistant"]
