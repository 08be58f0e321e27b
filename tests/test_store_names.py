"""People's names in the store, the same on both engines: cut to the columns' 200 characters where they enter.

PostgreSQL enforces the name columns' `String(200)` (sender_name, requester_name, display_name) and SQLite
does not: a Slack display name of 500 characters was refused on PostgreSQL (the message not stored, so
never answered) and kept whole on SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.adapters.slack.conftest import fake_slack, slack_env  # noqa: F401  (fixtures)
from tests.conftest import database_url, running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack
from tests.support.settled import settled

# Non-BMP characters (four bytes in UTF-8, one character to both engines): the cut falls between two.
LONG_NAME = "Ada " + "🦊" * 496


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_500_character_display_names_message_is_stored_and_answered(
        tmp_path: Path, engine: str, fake_slack: FakeSlack) -> None:
    fake_slack.add_user("U0LONG", "long", real_name="Long Name", display_name=LONG_NAME)
    fake_slack.channels["C0GEN"].members.append("U0LONG")
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake_slack.api_url}
    async with database_url(engine, tmp_path) as url:
        config = write_config(tmp_path / "config", gateway={"database": {"url": url}},
                              bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
        async with running_gateway(config) as gw:
            await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack connected")
            root, _ = await fake_slack.say("C0GEN", "U0LONG", "<@U0BOT> hello with a long name")
            await fake_slack.wait_for(lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts])
            await settled(gw, fake_slack)
            answers = [m.text for m in fake_slack.bot_messages("C0GEN") if m.thread_ts == root.ts]
            assert len(answers) == 1 and answers[0].endswith("hello with a long name"), answers
            async with gw.store.engine.connect() as db:
                names = {
                    "sender_name": (await db.execute(sa.text(
                        "SELECT sender_name FROM messages WHERE role = 'user' AND account_id = 'U0LONG'"))).scalars().all(),
                    "requester_name": (await db.execute(sa.text(
                        "SELECT requester_name FROM runs WHERE requester_account = 'U0LONG'"))).scalars().all(),
                    "accounts": (await db.execute(sa.text(
                        "SELECT display_name FROM accounts WHERE account_id = 'U0LONG'"))).scalars().all(),
                    "people": (await db.execute(sa.text(
                        "SELECT p.display_name FROM people p JOIN accounts a ON a.person_id = p.id"
                        " WHERE a.account_id = 'U0LONG'"))).scalars().all(),
                }
    assert {key: [len(v) for v in values] for key, values in names.items()} == {key: [200] for key in names}
    assert names == {key: [LONG_NAME[:200]] for key in names}


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_decider_with_a_500_character_name_approves_and_the_call_runs(
        tmp_path: Path, engine: str, fake_slack: FakeSlack) -> None:
    """A decider's name is stored with the decision (`approvals.decided_by`): it reaches the store from the
    click, not through `identify`, and PostgreSQL refused it whole (the click answered nothing, the run parked)."""
    from tests.adapters.slack.test_e2e_approvals import MODEL, _model, buttons, card_of
    from tests.support.gated_git import CAPABILITY, RAN
    from gateway.runs.llm import register_model

    RAN.clear()
    register_model(MODEL, _model)
    fake_slack.add_user("U0LONG", "long", real_name="Long Name", display_name=LONG_NAME)
    fake_slack.channels["C0GEN"].members.append("U0LONG")
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "mode": "socket", "api_url": fake_slack.api_url}
    async with database_url(engine, tmp_path) as url:
        config = write_config(
            tmp_path / "config", gateway={"database": {"url": url}},
            agents={"assistant": {"name": "Gated", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}},
            bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}})
        async with running_gateway(config) as gw:
            await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack connected")
            await fake_slack.say("C0GEN", "U0LONG", "<@U0BOT> delete old-feature")
            card = await fake_slack.wait_for(lambda: card_of(fake_slack))
            approve = next(v for v in buttons(card) if v.startswith("approve:"))
            await fake_slack.click("U0LONG", card, approve)
            await fake_slack.wait_for(
                lambda: [m for m in fake_slack.bot_messages("C0GEN") if m.text == "Done: deleted old-feature"])
            async with gw.store.engine.connect() as db:
                decided = (await db.execute(sa.text("SELECT decided_by FROM approvals"))).scalars().all()
    assert RAN == ["old-feature"]
    assert decided == [LONG_NAME[:200]]
