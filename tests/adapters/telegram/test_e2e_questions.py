"""A question put to the person in a Telegram chat, end to end: an MCP server's elicitation through the real
daemon, python-telegram-bot and the fake Bot API — declined with a button, left to expire (the server is
told `cancel`), a press on the expired card, and a server that asks two questions at once (one is shown,
the other cancelled unasked), or keeps asking (cut off after five a run); and a handshake-era server's
sampling request under `sampling: ask`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import ChatMessage, FakeTelegram
from tests.support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from tests.test_mcp import SERVER

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

ADA = FakeTelegram.user(42, "Ada", "ada")


# Time runs twenty times faster for the rate budgets, on the fake and in the adapter alike (as in
# test_budget.py): at Telegram's own (a message a second in a chat) each question round of a card's
# edit and the next card waits about two seconds for nothing these tests check.
SCALE = 0.05
GATEWAY = {"plugins": ["tests.support.plugin_mcp"], "limits": {"platform_budget_scale": SCALE}}


# Short enough that the unanswered card expires within the test, long enough that a press made at once
# lands before its card expires on a loaded machine (at 1 s a 1.6 s stall of a starting daemon's loop
# expired the pester card before its "Yes" arrived, in a fresh-clone run).
QUESTION_SECONDS = 4.0


def tg_config(tmp: Path, fake: FakeTelegram, log: Path, **approvals: float) -> Path:
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    return write_config(tmp, agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": [
        {"name": "tracker", "command": sys.executable, "args": [str(SERVER), "--extras"], "env": {"MCP_LOG": str(log)},
         "tools": {"release": "allow", "pester": "allow"}, "elicitation": "ask"}]}},
        bindings={"tg": {"platform": "telegram", "agent": "ops", "telegram": telegram, "admission": {"dm": "open"},
                         "approvals": approvals}},
        gateway=GATEWAY)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTelegram:
    async with FakeTelegram(budget_scale=SCALE) as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.private_chat(ADA)
        yield server


def cards(fake: FakeTelegram) -> list[ChatMessage]:
    return [m for m in fake.sent(ADA["id"]) if "MCP server ask" in m.text]


def button(card: ChatMessage, label: str) -> str:
    return next(b["callback_data"] for b in card.buttons if b["text"] == label)


async def said(fake: FakeTelegram, text: str) -> None:
    await fake.wait_for(lambda: any(m.text == text for m in fake.sent(ADA["id"])), what=repr(text))


async def test_declined_expired_and_flooding_elicitations(tmp_path: Path, fake: FakeTelegram) -> None:
    async with running_gateway(tg_config(tmp_path / "c", fake, tmp_path / "mcp.log", question_timeout=QUESTION_SECONDS)) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding")
        await wait_for(lambda: gw.mcp.existing("ops", "tracker").state == "up", timeout=30, what="the server")

        fake.push_message(ADA["id"], ADA, "tracker_release api")
        card = await fake.wait_for(lambda: next(iter(cards(fake)), None), what="a question card")
        # The question's HTML and mention are shown as text (the fake parses the HTML the Bot API would).
        assert "<b>bold</b> @everyone" in card.text and "Only Ada can answer." in card.text
        assert [b["text"] for b in card.buttons] == ["Yes", "No", "Decline"]
        assert all(len(b["callback_data"].encode()) <= 64 for b in card.buttons)
        pressed = fake.push_callback(ADA, card, button(card, "Decline"))
        await said(fake, "[tracker_release success: release api: decline]")
        assert fake.answers[pressed].get("show_alert") is False
        await fake.wait_for(lambda: "Declined by Ada." in card.text and not card.buttons, what="the card closed")

        fake.push_message(ADA["id"], ADA, "tracker_release web")
        expiring = await fake.wait_for(lambda: len(cards(fake)) == 2 and cards(fake)[-1], what="a second card")
        stale = button(expiring, "Yes")
        await said(fake, "[tracker_release success: release web: cancel]")  # nobody answered in time
        await fake.wait_for(lambda: "Expired: nobody answered in time." in expiring.text and not expiring.buttons)
        late = fake.push_callback(ADA, expiring, stale)
        await fake.wait_for(lambda: late in fake.answers, what="the late press answered")
        assert fake.answers[late]["text"] == "This question is no longer open." and fake.answers[late]["show_alert"]

        # Two questions at once: one card; the other is cancelled without being shown.
        fake.push_message(ADA["id"], ADA, "tracker_pester api")
        pester = await fake.wait_for(lambda: len(cards(fake)) == 3 and cards(fake)[-1], what="one pester card")
        fake.push_callback(ADA, pester, button(pester, "Yes"))
        await said(fake, "[tracker_pester success: pester api: [\"accepted {'sure': True}\", 'cancel']]")
        assert len(cards(fake)) == 3


LEGACY = Path(__file__).resolve().parents[2] / "support" / "legacy_mcp_server.py"


async def test_sampling_ask_shows_each_request_and_answers_only_when_accepted(tmp_path: Path, fake: FakeTelegram) -> None:
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    cfg = write_config(tmp_path / "c", agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": [
        {"name": "legacy", "command": sys.executable, "args": [str(LEGACY)], "env": {"MCP_LOG": str(tmp_path / "l")},
         "tools": {"ask_model": "allow"}, "sampling": "ask"}]}},
        bindings={"tg": {"platform": "telegram", "agent": "ops", "telegram": telegram, "admission": {"dm": "open"}}},
        gateway=GATEWAY)
    async with running_gateway(cfg) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding")
        await wait_for(lambda: gw.mcp.existing("ops", "legacy").state == "up", timeout=30, what="the server")
        fake.push_message(ADA["id"], ADA, 'legacy_ask_model {"question": "what is 2+2?"}')
        card = await fake.wait_for(lambda: next(iter(cards(fake)), None), what="the sampling request's card")
        # What the server asks the model, and its ceiling, before anyone lets the model answer.
        assert "wants this agent's model to answer:\nwhat is 2+2?" in card.text and "At most 50 tokens." in card.text
        assert [b["text"] for b in card.buttons] == ["Let the model answer", "Refuse"]
        fake.push_callback(ADA, card, button(card, "Let the model answer"))
        await said(fake, "[legacy_ask_model success: the model said: echo: what is 2+2?]")
        await fake.wait_for(lambda: "Answered by Ada." in card.text, what="the card closed")

        fake.push_message(ADA["id"], ADA, 'legacy_ask_model {"question": "and 3+3?"}')
        second = await fake.wait_for(lambda: len(cards(fake)) == 2 and cards(fake)[-1], what="the second card")
        fake.push_callback(ADA, second, button(second, "Refuse"))
        await said(fake, "[legacy_ask_model success: sampling refused: Sampling declined by the person.]")


async def test_a_server_that_keeps_asking_is_cut_off_after_five_questions_a_run(tmp_path: Path, fake: FakeTelegram) -> None:
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    cfg = write_config(tmp_path / "c", agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": [
        {"name": "legacy", "command": sys.executable, "args": [str(LEGACY)], "env": {"MCP_LOG": str(tmp_path / "l")},
         "tools": {"nag": "allow"}, "elicitation": "ask"}]}},
        bindings={"tg": {"platform": "telegram", "agent": "ops", "telegram": telegram, "admission": {"dm": "open"}}},
        gateway=GATEWAY)
    async with running_gateway(cfg) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the Telegram binding")
        await wait_for(lambda: gw.mcp.existing("ops", "legacy").state == "up", timeout=30, what="the server")
        fake.push_message(ADA["id"], ADA, 'legacy_nag {"times": 7}')  # a handshake-era server: asked beside the call
        for n in range(1, 6):
            card = await fake.wait_for(lambda: len(cards(fake)) == n and cards(fake)[-1].buttons and cards(fake)[-1],
                                       what=f"question {n}")
            assert f"Are we there yet? ({n})" in card.text
            fake.push_callback(ADA, card, button(card, "Decline"))
        await said(fake, "[legacy_nag success: nag: decline,decline,decline,decline,decline,cancel,cancel]")
        assert len(cards(fake)) == 5, "past five questions a run, the server is told cancel without anyone asked"
