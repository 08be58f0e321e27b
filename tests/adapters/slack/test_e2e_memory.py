"""`/memory` on Slack end to end: a Block Kit card with buttons per note, clicks through slack-bolt
against the fake Slack and the real daemon, the card updated in place, and what the next run's
model is given. The store a click acts on is the conversation's, never the button's."""

from __future__ import annotations

from pathlib import Path

from gateway.daemon import Gateway
from gateway.inbound.memory_card import note_ref
from gateway.store.notes import CHAT, PERSON, Holder, NoteStore
from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack, PostedMessage
from tests.support import memory_cards
from tests.support.memory_cards import GIVEN, note_names, seed

from .conftest import eventually


def _config(tmp_path: Path, fake: FakeSlack, **binding: object) -> Path:
    memory_cards.register()
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN", "mode": "socket",
             "api_url": fake.api_url}
    return write_config(tmp_path / "config", agents={"assistant": memory_cards.AGENT},
                        bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack, **binding}})


def _card(fake: FakeSlack, channel: str) -> PostedMessage | None:
    return next((m for m in fake.bot_messages(channel) if m.blocks and m.blocks[0].get("block_id") == "gw_mem_head"), None)


def _button(card: PostedMessage, label: str, note: str | None = None) -> str:
    """The value of the button `label` on `note`'s row (or on the card's last row)."""
    blocks = card.blocks or []
    for n, block in enumerate(blocks):
        if block["type"] != "actions":
            continue
        above = blocks[n - 1]["text"]["text"] if n and blocks[n - 1]["type"] == "section" else ""
        if (note is None and block["block_id"] == "gw_mem_all") or (note is not None and f"/{note}`" in above):
            return next(e["value"] for e in block["elements"] if e["text"]["text"].startswith(label))
    raise LookupError(f"no {label!r} button for {note!r}")


def _text(card: PostedMessage) -> str:
    return "\n".join(str(b.get("text", {}).get("text", "")) for b in card.blocks or [] if b["type"] == "section")


def _forged(card: PostedMessage, value: str) -> PostedMessage:
    """The card as a forged client would send it: a memory button carrying `value`."""
    forged = PostedMessage(card.channel, card.ts, card.text, card.user, card.thread_ts, card.bot_id)
    forged.blocks = [{"type": "actions", "block_id": "gw_mem_buttons_0", "elements": [
        {"type": "button", "action_id": "gw_mem_0_1", "text": {"type": "plain_text", "text": "Delete"}, "value": value}]}]
    return forged


async def _ask(gw: Gateway, fake: FakeSlack, channel: str, user: str, text: str) -> None:
    before = len(GIVEN)
    _, envelopes = await fake.say(channel, user, text)
    await fake.wait_for(lambda: all(fake.acked(e) for e in envelopes))
    await eventually(lambda: len(GIVEN) > before and not gw.scheduler.active)


async def _click(gw: Gateway, fake: FakeSlack, user: str, card: PostedMessage, value: str) -> None:
    edits = len(fake.message(card.channel, card.ts).block_edits)  # type: ignore[union-attr]
    ephemerals = len(fake.ephemerals)
    envelope = await fake.click(user, card, value)
    await fake.wait_for(lambda: fake.acked(envelope))
    await eventually(lambda: len(fake.message(card.channel, card.ts).block_edits) > edits  # type: ignore[union-attr]
                     or len(fake.ephemerals) > ephemerals)


async def test_a_dm_card_stops_restores_deletes_and_erases_only_after_confirmation(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        notes = NoteStore(gw.store)
        ada = Holder(PERSON, (await gw.store.identify("slack", "T0TEAM", "U0ADA", "Ada")).person_id)
        bob = Holder(PERSON, (await gw.store.identify("slack", "T0TEAM", "U0BOB", "Bob")).person_id)
        await seed(gw.store, ada, {"diet.md": "vegetarian", "team.md": "platform"})
        await seed(gw.store, bob, {"salary.md": "secret-figure"})

        _, envelopes = await fake_slack.say("D0ADA", "U0ADA", "!memory")
        card = await fake_slack.wait_for(lambda: _card(fake_slack, "D0ADA"))
        assert "assistant/diet.md" in _text(card) and "secret-figure" not in _text(card)
        assert all(len(e["value"].encode()) <= 24 and "diet" not in e["value"]
                   for b in card.blocks or [] if b["type"] == "actions" for e in b["elements"]), "opaque, short ids"

        # Stop using: the next run is given neither the note nor its index line.
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Stop using", "diet.md"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        assert "Stopped using `assistant/diet.md`" in _text(card) and "stopped: no agent reads it" in _text(card)
        await _ask(gw, fake_slack, "D0ADA", "U0ADA", "what do you know about me?")
        assert note_names(GIVEN[-1].listed) == {"MEMORY.md", "team.md"}
        assert "vegetarian" not in GIVEN[-1].instructions and "platform" in GIVEN[-1].instructions

        # Use again: listed again (the index line stays gone: the agent writes the index).
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Use again", "diet.md"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        await _ask(gw, fake_slack, "D0ADA", "U0ADA", "and now?")
        assert "diet.md" in note_names(GIVEN[-1].listed)

        # A forged button naming Bob's note changes nothing and says so, to Ada alone.
        [bobs] = [n for n in await notes.held(bob) if n.name == "salary.md"]
        forged = _forged(card, f"d:{note_ref(bobs)}")
        await _click(gw, fake_slack, "U0ADA", forged, f"d:{note_ref(bobs)}")
        assert fake_slack.ephemerals[-1].user == "U0ADA" and "gone or isn't yours" in fake_slack.ephemerals[-1].text
        assert "salary.md" in {n.name for n in await notes.held(bob)}

        # Delete; the same button pressed again on a stale card changes nothing.
        delete_team = _button(card, "Delete", "team.md")
        await _click(gw, fake_slack, "U0ADA", card, delete_team)
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        assert "Deleted `assistant/team.md`." in _text(card)
        assert {n.name for n in await notes.held(ada)} == {"MEMORY.md", "diet.md"}
        await _click(gw, fake_slack, "U0ADA", _forged(card, delete_team), delete_team)
        assert "gone or isn't yours" in fake_slack.ephemerals[-1].text

        # Erase all asks first; asking erases nothing, cancelling neither.
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Erase all"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        assert "Erase all 2 notes about you?" in _text(card)
        assert len(await notes.held(ada)) == 2
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Cancel"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        assert "Nothing was erased." in _text(card) and len(await notes.held(ada)) == 2
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Erase all"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Yes, erase"))
        card = fake_slack.message("D0ADA", card.ts)  # type: ignore[assignment]
        assert "Erased 2 notes." in _text(card)
        assert await notes.held(ada) == [] and len(await notes.held(bob)) == 2, "only Ada's notes went"


async def test_in_a_channel_the_card_is_the_chats_notes_and_only_deciders_change_them(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    config = _config(tmp_path, fake_slack, approvals={"deciders": ["U0ADA"]})
    async with running_gateway(config) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        notes = NoteStore(gw.store)
        room = Holder(CHAT, "slack:T0TEAM:C0GEN")
        ada = Holder(PERSON, (await gw.store.identify("slack", "T0TEAM", "U0ADA", "Ada")).person_id)
        await seed(gw.store, room, {"standup.md": "at nine"})
        await seed(gw.store, ada, {"diet.md": "vegetarian"})

        envelope = await fake_slack.slash_command("U0BOB", "C0GEN", "/memory")
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        card = await fake_slack.wait_for(lambda: _card(fake_slack, "C0GEN"))
        assert "What agents keep for this chat" in _text(card) and "assistant/standup.md" in _text(card)
        assert "diet.md" not in _text(card), "a person's DM notes never appear in a channel"

        # Bob may not change the chat's notes: he alone is told, and nothing changes.
        await _click(gw, fake_slack, "U0BOB", card, _button(card, "Stop using", "standup.md"))
        assert (fake_slack.ephemerals[-1].user, fake_slack.ephemerals[-1].text) == (
            "U0BOB", "Only U0ADA can change this chat's notes.")
        assert all(not n.suppressed for n in await notes.held(room))

        # A forged button naming Ada's own DM note does nothing in the channel, even for Ada.
        [diet] = [n for n in await notes.held(ada) if n.name == "diet.md"]
        await _click(gw, fake_slack, "U0ADA", _forged(card, f"s:{note_ref(diet)}"), f"s:{note_ref(diet)}")
        assert "gone or isn't yours" in fake_slack.ephemerals[-1].text
        assert all(not n.suppressed for n in await notes.held(ada))

        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Stop using", "standup.md"))
        card = fake_slack.message("C0GEN", card.ts)  # type: ignore[assignment]
        assert "Stopped using `assistant/standup.md` (Ada)" in _text(card)
        assert [n.name for n in await notes.held(room) if n.suppressed] == ["standup.md"]


async def _refused(fake: FakeSlack, user: str) -> str:
    """The next private answer to `user` in C0GEN (a refusal is said to them alone)."""
    seen = len(fake.ephemerals)
    told = await fake.wait_for(lambda: [e for e in fake.ephemerals[seen:] if e.user == user and e.channel == "C0GEN"])
    return told[0].text


async def test_under_deciders_channel_someone_the_platform_does_not_count_in_the_chat_changes_no_note(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    """The attack: Eve is in the workspace but not in #general (she previews a public channel, or
    left it); the card's buttons reach her all the same. Approvals ask Slack whether she is in the
    channel; a change to the chat's notes must ask the same, not trust that the click came from there."""
    fake_slack.add_user("U0EVE", "eve", display_name="Eve")
    config = _config(tmp_path, fake_slack, approvals={"deciders": "channel"})
    async with running_gateway(config) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        notes = NoteStore(gw.store)
        room = Holder(CHAT, "slack:T0TEAM:C0GEN")
        await seed(gw.store, room, {"standup.md": "at nine", "oncall.md": "Ada this week"})

        envelope = await fake_slack.slash_command("U0BOB", "C0GEN", "/memory")
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        card = await fake_slack.wait_for(lambda: _card(fake_slack, "C0GEN"))

        asked = len(fake_slack.calls_to("conversations.members"))
        await _click(gw, fake_slack, "U0EVE", card, _button(card, "Delete", "standup.md"))
        assert "standup.md" in {n.name for n in await notes.held(room)}, "Eve deleted the chat's note"
        assert fake_slack.ephemerals[-1].user == "U0EVE"
        assert "the chat platform does not confirm you are in it" in fake_slack.ephemerals[-1].text
        assert len(fake_slack.calls_to("conversations.members")) > asked, "Slack was asked, not the click trusted"
        await _click(gw, fake_slack, "U0EVE", card, _button(card, "Erase all"))
        assert "does not confirm you are in it" in fake_slack.ephemerals[-1].text
        assert {n.name for n in await notes.held(room)} == {"MEMORY.md", "standup.md", "oncall.md"}
        assert fake_slack.message("C0GEN", card.ts).block_edits == [], "the card is as it was"  # type: ignore[union-attr]

        # Bob is in the channel, as Slack says: he may.
        await _click(gw, fake_slack, "U0BOB", card, _button(card, "Delete", "standup.md"))
        card = fake_slack.message("C0GEN", card.ts)  # type: ignore[assignment]
        assert "Deleted `assistant/standup.md` (Bob)." in _text(card)
        assert {n.name for n in await notes.held(room)} == {"MEMORY.md", "oncall.md"}


async def test_under_deciders_requester_only_whoever_would_decide_every_run_in_the_chat_changes_its_notes(
        tmp_path: Path, fake_slack: FakeSlack) -> None:
    """The attack: Ada asked the agent in #general, so the chat's notes serve her requests, which
    only she decides (`deciders: requester`, the default). Bob, who never asked anything, may not
    erase them with the card or the command; once both have asked, neither decides for the other."""
    async with running_gateway(_config(tmp_path, fake_slack)) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        notes = NoteStore(gw.store)
        room = Holder(CHAT, "slack:T0TEAM:C0GEN")
        await seed(gw.store, room, {"standup.md": "at nine"})
        await _ask(gw, fake_slack, "C0GEN", "U0ADA", "<@U0BOT> what do we keep here?")

        envelope = await fake_slack.slash_command("U0BOB", "C0GEN", "/memory")
        await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
        card = await fake_slack.wait_for(lambda: _card(fake_slack, "C0GEN"))

        await _click(gw, fake_slack, "U0BOB", card, _button(card, "Erase all"))
        assert "cannot be undone" not in _text(fake_slack.message("C0GEN", card.ts)), "Bob was asked to confirm"  # type: ignore[arg-type]
        assert (fake_slack.ephemerals[-1].user, fake_slack.ephemerals[-1].text) == (
            "U0BOB", "Only Ada can change this chat's notes.")
        await fake_slack.slash_command("U0BOB", "C0GEN", "/memory", "delete standup.md")
        assert await _refused(fake_slack, "U0BOB") == "Only Ada can change this chat's notes."
        assert {n.name for n in await notes.held(room)} == {"MEMORY.md", "standup.md"}

        # Ada is the one person who has asked here: she decides every run, so she may.
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Stop using", "standup.md"))
        card = fake_slack.message("C0GEN", card.ts)  # type: ignore[assignment]
        assert "Stopped using `assistant/standup.md` (Ada)" in _text(card)

        # Bob asks too, in a thread of his own: now nobody changes the notes for the other.
        await _ask(gw, fake_slack, "C0GEN", "U0BOB", "<@U0BOT> and what about me?")
        await _click(gw, fake_slack, "U0ADA", card, _button(card, "Use again", "standup.md"))
        assert fake_slack.ephemerals[-1].user == "U0ADA"
        assert "several people have asked the agent in this chat" in fake_slack.ephemerals[-1].text
        assert [n.name for n in await notes.held(room) if n.suppressed] == ["standup.md"]
