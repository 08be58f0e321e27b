"""`/memory` on Telegram end to end: an inline keyboard under the card (callback_data: a short
opaque id, never note text), callback queries through python-telegram-bot against the fake Bot
API and the real daemon, the card edited in place, and what the next run's model is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.clock import ManualClock
from gateway.daemon import Gateway
from gateway.inbound.memory_card import note_ref
from gateway.store.notes import CHAT, PERSON, Holder, NoteStore
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import ChatMessage, FakeTelegram
from tests.support import memory_cards
from tests.support.memory_cards import GIVEN, note_names, seed
from tests.support.patience import AUTOJUMP

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

from .team import ADA, BOB, GROUP_ID, fake  # noqa: F401  (fake: the fixture)


def _config(tmp_path: Path, fake: FakeTelegram, **binding: object) -> Path:
    memory_cards.register()
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    return write_config(tmp_path / "config", agents={"assistant": memory_cards.AGENT}, bindings={"tg": {
        "platform": "telegram", "agent": "assistant", "telegram": telegram, "admission": {"dm": "open"}, **binding}})


async def _holder(gw: Gateway, fake: FakeTelegram, user: dict[str, object]) -> Holder:
    person = (await gw.store.identify("telegram", str(fake.bot_id), str(user["id"]), str(user["first_name"]))).person_id
    return Holder(PERSON, person)


def _data(card: ChatMessage, label: str, row: int | None = None) -> str:
    rows = (card.reply_markup or {}).get("inline_keyboard") or []
    buttons = rows[row] if row is not None else [b for r in rows for b in r]
    return next(b["callback_data"] for b in buttons if label in b["text"])


async def _press(fake: FakeTelegram, who: dict[str, object], card: ChatMessage, data: str) -> dict[str, object]:
    query = fake.push_callback(who, card, data)
    await fake.wait_for(lambda: query in fake.answers, what="the click answered")
    return fake.answers[query]


async def test_a_dm_card_stops_and_restores_and_a_forged_callback_changes_nothing(
        tmp_path: Path, fake: FakeTelegram) -> None:
    clock = fake.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's: the budgets count in its time
    async with running_gateway(_config(tmp_path, fake), clock=clock) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the binding to connect")
        notes = NoteStore(gw.store)
        ada, bob = await _holder(gw, fake, ADA), await _holder(gw, fake, BOB)
        await seed(gw.store, ada, {"diet.md": "vegetarian"})
        await seed(gw.store, bob, {"salary.md": "secret-figure"})

        fake.push_message(ADA["id"], ADA, "/memory")
        card = await fake.wait_for(lambda: next((m for m in fake.sent(ADA["id"]) if m.buttons), None), what="a card")
        assert "assistant/diet.md" in card.text and "What agents wrote about you" in card.text
        assert all(len(b["callback_data"].encode()) <= 64 and "diet" not in b["callback_data"] for b in card.buttons)

        # Row 1 is MEMORY.md, row 2 diet.md (by name).
        answer = await _press(fake, ADA, card, _data(card, "Stop using", row=1))
        assert not answer.get("show_alert")
        await fake.wait_for(lambda: "Stopped using" in card.text, what="the card edited in place")
        assert "2. Use again" in [b["text"] for b in card.buttons]

        before = len(GIVEN)
        fake.push_message(ADA["id"], ADA, "what do you know about me?")
        await wait_for(lambda: len(GIVEN) > before and not gw.scheduler.active, what="a run")
        assert note_names(GIVEN[-1].listed) == {"MEMORY.md"} and "vegetarian" not in GIVEN[-1].instructions

        await _press(fake, ADA, card, _data(card, "Use again"))
        await fake.wait_for(lambda: "in use again" in card.text, what="the card edited in place")
        fake.push_message(ADA["id"], ADA, "and now?")
        await wait_for(lambda: len(GIVEN) > before + 1 and not gw.scheduler.active, what="a run")
        assert "diet.md" in note_names(GIVEN[-1].listed)

        # A forged callback naming Bob's note, from Ada's own chat: refused, nothing changes.
        [salary] = [n for n in await notes.held(bob) if n.name == "salary.md"]
        shown = card.text
        answer = await _press(fake, ADA, card, f"m.d:{note_ref(salary)}")
        assert answer["show_alert"] is True and "gone or isn't yours" in str(answer["text"])
        assert {n.name for n in await notes.held(bob)} == {"MEMORY.md", "salary.md"} and card.text == shown

        # Erase all needs its confirmation.
        await _press(fake, ADA, card, _data(card, "Erase all"))
        await fake.wait_for(lambda: "Erase all 2 notes about you?" in card.text, what="the question")
        assert len(await notes.held(ada)) == 2
        await _press(fake, ADA, card, _data(card, "Yes, erase"))
        await fake.wait_for(lambda: "Erased 2 notes." in card.text, what="the erasure")
        assert await notes.held(ada) == [] and len(await notes.held(bob)) == 2


async def test_in_a_group_the_card_is_the_chats_notes(tmp_path: Path, fake: FakeTelegram) -> None:
    async with running_gateway(_config(tmp_path, fake)) as gw:
        await wait_for(lambda: gw.adapters["tg"].health().connected, what="the binding to connect")
        notes = NoteStore(gw.store)
        room = Holder(CHAT, f"telegram:{fake.bot_id}:{GROUP_ID}")
        ada = await _holder(gw, fake, ADA)
        await seed(gw.store, room, {"standup.md": "at nine"})
        await seed(gw.store, ada, {"diet.md": "vegetarian"})

        fake.push_message(GROUP_ID, ADA, "/memory", entities=[{"type": "bot_command", "offset": 0, "length": 7}])
        card = await fake.wait_for(lambda: next((m for m in fake.sent(GROUP_ID) if m.buttons), None), what="a card")
        assert "What agents keep for this chat" in card.text and "standup.md" in card.text
        assert "diet.md" not in card.text and "vegetarian" not in card.text

        # Ada's own DM note, named by a forged callback in the group: not this chat's, nothing changes.
        [diet] = [n for n in await notes.held(ada) if n.name == "diet.md"]
        answer = await _press(fake, ADA, card, f"m.s:{note_ref(diet)}")
        assert "gone or isn't yours" in str(answer["text"]) and not any(n.suppressed for n in await notes.held(ada))

        # Nobody has asked the agent anything in this group yet (`/memory` is a command, not a request), so
        # under the default `deciders: requester` anyone here may change the chat's notes.
        await _press(fake, BOB, card, _data(card, "Delete", row=1))
        await fake.wait_for(lambda: "Deleted `assistant/standup.md` (Bob)." in card.text, what="the deletion")
        assert [n.name for n in await notes.held(room)] == ["MEMORY.md"]
