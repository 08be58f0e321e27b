"""A question put to the person in the Slack thread, end to end: an MCP server's elicitation (the project's
test server's `release`, on protocol 2026-07-28) through the real daemon, slack-bolt and the fake Slack.
The form is asked a field at a time (a boolean and an enum as buttons, a string as a reply in the thread),
only the person who asked may answer, and the question's text is shown inert."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from tests.support.settled import settled
from tests.test_mcp import SERVER, ran

from .conftest import eventually


def slack_config(tmp: Path, fake: FakeSlack, log: Path, **server: Any) -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": fake.api_url}
    return write_config(tmp, agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": [
        {"name": "tracker", "command": sys.executable, "args": [str(SERVER), "--extras"], "env": {"MCP_LOG": str(log)},
         "tools": {"release": "allow", "pester": "allow"}, **server}]}},
        bindings={"acme": {"platform": "slack", "agent": "ops", "slack": slack}},
        gateway={"plugins": ["tests.support.plugin_mcp"]})


def question(fake: FakeSlack, root: PostedMessage) -> PostedMessage | None:
    return next((m for m in fake.bot_messages(root.channel) if m.thread_ts == root.ts
                 and any(b.get("block_id") == "gw_q_head" for b in m.blocks or [])), None)


def buttons(msg: PostedMessage) -> dict[str, str]:
    """Label -> value of the card's buttons."""
    return {e["text"]["text"]: e["value"] for b in msg.blocks or [] if b.get("type") == "actions" for e in b["elements"]}


def shown(msg: PostedMessage) -> str:
    return json.dumps(msg.blocks)


def ephemerals_to(fake: FakeSlack, user: str) -> list[str]:
    return [c.args["text"] for c in fake.calls_to("chat.postEphemeral") if c.args["user"] == user]


async def test_an_elicitation_is_a_card_answered_by_the_person_who_asked(tmp_path: Path, fake_slack: FakeSlack) -> None:
    log = tmp_path / "mcp.log"
    async with running_gateway(slack_config(tmp_path / "c", fake_slack, log, elicitation="ask")) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await eventually(lambda: gw.mcp.existing("ops", "tracker").state == "up", timeout=30)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> tracker_release api")
        card = await fake_slack.wait_for(lambda: question(fake_slack, root))
        # Who asks is the server, not the agent; its markup and mentions are text, not a ping.
        assert "The tracker MCP server asks" in shown(card)
        assert "&lt;!channel&gt;" in shown(card) and "<!channel>" not in shown(card)
        assert "Only Ada can answer." in shown(card)
        assert list(buttons(card)) == ["Yes", "No", "Decline"]

        # Bob is no decider here: his click is refused to him alone and answers nothing.
        await fake_slack.click("U0BOB", card, buttons(card)["Yes"])
        await fake_slack.wait_for(lambda: "Only Ada can answer this." in ephemerals_to(fake_slack, "U0BOB"))
        assert list(buttons(card)) == ["Yes", "No", "Decline"]

        await fake_slack.click("U0ADA", card, buttons(card)["Yes"])
        await fake_slack.wait_for(lambda: list(buttons(card)) == ["staging", "prod", "Decline"])
        before = copy.deepcopy(card)  # as a client that has not refreshed still shows it
        await fake_slack.click("U0ADA", card, buttons(card)["prod"])
        await fake_slack.wait_for(lambda: "Why now?" in shown(card) and "reply in this thread" in shown(card))
        assert list(buttons(card)) == ["Decline"]

        # Ada's reply in the thread is the answer, not a new turn.
        await fake_slack.say("C0GEN", "U0ADA", "the outage fix", thread_ts=root.ts)
        done = "[tracker_release success: release api: accepted {'confirm': True, 'env': 'prod', 'reason': 'the outage fix'}]"
        await fake_slack.wait_for(lambda: any(m.text == done for m in fake_slack.bot_messages("C0GEN")))
        assert "Answered by Ada." in shown(card) and buttons(card) == {}
        assert [t for t, _ in ran(log)] == ["release"]
        # A click on the answered question (a stale button) changes nothing and says so.
        await fake_slack.click("U0ADA", before, buttons(before)["prod"])
        await fake_slack.wait_for(lambda: "This question is no longer open." in ephemerals_to(fake_slack, "U0ADA"))
        await settled(gw, fake_slack)
        assert not any("echo: the outage fix" in m.text for m in fake_slack.bot_messages("C0GEN"))
        assert [t for t, _ in ran(log)] == ["release"]


ASK_COLOR = json.dumps({"questions": [{"header": "Color", "question": "Which color should the logo be?",
                                       "options": [{"label": "red"}, {"label": "blue"}]}]})


async def test_a_sync_delegates_question_is_answered_by_the_person_never_a_model(tmp_path: Path,
                                                                                  fake_slack: FakeSlack) -> None:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "c", agents={
        "ops": {"name": "Ops", "model": "test:mcp", "subagents": ["designer"],
                "capabilities": [{"id": "subagents", "config": {"allow_questions": True}}]},
        "designer": {"name": "Designer", "description": "Draws logos", "model": "test:mcp"}},
        bindings={"acme": {"platform": "slack", "agent": "ops", "slack": slack}},
        gateway={"plugins": ["tests.support.plugin_mcp"]})
    async with running_gateway(cfg) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        task = json.dumps({"agent": "designer", "prompt": f"ask_parent {ASK_COLOR}"})
        root, _ = await fake_slack.say("C0GEN", "U0ADA", f"<@U0BOT> task {task}")
        card = await fake_slack.wait_for(lambda: question(fake_slack, root))
        assert "The delegate designer asks" in shown(card) and "Color: Which color should the logo be?" in shown(card)
        assert list(buttons(card)) == ["red", "blue", "Decline"] and "reply in this thread" in shown(card)

        # Bob may not answer: his click is refused to him, his reply is an ordinary message (a turn of its own).
        await fake_slack.click("U0BOB", card, buttons(card)["red"])
        await fake_slack.wait_for(lambda: "Only Ada can answer this." in ephemerals_to(fake_slack, "U0BOB"))
        await fake_slack.say("C0GEN", "U0BOB", "purple", thread_ts=root.ts)
        # Ada's own answer, typed: the delegate gets it as a custom answer, and the parent its result.
        await fake_slack.say("C0GEN", "U0ADA", "teal", thread_ts=root.ts)
        done = "[task success: [ask_parent success: {'Color': ['teal']}]]"
        await fake_slack.wait_for(lambda: any(m.text == done for m in fake_slack.bot_messages("C0GEN")))
        assert "Answered by Ada." in shown(card)
        await fake_slack.wait_for(lambda: any(m.text == "echo: purple" for m in fake_slack.bot_messages("C0GEN")))
        await settled(gw, fake_slack)
        assert not any("echo: teal" in m.text for m in fake_slack.bot_messages("C0GEN")), "the answer is no turn"
