"""Whether a person is still in the channel a conversation happened in, asked of the platform.

The seed's rule for conversation search ("Whose conversations"): a channel or group thread is a
person's only while they are still a member of that channel, confirmed against the chat platform
through the binding's adapter. A direct message and the web chat are the person's own and need no
asking. A platform that cannot answer leaves the thread out (fail closed): a person who left a
private channel must never read it back through us because a call failed.

Answers are kept for `TTL` seconds on the gateway's clock, so a search over many threads of one
channel asks once and a leave shows within a minute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.messages import ChatKind
from gateway.outbound.adapter import ConfirmsMembership, PlatformError, ReplyTarget, offered

log = logging.getLogger(__name__)

TTL = 60.0  # seconds an answer is trusted
PERSONAL_PLATFORMS = frozenset({"web"})  # every web conversation is one person's own


@dataclass(frozen=True, slots=True)
class Place:
    """Where one conversation happened, and the person's accounts that spoke in it."""

    platform: str
    binding_id: str
    workspace: str
    channel: str
    chat_kind: str
    accounts: tuple[str, ...]

    @property
    def personal(self) -> bool:
        return self.chat_kind == ChatKind.DM or self.platform in PERSONAL_PLATFORMS


class Membership:
    """`counts(place)`: True while the person may see the place, False once they left, None when
    the platform could not say (the caller leaves it out and says so)."""

    def __init__(self, adapters: Callable[[str], object | None], clock: Clock, ttl: float = TTL) -> None:
        self._adapters = adapters  # binding id -> its adapter (None once unconfigured)
        self._clock = clock
        self._ttl = ttl
        self._known: dict[tuple[str, str, str, str], tuple[float, bool]] = {}

    async def counts(self, place: Place) -> bool | None:
        if place.personal:
            return True
        unsure = False
        for account in place.accounts:
            answer = await self._is_member(place, account)
            if answer:
                return True
            unsure = unsure or answer is None
        return None if unsure or not place.accounts else False

    async def _is_member(self, place: Place, account: str) -> bool | None:
        key = (place.binding_id, place.workspace, place.channel, account)
        now = self._clock.monotonic()
        known = self._known.get(key)
        if known is not None and known[0] > now:
            return known[1]
        confirms = offered(self._adapters(place.binding_id), ConfirmsMembership)
        if confirms is None:  # the binding is gone, or its platform cannot say
            return None
        target = ReplyTarget(place.platform, place.binding_id, place.workspace, place.channel, None,
                             ChatKind(place.chat_kind))
        try:
            answer = await confirms.is_member(target, account)
        except PlatformError as e:
            log.info("membership of %s in %s could not be confirmed: %s", place.binding_id, place.channel,
                     type(e).__name__)
            return None
        self._forget_expired(now)
        self._known[key] = (now + self._ttl, answer)
        return answer

    def _forget_expired(self, now: float) -> None:
        if len(self._known) > 4096:  # bounded: a long-lived daemon asks about many channels
            for key in [k for k, (until, _) in self._known.items() if until <= now]:
                del self._known[key]


def unconfirmed_note(count: int) -> str:
    """What a search says when threads were left out because their platform could not confirm."""
    return (f"({count} channel conversation{'s were' if count != 1 else ' was'} left out: the chat platform could "
            "not confirm this person is still a member of that channel.)")

