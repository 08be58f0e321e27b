"""Pairing codes in the store: issue, rate limit, cap, approve, lockout, expiry, and the CLI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.ops import cli
from gateway.clock import ManualClock
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.inbound.pairing import (
    CODE_ALPHABET,
    CODE_TTL,
    LOCKOUT,
    MAX_FAILURES,
    MAX_PENDING,
    RESEND_AFTER,
    Pairing,
    PairingError,
)
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Store
from tests.conftest import write_config


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'pairing.db'}")
    await migrate(engine)
    store = Store(engine, clock)
    yield store
    await store.close()


def dm(account: str, name: str = "Ada", kind: ChatKind = ChatKind.DM, binding: str = "tg") -> InboundMessage:
    return InboundMessage(platform="telegram", binding_id=binding, workspace="777", channel=account, chat_kind=kind,
                          sender=Sender(account, name), text="hello", event_id="1", message_id="1")


async def test_first_contact_gets_a_code_repeated_at_most_every_ten_minutes(store: Store, clock: ManualClock) -> None:
    told: list[tuple[str, str]] = []

    async def send(msg: InboundMessage, text: str) -> None:
        told.append((msg.sender.account_id, text))

    pairing = Pairing(store, send)
    first = await pairing.challenge(dm("42"))
    assert first.code is not None and len(first.code) == 8 and set(first.code) <= set(CODE_ALPHABET)
    assert told == [("42", told[0][1])] and f"agent-gateway pairing approve {first.code}" in told[0][1]

    again = await pairing.challenge(dm("42"))
    assert (again.code, again.notify, len(told)) == (first.code, False, 1)  # rate limited: silence
    clock.advance(RESEND_AFTER.total_seconds() + 1)
    later = await pairing.challenge(dm("42"))
    assert (later.code, later.notify, len(told)) == (first.code, True, 2)  # the same code, repeated

    clock.advance(CODE_TTL.total_seconds())
    fresh = await pairing.challenge(dm("42"))
    assert fresh.code != first.code and fresh.notify
    assert [p.code for p in await pairing.pending()] == [fresh.code]


async def test_pending_codes_are_capped_per_binding(store: Store) -> None:
    pairing = Pairing(store)
    for n in range(MAX_PENDING):
        assert (await pairing.challenge(dm(str(1000 + n)))).code is not None
    refused = await pairing.challenge(dm("9999"))
    assert (refused.code, refused.notify) == (None, False)
    assert (await pairing.challenge(dm("9999", binding="other"))).code is not None  # another binding's own cap


async def test_approve_admits_the_sender_in_direct_messages_only(store: Store) -> None:
    pairing = Pairing(store)
    code = (await pairing.challenge(dm("42"))).code
    assert code is not None and not await pairing.is_paired(dm("42"))
    done = await pairing.approve(f"{code[:4].lower()}-{code[4:]}", approved_by="cli")  # as an admin may type it
    assert (done.account_id, done.binding_id, done.display_name) == ("42", "tg", "Ada")
    assert await pairing.is_paired(dm("42"))
    assert not await pairing.is_paired(dm("42", binding="other"))
    assert not await pairing.is_paired(dm("42", kind=ChatKind.GROUP))
    assert await pairing.pending() == []
    with pytest.raises(PairingError, match="no pending pairing request"):
        await pairing.approve(code)  # used up
    assert await pairing.revoke("tg", "42") and not await pairing.is_paired(dm("42"))


async def test_expired_codes_are_refused(store: Store, clock: ManualClock) -> None:
    pairing = Pairing(store)
    code = (await pairing.challenge(dm("42"))).code
    assert code is not None
    clock.advance(CODE_TTL.total_seconds() + 1)
    with pytest.raises(PairingError, match="expire"):
        await pairing.approve(code)
    assert not await pairing.is_paired(dm("42"))


async def test_repeated_wrong_codes_lock_approval_out_for_a_while(store: Store, clock: ManualClock) -> None:
    pairing = Pairing(store)
    code = (await pairing.challenge(dm("42"))).code
    assert code is not None
    for _ in range(MAX_FAILURES):
        with pytest.raises(PairingError, match="no pending"):
            await pairing.approve("WRONG234")
    with pytest.raises(PairingError, match="locked"):
        await pairing.approve(code)  # even the right code, while locked
    assert not await pairing.is_paired(dm("42"))
    clock.advance(LOCKOUT.total_seconds() + 1)
    await pairing.approve(code)
    assert await pairing.is_paired(dm("42"))


async def test_cli_lists_and_approves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path / "config")
    engine = create_engine(f"sqlite+aiosqlite:///{config / 'gateway.db'}")
    await migrate(engine)
    store = Store(engine)
    code = (await Pairing(store).challenge(dm("42", "Ada Lovelace"))).code
    await store.close()
    assert code is not None

    assert await _cli("pairing", "list", "--config", str(config)) == 0
    listed = capsys.readouterr().out
    assert code in listed and "Ada Lovelace" in listed and "tg" in listed
    assert await _cli("pairing", "approve", "NOTACODE", "--config", str(config)) == 1
    assert "no pending pairing request" in capsys.readouterr().err
    assert await _cli("pairing", "approve", code, "--config", str(config)) == 0
    assert "approved: Ada Lovelace (telegram account 42)" in capsys.readouterr().out
    assert await _cli("pairing", "list", "--config", str(config)) == 0
    assert "no pending pairing requests" in capsys.readouterr().out


async def _cli(*argv: str) -> int:
    """The CLI runs its own event loop (asyncio.run): give it a thread, as a separate process would."""
    import asyncio

    return await asyncio.to_thread(cli.main, list(argv))
