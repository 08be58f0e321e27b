"""Slack's last delivery of an event (its third retry) must not be lost to a busy database.

An event the store refuses is not acked, and Slack delivers it again; but only three times. Its
third retry, refused, is acked and held by the adapter, and stored once the database answers:
the person gets their one answer. Earlier attempts keep the rule: no ack, Slack delivers again.
What is held is on disk too (the gateway's spool) before the ack: a stop, a restart or a crash
while the database still refuses it loses nothing, and the next start answers it, once.
The end-to-end tests lock the real SQLite store from another process past its bound; the
adapter-level ones stand a refusing core in for the store, to reach the bounds on what is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapters.slack.held import HELD_EVENTS, HELD_FOR, RETRY_CAP, STOPPED
from gateway.clock import ManualClock
from gateway.daemon import Gateway
from gateway.messages import InboundMessage
from gateway.outbound.adapter import SubmitResult
from gateway.store.availability import StoreUnavailable
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.slack import FakeSlack, signed_event_request
from tests.support.dispatcher import FakeDispatcher
from tests.support.locking import another_process_holds_the_lock
from tests.support.settled import settled

from .conftest import eventually, start_adapter

BOUND = 0.5  # busy_timeout_seconds: the store refuses a write waiting longer
HOLD = 120.0  # the other process's lock, until the test lets go (its steps must all fall inside it)


def _config(tmp_path: Path, api_url: str, mode: str = "socket") -> Path:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "mode": mode, "api_url": api_url}
    return write_config(tmp_path / "config", bindings={"acme": {"platform": "slack", "agent": "assistant", "slack": slack}},
                        gateway={"database": {"busy_timeout_seconds": BOUND}})


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def _answers(fake: FakeSlack, root_ts: str) -> list[str]:
    return [m.text for m in fake.bot_messages("C0GEN") if m.thread_ts == root_ts]


@contextlib.asynccontextmanager
async def _warm_gateway(tmp_path: Path, fake: FakeSlack) -> AsyncIterator[tuple[Gateway, Path]]:
    """The daemon on Socket Mode, connected, after a first turn before the lock (as
    tests/test_locked_database.py's: a process's first run builds what every later run reuses)."""
    config_dir = _config(tmp_path, fake.api_url)
    async with running_gateway(config_dir) as gw:
        await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack connected")
        root, _ = await fake.say("C0GEN", "U0ADA", "<@U0BOT> warm up")
        await fake.wait_for(lambda: _answers(fake, root.ts))
        yield gw, config_dir


async def test_the_last_delivery_during_a_lock_is_acked_and_answered_once(
        tmp_path: Path, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with _warm_gateway(tmp_path, fake_slack) as (gw, config_dir):
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello on the last try")
        async with another_process_holds_the_lock(config_dir / "gateway.db", HOLD) as released:
            # Slack's third retry of both events of the mention (`message`, `app_mention`).
            envelopes = [await fake_slack.send_event(e, retry_attempt=3) for e in events]
            await fake_slack.wait_for(lambda: all(fake_slack.acked(env) for env in envelopes))
            assert not _answers(fake_slack, root.ts), "nothing can have been stored while the lock is held"
            assert len(_logged(caplog, "acked and held until the database answers")) == 2
            released.let_go()
        answers = await fake_slack.wait_for(lambda: _answers(fake_slack, root.ts))
        await settled(gw, fake_slack)  # nothing left that could post a second answer
        answers = _answers(fake_slack, root.ts)
        assert len(answers) == 1 and answers[0].endswith("hello on the last try"), answers
        assert not _logged(caplog, "was lost")


def _spooled(spool: Path) -> list[Path]:
    """The entries a binding's spool holds (what a crash now would leave for the next start)."""
    return sorted(spool.glob("*.json")) if spool.is_dir() else []


async def _answered_once_at_the_next_start(config_dir: Path, fake: FakeSlack, root_ts: str, text: str,
                                           spool: Path) -> None:
    """The next daemon on `config_dir` answers the held `text` once, and takes its entry off `spool`."""
    async with running_gateway(config_dir) as gw:
        await fake.wait_for(lambda: _answers(fake, root_ts))
        await settled(gw, fake)
        answers = _answers(fake, root_ts)
        assert len(answers) == 1 and answers[0].endswith(text), answers
        assert _spooled(spool) == [], "what the store took is off the spool"


async def test_a_held_event_survives_a_restart_and_is_answered_once(
        tmp_path: Path, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    """Held during a lock, the daemon stopped before the lock ends: the next start answers it."""
    caplog.set_level(logging.INFO)
    async with contextlib.AsyncExitStack() as lock:
        async with _warm_gateway(tmp_path, fake_slack) as (gw, config_dir):
            root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello across a restart")
            released = await lock.enter_async_context(another_process_holds_the_lock(config_dir / "gateway.db", HOLD))
            lock.callback(released.let_go)  # a failing step must not wait out the whole hold
            envelopes = [await fake_slack.send_event(e, retry_attempt=3) for e in events]
            await fake_slack.wait_for(lambda: all(fake_slack.acked(env) for env in envelopes))
        assert not _answers(fake_slack, root.ts), "the lock is still held: nothing can have been stored"
        released.let_go()
    assert not _logged(caplog, "was lost")
    await _answered_once_at_the_next_start(config_dir, fake_slack, root.ts, "hello across a restart", config_dir / "gateway.db.spool" / "acme")
    assert not any("hello across a restart" in r.getMessage() for r in caplog.records), "a body is never logged"


async def test_an_earlier_delivery_during_a_lock_is_not_acked(
        tmp_path: Path, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    """Slack delivers it again (durably, across our restart): the adapter holds nothing."""
    caplog.set_level(logging.INFO)
    async with _warm_gateway(tmp_path, fake_slack) as (gw, config_dir):
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello on the first retry")
        bodies = [fake_slack.event_callback(e) for e in events]
        async with another_process_holds_the_lock(config_dir / "gateway.db", HOLD) as released:
            envelopes = [await fake_slack.send_event(e, body=b, retry_attempt=1) for e, b in zip(events, bodies)]
            await wait_for(lambda: all(_logged(caplog, f"event {b['event_id']} not acked") for b in bodies),
                           what="the store's refusal")
            assert not any(fake_slack.acked(env) for env in envelopes)
            assert not _logged(caplog, "acked and held")
            released.let_go()
        # Slack's next retry, once the database answers: stored, acked, answered.
        again = [await fake_slack.send_event(e, body=b, retry_attempt=2) for e, b in zip(events, bodies)]
        await fake_slack.wait_for(lambda: all(fake_slack.acked(env) for env in again))
        await settled(gw, fake_slack)
        assert len(_answers(fake_slack, root.ts)) == 1


async def test_http_mode_acks_only_the_last_delivery_during_a_lock(
        tmp_path: Path, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    """In HTTP mode the ack is the answer's status: a 5xx asks Slack to retry, a 200 says it has it."""
    caplog.set_level(logging.INFO)
    config_dir = _config(tmp_path, fake_slack.api_url, mode="http")
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession() as http:
        await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack token verified")
        url = f"{gw.url}/slack/events/acme"

        async def deliver(body: dict[str, Any], retry_num: int | None = None) -> int:
            raw, headers = signed_event_request(body, retry_num=retry_num)
            async with http.post(url, data=raw.encode(), headers=headers) as response:
                return response.status

        warm, warm_events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> warm up")
        assert await deliver(fake_slack.event_callback(warm_events[0])) == 200
        await fake_slack.wait_for(lambda: _answers(fake_slack, warm.ts))
        root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello over http")
        body = fake_slack.event_callback(events[0])
        async with another_process_holds_the_lock(config_dir / "gateway.db", HOLD) as released:
            assert await deliver(body) >= 500, "a first delivery the store refused is not acked"
            assert await deliver(body, retry_num=2) >= 500
            assert await deliver(body, retry_num=3) == 200, "the last delivery is acked, and held"
            assert not _answers(fake_slack, root.ts)
            released.let_go()
        await fake_slack.wait_for(lambda: _answers(fake_slack, root.ts))
        await settled(gw, fake_slack)
        assert len(_answers(fake_slack, root.ts)) == 1
        assert len(_logged(caplog, "acked and held until the database answers")) == 1


# --- the bounds, against a core that cannot store (adapter level) ---------------------------


class DownStore(FakeDispatcher):
    """The core while its database refuses every write (`down`), as `StoreUnavailable` says it."""

    def __init__(self) -> None:
        super().__init__(deciders={"U0ADA"})
        self.down = True
        self.entered = asyncio.Event()  # set by the first submit
        self.slow: asyncio.Event | None = None  # when set up, a refusal waits for it (the store's bound)

    async def submit(self, message: InboundMessage) -> SubmitResult:
        self.entered.set()
        if self.down:
            if self.slow is not None:
                await self.slow.wait()
            raise StoreUnavailable("database is locked", retry_after=1.0)
        return await super().submit(message)


def _retries() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "HeldEvents._retry"]


@pytest.fixture
async def manual_slack(slack_env: None) -> AsyncIterator[FakeSlack]:
    async with FakeSlack(clock=ManualClock()) as fake:
        fake.add_user("U0ADA", "ada", real_name="Ada Lovelace", display_name="Ada")
        fake.add_channel("D0ADA", "", kind="im", members=["U0ADA"])
        yield fake


def _as_time_passes(fake: FakeSlack, seen: Callable[[], Any]) -> Any:
    """`seen()`, the fake's clock moved on by the longest wait between two passes over the held events
    first (each poll of `eventually` moves it again: the retries' backoff takes no real time)."""
    assert isinstance(fake.clock, ManualClock)
    fake.clock.advance(RETRY_CAP)
    return seen()


async def _held(fake: FakeSlack, text: str) -> str:
    """Ada's DM arrives on its last delivery while the store is down; acked, so held."""
    _, events = fake.user_posts("D0ADA", "U0ADA", text)
    envelope = await fake.send_event(events[0], retry_attempt=3)
    await fake.wait_for(lambda: fake.acked(envelope))
    return envelope


async def test_a_held_event_is_stored_when_the_store_answers(manual_slack: FakeSlack) -> None:
    core = DownStore()
    adapter = await start_adapter(manual_slack, core)
    try:
        await _held(manual_slack, "hello")
        core.down = False
        await eventually(lambda: _as_time_passes(manual_slack, lambda: core.accepted))
        assert [m.text for m in core.accepted] == ["hello"]
        await eventually(lambda: not _retries())  # nothing held: the retries end
    finally:
        await adapter.stop()


async def test_a_held_event_is_given_up_after_its_time(manual_slack: FakeSlack,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    core = DownStore()
    adapter = await start_adapter(manual_slack, core)
    try:
        await _held(manual_slack, "hello")
        lost = f"was lost: the database did not answer for {HELD_FOR / 60:.0f} minutes"
        await eventually(lambda: _as_time_passes(manual_slack, lambda: _logged(caplog, lost)))
        await eventually(lambda: not _retries())
        assert core.accepted == []
    finally:
        await adapter.stop()


async def test_a_stop_gives_up_what_is_held_and_leaves_no_task(fake_slack: FakeSlack,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    adapter = await start_adapter(fake_slack, DownStore())
    await _held(fake_slack, "hello")
    assert _retries()
    await adapter.stop()
    assert not _retries(), "the held events' retries ended with the stop"
    assert len(_logged(caplog, f"was lost: {STOPPED}")) == 1


async def test_an_event_refused_after_the_stop_is_not_held(fake_slack: FakeSlack,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The store's refusal comes after the binding stopped (an envelope's handler runs in a task of
    the SDK's own, which a stop does not wait for): nothing is held that no stop would end."""
    caplog.set_level(logging.INFO)
    core = DownStore()
    core.slow = asyncio.Event()
    adapter = await start_adapter(fake_slack, core)
    _, events = fake_slack.user_posts("D0ADA", "U0ADA", "hello")
    await fake_slack.send_event(events[0], retry_attempt=3)
    await eventually(core.entered.is_set)
    await adapter.stop()
    core.slow.set()
    await eventually(lambda: _logged(caplog, f"was lost: {STOPPED}"))
    assert not _retries() and not _logged(caplog, "acked and held")


async def test_no_more_than_the_cap_is_held(fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    adapter = await start_adapter(fake_slack, DownStore())
    try:
        for i in range(HELD_EVENTS + 1):
            await _held(fake_slack, f"message {i}")
        assert len(_logged(caplog, "acked and held")) == HELD_EVENTS
        assert len(_logged(caplog, f"was lost: {HELD_EVENTS} events are held already")) == 1
    finally:
        await adapter.stop()



# --- the spool across a stop or a crash (adapter level) ------------------------------------


def _entries(spool: Path) -> list[Path]:
    return sorted((spool / "acme").glob("*.json"))


@contextlib.asynccontextmanager
async def _next_start(fake: FakeSlack, spool: Path) -> AsyncIterator[DownStore]:
    """The binding started (again) on `spool`, its database answering: the core it stores into."""
    core = DownStore()
    core.down = False
    adapter = await start_adapter(fake, core, spool=spool)
    try:
        yield core
    finally:
        await adapter.stop()


async def _stored(fake: FakeSlack, core: DownStore) -> list[str]:
    """The texts `core` took, once it took any (the retries' backoff passed on the fake's clock)."""
    await eventually(lambda: _as_time_passes(fake, lambda: core.accepted))
    return [m.text for m in core.accepted]


async def test_an_event_held_when_the_process_dies_is_stored_by_the_next(
        manual_slack: FakeSlack, tmp_path: Path) -> None:
    """`kill -9` after the ack: nothing runs at a stop. The next process (a second adapter on the same
    spool, the first never stopped meanwhile) finds the event and stores it."""
    spool = tmp_path / "gateway.db.spool"
    dead = await start_adapter(manual_slack, DownStore(), spool=spool)
    try:
        await _held(manual_slack, "hello")
        # On disk at the ack; the body holds the person's text: for the daemon's user only.
        modes = [stat.S_IMODE(p.stat().st_mode) for p in (spool, spool / "acme", *_entries(spool))]
        assert modes == [0o700, 0o700, 0o600], [oct(m) for m in modes]
        on_disk = b"".join(p.read_bytes() for p in _entries(spool))
        assert b"hello" in on_disk and b"verification-token" not in on_disk, "Slack's token written to the spool"
        async with _next_start(manual_slack, spool) as core:
            assert await _stored(manual_slack, core) == ["hello"]
            await eventually(lambda: not _entries(spool))
    finally:
        await dead.stop()


async def _held_then_stopped(fake: FakeSlack, spool: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Ada's "hello" held on its last delivery while the store is down, then the binding stopped."""
    adapter = await start_adapter(fake, DownStore(), spool=spool)
    await _held(fake, "hello")
    await adapter.stop()
    assert not _logged(caplog, "was lost") and len(_entries(spool)) == 1


async def test_a_cut_short_spool_entry_is_skipped_at_start(
        manual_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    spool = tmp_path / "gateway.db.spool"
    await _held_then_stopped(manual_slack, spool, caplog)
    [entry] = _entries(spool)
    whole = entry.read_bytes()
    # Another entry cut short (a disk that lost its tail), and a write a crash stopped halfway.
    (spool / "acme" / ("0" * 32 + ".json")).write_bytes(whole[: len(whole) // 2])
    (spool / "acme" / ("." + "1" * 32 + ".0a1b2c3d.tmp")).write_bytes(whole[:10])
    async with _next_start(manual_slack, spool) as core:
        assert await _stored(manual_slack, core) == ["hello"], "the whole entry is stored, the broken ones skipped"
        assert len(_logged(caplog, "is unreadable (JSONDecodeError): skipped")) == 1
        assert len(_logged(caplog, "cut short by a crash while it was written: removed")) == 1
        await eventually(lambda: not _entries(spool))
        assert sorted(p.suffix for p in (spool / "acme").iterdir()) == [".unreadable"], "kept aside, not read again"


async def test_a_spooled_event_past_its_time_is_given_up_at_start(
        manual_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The 15 minutes count from when it was first held, not from the restart."""
    caplog.set_level(logging.INFO)
    spool = tmp_path / "gateway.db.spool"
    await _held_then_stopped(manual_slack, spool, caplog)
    assert isinstance(manual_slack.clock, ManualClock)
    manual_slack.clock.advance(HELD_FOR + 1)  # the daemon was down that long
    async with _next_start(manual_slack, spool) as core:
        lost = f"was lost: the database did not answer for {HELD_FOR / 60:.0f} minutes"
        await eventually(lambda: _logged(caplog, lost))
        assert not _entries(spool)
        manual_slack.clock.advance(RETRY_CAP)
        await settled(manual_slack)
        assert core.accepted == []


async def test_the_spool_holds_no_more_than_the_cap(fake_slack: FakeSlack, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    spool = tmp_path / "gateway.db.spool"
    adapter = await start_adapter(fake_slack, DownStore(), spool=spool)
    try:
        for i in range(HELD_EVENTS + 1):
            await _held(fake_slack, f"message {i}")
        assert len(_logged(caplog, f"was lost: {HELD_EVENTS} events are held already")) == 1
    finally:
        await adapter.stop()
    assert len(_entries(spool)) == HELD_EVENTS


async def test_an_unwritable_spool_holds_in_memory(manual_slack: FakeSlack, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A spool that cannot be written (here its place is a file; a read-only disk the same): acked
    and held in memory as before the spool, and the log says so."""
    caplog.set_level(logging.INFO)
    (tmp_path / "gateway.db.spool").write_text("")
    core = DownStore()
    adapter = await start_adapter(manual_slack, core, spool=tmp_path / "gateway.db.spool")
    try:
        await _held(manual_slack, "hello")
        assert len(_logged(caplog, "cannot be written")) == 1
        assert len(_logged(caplog, "acked and held until the database answers (in memory only)")) == 1
        core.down = False
        await eventually(lambda: _as_time_passes(manual_slack, lambda: core.accepted))
        assert [m.text for m in core.accepted] == ["hello"]
    finally:
        await adapter.stop()


async def test_an_event_refused_after_the_stop_waits_in_the_spool(
        manual_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The refusal comes after the binding stopped (as `test_an_event_refused_after_the_stop_is_not_held`):
    nothing retries it in the stopped binding, but the next start stores it."""
    caplog.set_level(logging.INFO)
    spool = tmp_path / "gateway.db.spool"
    core = DownStore()
    core.slow = asyncio.Event()
    adapter = await start_adapter(manual_slack, core, spool=spool)
    _, events = manual_slack.user_posts("D0ADA", "U0ADA", "hello")
    await manual_slack.send_event(events[0], retry_attempt=3)
    await eventually(core.entered.is_set)
    await adapter.stop()
    core.slow.set()
    await eventually(lambda: _logged(caplog, "acked and kept in the spool for the next start"))
    assert not _retries() and not [m for m in _logged(caplog, "Slack's last delivery") if "was lost" in m]
    async with _next_start(manual_slack, spool) as after:
        assert await _stored(manual_slack, after) == ["hello"]


# --- across a restart: HTTP mode, and the spool's place on PostgreSQL ------------------------


async def _deliver(http: aiohttp.ClientSession, gw: Gateway, body: dict[str, Any], retry_num: int | None = None) -> int:
    """One signed Events API request to the binding's Request URL; its status (Slack's ack)."""
    raw, headers = signed_event_request(body, retry_num=retry_num)
    async with http.post(f"{gw.url}/slack/events/acme", data=raw.encode(), headers=headers) as response:
        return response.status


async def test_http_mode_a_held_event_survives_a_restart_and_is_answered_once(
        tmp_path: Path, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    """Events API over HTTP: the last delivery, refused by a locked store, is answered 200 (Slack will not
    send it again); the daemon stops before the lock ends, and the next start answers it, once."""
    caplog.set_level(logging.INFO)
    config_dir = _config(tmp_path, fake_slack.api_url, mode="http")
    async with contextlib.AsyncExitStack() as lock, aiohttp.ClientSession() as http:
        async with running_gateway(config_dir) as gw:
            await wait_for(lambda: gw.adapters["acme"].health().connected, what="slack token verified")
            warm, warm_events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> warm up")
            assert await _deliver(http, gw, fake_slack.event_callback(warm_events[0])) == 200
            await fake_slack.wait_for(lambda: _answers(fake_slack, warm.ts))
            root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello over http, across a restart")
            body = fake_slack.event_callback(events[0])
            released = await lock.enter_async_context(another_process_holds_the_lock(config_dir / "gateway.db", HOLD))
            lock.callback(released.let_go)  # a failing step must not wait out the whole hold
            assert await _deliver(http, gw, body, retry_num=3) == 200, "the last delivery is acked, and held"
        assert not _answers(fake_slack, root.ts), "the lock is still held: nothing can have been stored"
        assert len(_spooled(config_dir / "gateway.db.spool" / "acme")) == 1
        released.let_go()
    assert not _logged(caplog, "was lost")
    await _answered_once_at_the_next_start(config_dir, fake_slack, root.ts, "hello over http, across a restart", config_dir / "gateway.db.spool" / "acme")


@pytest.mark.postgres
async def test_on_postgresql_the_spool_in_the_state_directory_is_answered_at_the_next_start(
        tmp_path: Path, fake_slack: FakeSlack, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL the spool has no SQLite file to sit beside: it is in systemd's `StateDirectory=`
    (`$STATE_DIRECTORY`, the first of its paths). What a process held there when it died (here a binding
    whose store refused, stopped) is read by the next daemon on PostgreSQL and answered, once."""
    state = tmp_path / "state"
    monkeypatch.setenv("STATE_DIRECTORY", f"{state}:{tmp_path / 'other'}")
    dead = await start_adapter(fake_slack, DownStore(), spool=state / "gateway.spool")
    root, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello from the state directory")
    envelope = await fake_slack.send_event(events[0], retry_attempt=3)
    await fake_slack.wait_for(lambda: fake_slack.acked(envelope))
    await dead.stop()
    assert len(_entries(state / "gateway.spool")) == 1
    config_dir = write_config(tmp_path / "config", gateway={"database": {"url": pg_url}}, bindings={"acme": {
        "platform": "slack", "agent": "assistant", "slack": {
            "bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
            "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "api_url": fake_slack.api_url}}})
    await _answered_once_at_the_next_start(config_dir, fake_slack, root.ts, "hello from the state directory",
                                           state / "gateway.spool" / "acme")
    assert not (tmp_path / "other").exists() and not (config_dir / "gateway.spool").exists()
