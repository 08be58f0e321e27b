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
daemon agree. The inbound path (`gateway.inbound.pipeline`) calls `is_paired` (admission's
`sender_allowed`) and `challenge` (when admission answers `needs_pairing`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

from gateway.clock import Clock
from gateway.messages import ChatKind, InboundMessage
from gateway.store.pairing import (  # the limits live with the queries that enforce them
    CODE_ALPHABET,
    CODE_TTL,
    LOCKOUT,
    MAX_FAILURES,
    MAX_PENDING,
    RESEND_AFTER,
    Challenge,
    PairingError,
    PairingStore,
    PendingPairing,
)
from gateway.ops.subcommand import Load, on_store, subcommand
from gateway.outbound.adapter import target_for

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.outbound.delivery import Outbound
    from gateway.store.repo import Store

log = logging.getLogger("gateway.inbound.pairing")

__all__ = ["CODE_ALPHABET", "CODE_TTL", "LOCKOUT", "MAX_FAILURES", "MAX_PENDING", "RESEND_AFTER", "Challenge",
           "Pairing", "PairingError", "PendingPairing", "challenge_text", "through"]


def challenge_text(code: str) -> str:
    """The Markdown a stranger reads (the adapter renders it for its platform)."""
    return (
        "I don't know you yet, so I can't answer here.\n\n"
        f"Your pairing code is **{code}** (valid for one hour). Ask the person who runs this bot "
        f"to approve it with:\n\n`agent-gateway pairing approve {code}`\n\n"
        "Once they have, send your message again."
    )


Send = Callable[[InboundMessage, str], Awaitable[None]]


class Pairing(PairingStore):
    """The store's pairing, plus what the core does with a stranger's direct message."""

    def __init__(self, store: Store, send: Send | None = None, clock: Clock | None = None) -> None:
        super().__init__(store.sessions, clock or store.clock)
        self._send = send

    async def is_paired(self, msg: InboundMessage) -> bool:
        """Whether an admin let this sender in (only direct messages need it)."""
        return msg.chat_kind is ChatKind.DM and await self.paired(msg.binding_id, msg.sender.account_id)

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


def through(store: Store, outbound: Outbound) -> Pairing:
    """Pairing that tells a stranger their code in the chat they wrote in, on the one outbound path."""

    async def send(msg: InboundMessage, text: str) -> None:
        outbound.send(target_for(msg), text)

    return Pairing(store, send)


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway pairing list | approve CODE | revoke BINDING ACCOUNT`."""
    subcommand(p, load, _run, actions={"list": "", "approve": "CODE", "revoke": "BINDING ACCOUNT"},
               operands_help="approve: CODE; revoke: BINDING ACCOUNT")
    p.add_argument("--binding", help="list: only this binding")
    p.add_argument("--json", action="store_true", help="list: one JSON object per line")


def _run(args: argparse.Namespace, config: LoadedConfig) -> int:
    async def main(store: Store) -> int:
        pairing, operands = Pairing(store), args.operands
        if args.action == "list":
            return _print_pending(await pairing.pending(args.binding), as_json=args.json)
        if args.action == "revoke":
            found = await pairing.revoke(*operands)
            print(f"revoked {operands[1]} on binding {operands[0]}" if found
                  else f"{operands[1]} was not paired on binding {operands[0]}")
            return 0 if found else 1
        try:
            done = await pairing.approve(operands[0], approved_by="cli")
        except PairingError as e:
            print(f"pairing approve: {e}", file=sys.stderr)
            return 1
        print(f"approved: {done.display_name or done.account_id} ({done.platform} account "
              f"{done.account_id}) may now message binding {done.binding_id}")
        return 0

    return on_store(config, main)


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
