"""The `/memory` card model and its renderings, pure: what a button carries and what fits where."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from adapters.mattermost import actions as mattermost_actions
from adapters.mattermost import cards as mattermost
from adapters.slack.cards import memory_message
from adapters.telegram.cards import MAX_CALLBACK_BYTES, memory_keyboard, parse_callback_data, parse_memory_data
from gateway.inbound.memory_card import MAX_SHOWN, MemoryAction, build_card, note_ref, parse_data
from gateway.store.notes import CHAT, PERSON, Holder, Note

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
HOLDER = Holder(PERSON, "p-" + "x" * 30)


def _note(n: int, name: str | None = None, **kw: object) -> Note:
    fields: dict[str, object] = {"agent_id": "a" * 100, "name": name or f"{'n' * 90}{n:03d}.md", "content": "secret text",
                                 "suppressed": False, "created_at": T0, "updated_at": T0, "note_id": 2**31 - n}
    fields.update(kw)
    return Note(**fields)  # type: ignore[arg-type]


def test_a_button_names_the_note_by_id_and_fingerprint_never_by_its_text() -> None:
    note = _note(1)
    ref = note_ref(note)
    assert note.name not in ref and "secret" not in ref and ref.startswith(f"{note.note_id:x}.")
    # The row id reused by another note (SQLite may reuse a deleted max rowid): a different ref.
    assert note_ref(_note(1, name="other.md")) != ref
    assert note_ref(_note(1, created_at=T0 + timedelta(microseconds=1))) != ref
    # A note revived by a new write keeps its row and its ref (it is the same note).
    assert note_ref(_note(1, content="new", updated_at=T0 + timedelta(days=1))) == ref
    assert parse_data("s:" + ref) == (MemoryAction.STOP, ref) and parse_data("x:" + ref) is None
    assert parse_data("no colon") is None


def test_every_button_fits_telegram_and_is_not_an_approval() -> None:
    card = build_card([_note(n) for n in range(MAX_SHOWN + 5)], HOLDER, confirm="Zz-_" * 4)
    datas = [b.callback_data for row in memory_keyboard(card).inline_keyboard for b in row]
    assert datas and all(len(str(d).encode()) <= MAX_CALLBACK_BYTES for d in datas)
    assert all(parse_callback_data(str(d)) is None and parse_memory_data(str(d)) for d in datas)
    assert len(card.lines) == MAX_SHOWN and "5 more not shown" in card.footer


def test_slack_blocks_stay_under_fifty_and_mattermost_signs_per_channel() -> None:
    card = build_card([_note(n) for n in range(MAX_SHOWN + 5)], Holder(CHAT, "slack:T:C"),
                      footer="Changing them is for the people who may decide approvals here.")
    _, blocks = memory_message(card)
    assert len(blocks) <= 50
    key = mattermost_actions.action_key("token", "mm")
    props = mattermost.memory_props(card, url="http://gw/mattermost/actions/mm", key=key, binding_id="mm", channel_id="C1")
    context = props["attachments"][0]["actions"][0]["integration"]["context"]
    signed = mattermost_actions.verify(key, context, binding_id="mm", channel_id="C1")
    assert signed is not None and signed.kind == "memory" and signed.values == (context["memory"],)
    assert mattermost_actions.verify(key, context, binding_id="mm", channel_id="C2") is None, "signed for one channel"


def test_erase_all_asks_first_and_an_empty_store_offers_nothing() -> None:
    card = build_card([_note(1)], HOLDER)
    assert [b.label for b in card.actions] == ["Erase all…"]
    asked = build_card([_note(1)], HOLDER, confirm="nonce")
    assert [b.data for b in asked.actions] == ["y:nonce", "n:"] and "cannot be undone" in asked.status
    empty = build_card([], HOLDER, confirm="nonce")
    assert empty.actions == () and empty.status == "No agent has written anything about you."
