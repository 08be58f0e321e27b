"""Platform budgets, paced so that the gateway itself never causes a 429.

Each adapter owns one `Pacer` and passes every outbound call through it with the scopes the call
counts against (Telegram: the chat, the group, the bot; Slack: the method's tier, the channel).
A scope is a `Rule` (at most `limit` calls in any `per` seconds) and a key (a chat id, a method).

A call reserves the earliest moment at which every one of its scopes has room, then sleeps until
then; reservations are made at once, so concurrent callers queue in order rather than race.
The platform counts a call when it arrives, which is some time after it was sent: `paced()`
records the call as made when its answer came back (no earlier than it arrived), and the window
a pacer keeps is a little wider than the platform's (`HEADROOM`, `SLACK`).

A streamed draft must not wait (a later draft or the final carries its text): `impatient()` makes
calls inside it raise `OverBudget` instead of sleeping, and reserve nothing. Drafts also leave
part of every budget (`DRAFT_SHARE`) to the calls that must land (finals, posts, cards), which
then do not queue behind a minute of edits. The final text waits.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import heapq
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace

from gateway.clock import Clock
from gateway.outbound.adapter import RateLimited

HEADROOM = 0.1  # the window kept is this much longer than the platform's...
SLACK = 0.05  # ...plus this many seconds, for calls that arrive closer together than they were sent
DRAFT_SHARE = 0.8  # of a budget, what drafts may use (at least one call per window)
# A candidate moment is an entry's plus its window, e + w; in floating point (e + w) - w can come out
# a hair below e, and e was then counted inside its own window: at some moments a Telegram group's
# next message skipped the chat's second and waited out the group's minute. A microsecond's allowance.
ROUNDING = 1e-6

_patience: ContextVar[float | None] = ContextVar("budget_patience", default=None)


@dataclass(frozen=True, slots=True)
class Rule:
    """At most `limit` calls in any `per` seconds, per key."""

    name: str
    limit: int
    per: float


Scope = tuple[Rule, str]


def scaled(rules: Sequence[Rule], factor: float) -> list[Rule]:
    """The same budgets with every period multiplied by `factor` (tests and benches run time faster)."""
    return [replace(r, per=r.per * factor) for r in rules]


class OverBudget(RateLimited):
    """A call that may not wait would have had to: nothing was sent and nothing reserved.

    A RateLimited (the caller already skips a draft on one) that no platform said: not a 429.
    """


class impatient:  # noqa: N801 - used as a function: `with impatient():`
    """Calls paced inside this block wait at most `seconds`; a longer wait raises OverBudget.

    A class, not a `contextmanager` generator (as `Pacer.paced`): every typing indicator, status
    and draft goes through one, and the generator's machinery cost more calls than the block."""

    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float = 0.0) -> None:
        self._seconds = seconds

    def __enter__(self) -> None:
        self._token = _patience.set(self._seconds)

    def __exit__(self, *exc: object) -> None:
        _patience.reset(self._token)


class _Paced:
    """`Pacer.paced`'s block, a plain async context manager: every outbound call of every adapter
    goes through one, and an `asynccontextmanager` generator cost it ~10 calls more."""

    __slots__ = ("_pacer", "_scopes", "_at")

    def __init__(self, pacer: Pacer, scopes: Sequence[Scope]) -> None:
        self._pacer, self._scopes = pacer, scopes

    async def __aenter__(self) -> None:
        self._at = await self._pacer.take(self._scopes)
        self._pacer.in_flight += 1

    async def __aexit__(self, *exc: object) -> None:
        pacer = self._pacer
        pacer.in_flight -= 1
        pacer._move(self._scopes, self._at, pacer._clock.monotonic())


class Pacer:
    """One adapter's budgets: `take(scopes)` returns when a call counting against them may go.

    Its time is `clock`'s (the gateway's): its monotonic time, and its sleep for a wait."""

    def __init__(self, *, clock: Clock | None = None, headroom: float = HEADROOM, slack: float = SLACK) -> None:
        self._clock, self._headroom, self._slack = clock or Clock(), headroom, slack
        self._times: dict[tuple[str, str], list[float]] = {}  # sent and reserved moments, sorted
        # The reserved moments of calls still waiting, by scope (a count per moment: two calls may
        # reserve the same one). A woken call does not count these when they are later than its own:
        # they were reserved after it and wait for it, even when a lagging loop let their moment pass.
        self._waiting: dict[tuple[str, str], collections.Counter[float]] = {}
        self.waited = 0.0  # seconds callers spent waiting for a budget (for the bench and /metrics)
        self.skipped = 0  # impatient calls refused
        self.in_flight = 0  # calls inside `paced` now (a test's clock does not jump under them)

    def window(self, rule: Rule) -> float:
        return rule.per * (1 + self._headroom) + self._slack if rule.per > 0 else 0.0  # 0: not paced

    def paced(self, scopes: Sequence[Scope]) -> _Paced:
        """`async with`: wait for room, make the call inside the block; it counts from when the block ends."""
        return _Paced(self, scopes)

    async def take(self, scopes: Sequence[Scope]) -> float:
        """Wait until a call counting against every scope in `scopes` fits all their budgets;
        returns the moment reserved for it."""
        scopes = [(rule, key) for rule, key in scopes if rule.per > 0]
        if not scopes:
            return 0.0
        now = self._clock.monotonic()
        patience = _patience.get()
        at = self._earliest(scopes, now, DRAFT_SHARE if patience is not None else 1.0)
        if patience is not None and at - now > patience:
            self.skipped += 1
            raise OverBudget(at - now, "budget")
        entries = [self._times.setdefault((rule.name, key), []) for rule, key in scopes]
        for times in entries:
            bisect.insort(times, at)
        if at <= now:  # it goes now (the usual call): no wait that later callers would need to know of
            return at
        waiting = [self._waiting.setdefault((rule.name, key), collections.Counter()) for rule, key in scopes]
        for counter in waiting:
            counter[at] += 1
        wait = at - now
        try:
            # Woken, a call checks the calls that went before it, not the ones reserved after: a
            # loop that woke it late may have let earlier calls go late too, or calls took long
            # enough to be counted later than reserved. It waits for room there, keeping its entry
            # (its place: later calls see it as gone); re-reserving from now instead sent it behind
            # every later reservation, again and again under a lagging loop.
            while wait > 0:
                self.waited += wait
                await self._clock.sleep(wait)
                now = self._clock.monotonic()
                # Looked up again: a caller that came meanwhile may have pruned a list this one had
                # overslept in (its entry older than any window) and started a new one.
                entries = self._entries(scopes, at)
                wait = max(self._behind(rule, times, self._waiting.get((rule.name, key)), at, now)
                           for (rule, key), times in zip(scopes, entries, strict=True))
        except asyncio.CancelledError:  # a call that never went out gives its place back
            for times in entries:
                with contextlib.suppress(ValueError):
                    times.remove(at)
            raise
        finally:
            for (rule, key), counter in zip(scopes, waiting, strict=True):
                counter[at] -= 1
                if counter[at] <= 0:
                    del counter[at]
                if not counter and self._waiting.get((rule.name, key)) is counter:
                    del self._waiting[(rule.name, key)]
        if now > at:  # it goes now: counted from now
            for times in entries:
                with contextlib.suppress(ValueError):
                    times.remove(at)
                bisect.insort(times, now)
            at = now
        return at

    def _entries(self, scopes: Sequence[Scope], at: float) -> list[list[float]]:
        """Each scope's list as it is now, holding this caller's entry `at`."""
        entries = []
        for rule, key in scopes:
            times = self._times.setdefault((rule.name, key), [])
            i = bisect.bisect_left(times, at)
            if i == len(times) or times[i] != at:
                times.insert(i, at)
            entries.append(times)
        return entries

    def _behind(self, rule: Rule, times: list[float], waiting: collections.Counter[float] | None, at: float,
                now: float) -> float:
        """Seconds until a call going at `now` (entered at `at`) has room among the calls at or
        before `now` in its window; 0 when it has. Calls reserved after it that have not gone yet
        (`waiting`, later than `at`) are not in its way: they go after it."""
        w = self.window(rule)
        lo, hi = bisect.bisect_right(times, now - w), bisect.bisect_right(times, now)
        before = times[lo:hi]
        with contextlib.suppress(ValueError):
            before.remove(at)  # its own entry
        if waiting:
            before = [e for e in before if e <= at or not waiting.get(e)]
        over = len(before) - rule.limit + 1
        return before[over - 1] + w - now if over > 0 else 0.0

    def _move(self, scopes: Sequence[Scope], at: float, done: float) -> None:
        if done <= at or not at:
            return
        for rule, key in scopes:
            times = self._times.get((rule.name, key))
            if times is None:
                continue
            with contextlib.suppress(ValueError):
                times.remove(at)
            bisect.insort(times, done)

    def _earliest(self, scopes: Sequence[Scope], now: float, share: float) -> float:
        lists = []
        for rule, key in scopes:
            w = self.window(rule)
            times = self._times.get((rule.name, key), [])
            del times[: bisect.bisect_right(times, now - w)]  # older than any window that is still open
            if not times:
                self._times.pop((rule.name, key), None)
            lists.append((rule, w, times))
        caps = [(max(1, int(rule.limit * share)), w, times) for rule, w, times in lists]

        def fits(t: float) -> bool:
            return all(bisect.bisect_left(times, t + w) - bisect.bisect_right(times, t - w + ROUNDING) < cap
                       for cap, w, times in caps)

        # The count within (t - w, t + w) only falls at t = e + w for some entry e: try now, then those
        # in order, merged lazily (each list is sorted; every e + w is past now once the old are pruned).
        # A full window is usually passed by its first entry's moment, so few are looked at.
        if fits(now):
            return now
        for t in heapq.merge(*(_shifted(times, w) for _, w, times in caps)):
            if fits(t):
                return t
        return max(times[-1] + w for _, w, times in caps if times)  # unreachable: past every window, all are empty


def _shifted(times: list[float], by: float) -> Iterator[float]:
    """Each moment `by` seconds later, lazily (its own function: a generator expression in a loop would
    read the loop's last `by`)."""
    return (t + by for t in times)
