"""Pairing: someone the bot does not know writes to it in private; an admin lets them in.

Under a binding's `dm: pairing` policy (Telegram's default: anyone who finds a bot can write to
it), a direct message from an account the binding has not paired is not answered. Instead the
sender is given an 8-character code, valid for an hour. An admin who recognises the request
runs `agent-gateway pairing approve CODE`; from then on that account is admitted.

Limits, so a stranger can neither make the bot a noise machine nor guess their way in:
- one pending code per sender and binding: writing again reuses it, and the code is repeated
  at most once every RESEND_AFTER (the rate limit per sender);
- at most MAX_PENDING codes per binding: beyond that, new strangers get no answer (logged);
- MAX_FAILURES wrong or expired codes given to `approve` within LOCKOUT lock `approve` out
  until the oldest of them is LOCKOUT old. Codes have 40 random bits; the lockout keeps it so.

Everything lives in the store, so the CLI (another process), every replica and a restarted
daemon agree. The inbound path (`gateway.inbound`) calls `is_paired` (admission's
`sender_allowed`) and `challenge` (when admission answers `needs_pairing`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from .clock import Clock
from .messages import ChatKind, InboundMessage
from .store.models import PairedAccount, PairingFailure, PairingRequest
from .surface import target_for

if TYPE_CHECKING:
    from .delivery import Outbound
    from .store.repo import Store

log = logging.getLogger("gateway.pairing")

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: people read and type these
CODE_LENGTH = 8
CODE_TTL = timedelta(hours=1)
RESEND_AFTER = timedelta(minutes=10)
MAX_PENDING = 20
MAX_FAILURES = 5
LOCKOUT = timedelta(minutes=15)

Send = Callable[[InboundMessage, str], Awaitable[None]]


class PairingError(Exception):
    """`approve` refused: an unknown or expired code, or approval is locked out."""


@dataclass(frozen=True, slots=True)
class PendingPairing:
    code: str
    binding_id: str
    platform: str
    account_id: str
    display_name: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Challenge:
    """What a stranger's message led to. `notify`: tell them the code now."""

    code: str | None
    expires_at: datetime | None
    notify: bool
    reason: str = ""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What an admin typed, as stored: case, spaces and dashes do not matter."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


def challenge_text(code: str) -> str:
    """The Markdown a stranger reads (the adapter renders it for its platform)."""
    return (
        "I don't know you yet, so I can't answer here.\n\n"
        f"Your pairing code is **{code}** (valid for one hour). Ask the person who runs this bot "
        f"to approve it with:\n\n`agent-gateway pairing approve {code}`\n\n"
        "Once they have, send your message again."
    )


class Pairing:
    """Store-backed pairing for every binding of one gateway."""

    def __init__(self, store: Store, send: Send | None = None, clock: Clock | None = None) -> None:
        self._sessions = store.sessions
        self._clock = clock or store.clock
        self._send = send

    # --- what the core asks -------------------------------------------------------------

    async def is_paired(self, msg: InboundMessage) -> bool:
        """Whether an admin let this sender in (only direct messages need it)."""
        if msg.chat_kind is not ChatKind.DM:
            return False
        async with self._sessions() as s:
            return await s.get(PairedAccount, (msg.binding_id, msg.sender.account_id)) is not None

    async def challenge(self, msg: InboundMessage) -> Challenge:
        """A stranger wrote: issue (or reuse) their code and tell them, within the limits.

        Never raises for a failed send: the message is already recorded as refused.
        """
        result = await self.request(msg.binding_id, msg.platform, msg.workspace, msg.sender.account_id,
                                    msg.sender.display_name)
        if result.code is None:
            log.warning("pairing: binding %s has %d codes pending; not issuing one to %s", msg.binding_id,
                        MAX_PENDING, msg.sender.account_id)
        elif result.notify and self._send is not None:
            try:
                await self._send(msg, challenge_text(result.code))
            except Exception as e:  # the code stays valid; the sender learns it when writing again later
                log.warning("pairing: could not send the code to %s: %s", msg.sender.account_id, e)
        return result

    # --- the store ----------------------------------------------------------------------

    async def request(self, binding_id: str, platform: str, workspace: str, account_id: str,
                      display_name: str) -> Challenge:
        now = self._clock.now()
        async with self._sessions() as s:
            try:
                async with s.begin():
                    await s.execute(delete(PairingRequest).where(PairingRequest.expires_at <= now))
                    row = await s.scalar(select(PairingRequest).where(
                        PairingRequest.binding_id == binding_id, PairingRequest.account_id == account_id))
                    if row is not None:
                        if now - row.notified_at < RESEND_AFTER:
                            return Challenge(row.code, row.expires_at, False, "code sent recently")
                        row.notified_at = now
                        return Challenge(row.code, row.expires_at, True)
                    pending = await s.scalar(select(func.count()).select_from(PairingRequest).where(
                        PairingRequest.binding_id == binding_id))
                    if (pending or 0) >= MAX_PENDING:
                        return Challenge(None, None, False, "too many pending codes")
                    code = new_code()
                    while await s.get(PairingRequest, code) is not None:  # 40 bits: practically never
                        code = new_code()
                    s.add(PairingRequest(code=code, binding_id=binding_id, platform=platform, workspace=workspace,
                                         account_id=account_id, display_name=display_name, created_at=now,
                                         expires_at=now + CODE_TTL, notified_at=now))
            except IntegrityError:  # the same sender's other message won the insert: it told them
                return Challenge(None, None, False, "code being issued")
        return Challenge(code, now + CODE_TTL, True)

    async def approve(self, code: str, approved_by: str = "admin") -> PendingPairing:
        """Let the code's sender in. Raises PairingError for a wrong or expired code, or when locked out."""
        code = normalize_code(code)
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            recent = list(await s.scalars(
                select(PairingFailure.failed_at).where(PairingFailure.failed_at > now - LOCKOUT)
                .order_by(PairingFailure.failed_at.desc()).limit(MAX_FAILURES)))
            if len(recent) >= MAX_FAILURES:
                until = recent[-1] + LOCKOUT
                raise PairingError(f"too many wrong codes: pairing approval is locked until {until:%H:%M} UTC")
            row = await s.get(PairingRequest, code)
            pending: PendingPairing | None = None
            if row is None or row.expires_at <= now:
                s.add(PairingFailure(failed_at=now))
            else:
                pending = _pending(row)
                await s.merge(PairedAccount(binding_id=row.binding_id, account_id=row.account_id,
                                            platform=row.platform, workspace=row.workspace,
                                            display_name=row.display_name, approved_by=approved_by,
                                            approved_at=now))
                await s.delete(row)
        if pending is None:  # raised after the commit, so the failure counts
            raise PairingError(f"no pending pairing request has code {code} (codes expire after an hour)")
        log.info("pairing: %s approved %s account %s for binding %s", approved_by, pending.platform,
                 pending.account_id, pending.binding_id)
        return pending

    async def pending(self, binding_id: str | None = None) -> list[PendingPairing]:
        now = self._clock.now()
        query = select(PairingRequest).where(PairingRequest.expires_at > now).order_by(PairingRequest.created_at)
        if binding_id is not None:
            query = query.where(PairingRequest.binding_id == binding_id)
        async with self._sessions() as s:
            return [_pending(row) for row in await s.scalars(query)]

    async def revoke(self, binding_id: str, account_id: str) -> bool:
        """Un-pair an account; True if it was paired."""
        async with self._sessions() as s, s.begin():
            result = await s.execute(delete(PairedAccount).where(
                PairedAccount.binding_id == binding_id, PairedAccount.account_id == account_id))
            return bool(result.rowcount)


def _pending(row: PairingRequest) -> PendingPairing:
    return PendingPairing(row.code, row.binding_id, row.platform, row.account_id, row.display_name,
                          row.created_at, row.expires_at)


def through(store: Store, outbound: Outbound) -> Pairing:
    """Pairing that tells a stranger their code in the chat they wrote in, on the one outbound path."""

    async def send(msg: InboundMessage, text: str) -> None:
        outbound.send(target_for(msg), text)

    return Pairing(store, send)


def add_cli(sub: Any, load: Any) -> None:
    """`agent-gateway pairing list | approve CODE | revoke BINDING ACCOUNT`."""
    p = sub.add_parser("pairing", help="list and approve pairing requests from unknown direct-message senders")
    p.add_argument("action", choices=["list", "approve", "revoke"])
    p.add_argument("args", nargs="*", help="approve: CODE; revoke: BINDING ACCOUNT")
    p.add_argument("--config", help="config directory")
    p.add_argument("--binding", help="list: only this binding")
    p.add_argument("--json", action="store_true", help="list: one JSON object per line")

    def run(args: Any) -> int:
        expected = {"list": 0, "approve": 1, "revoke": 2}[args.action]
        if len(args.args) != expected:
            usage = {"list": "pairing list", "approve": "pairing approve CODE",
                     "revoke": "pairing revoke BINDING ACCOUNT"}[args.action]
            print(f"usage: agent-gateway {usage}", file=sys.stderr)
            return 2
        config = load(args)
        if config is None:
            return 1
        from .store.engine import open_store

        async def main() -> int:
            async with open_store(config.gateway.database.url) as store:
                pairing = Pairing(store)
                if args.action == "list":
                    return _print_pending(await pairing.pending(args.binding), as_json=args.json)
                if args.action == "revoke":
                    found = await pairing.revoke(*args.args)
                    print(f"revoked {args.args[1]} on binding {args.args[0]}" if found
                          else f"{args.args[1]} was not paired on binding {args.args[0]}")
                    return 0 if found else 1
                try:
                    done = await pairing.approve(args.args[0], approved_by="cli")
                except PairingError as e:
                    print(f"pairing approve: {e}", file=sys.stderr)
                    return 1
                print(f"approved: {done.display_name or done.account_id} ({done.platform} account "
                      f"{done.account_id}) may now message binding {done.binding_id}")
                return 0

        return asyncio.run(main())

    p.set_defaults(fn=run)


def _print_pending(rows: list[PendingPairing], *, as_json: bool) -> int:
    for r in rows:
        if as_json:
            print(json.dumps({**asdict(r), "created_at": r.created_at.isoformat(),
                              "expires_at": r.expires_at.isoformat()}))
        else:
            print(f"{r.code}  {r.binding_id:16} {r.platform:10} {r.account_id:16} {r.display_name:24} "
                  f"expires {r.expires_at:%Y-%m-%d %H:%M} UTC")
    if not rows and not as_json:
        print("no pending pairing requests")
    return 0
