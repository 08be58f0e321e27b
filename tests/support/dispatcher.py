"""The one stand-in for the core in adapter-level tests: it records what an adapter hands over
and dedupes as the core does, under the real ledger ids (`gateway.inbound.pipeline.ledger_ids`,
per binding), so an adapter's half of the contract is checked against the ids the store uses.

End-to-end tests run the real daemon instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.inbound.pipeline import ledger_ids, same_message_id
from gateway.messages import InboundMessage, Sender
from gateway.outbound.adapter import Decision, DecisionOutcome, SubmitResult


@dataclass(frozen=True)
class Click:
    """One `decide` call, as the adapter made it."""

    approval_id: str
    decision: Decision
    decider: Sender
    binding_id: str
    surface: str


class FakeDispatcher:
    """`deciders`: the accounts that may decide (None: anyone), refused with `refusal`; the first
    accepted click on an approval wins, a later one hears who decided. `outcome`, when set, is
    every decision's answer instead. `gate`, when set up, holds every submit (recorded in
    `submitted`, not yet in `accepted`) until it is set; a submit whose text is in `hold` never
    returns and is not recorded (`held` is set when one arrives); `refuse`, when set, is raised by
    the next submit (as the core refuses a message it could not store)."""

    def __init__(self, *, deciders: set[str] | None = None, refusal: str = "Only Ada can decide this.") -> None:
        self.submitted: list[InboundMessage] = []  # every message handed over, redeliveries too
        self.accepted: list[InboundMessage] = []  # the ones the ledger took
        self.clicks: list[Click] = []
        self.answers: list[tuple[str, int, str]] = []  # question buttons pressed: (question id, choice, account)
        self.state: dict[tuple[str, str], str] = {}
        self.deciders = deciders
        self.refusal = refusal
        self.decided: dict[str, str] = {}  # approval id -> who decided it
        self.outcome: DecisionOutcome | None = None
        self.on_accepted: Callable[[Click], Awaitable[None]] | None = None
        self.gate: asyncio.Event | None = None
        self.hold: set[str] = set()
        self.held = asyncio.Event()
        self.refuse: Exception | None = None  # the next submit raises it (after the gate)
        self.dropped: list[str] = []  # dedupe keys `stored_lately` said were stored: dropped unread
        self._ledger: set[tuple[str, str]] = set()

    async def submit(self, message: InboundMessage) -> SubmitResult:
        if message.text in self.hold:  # a submit that never returns hands nothing over
            self.held.set()
            await asyncio.Event().wait()
        self.submitted.append(message)
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse is not None:  # nothing stored: the adapter must not ack
            refusal, self.refuse = self.refuse, None
            raise refusal
        ids = {(message.binding_id, i) for i in ledger_ids(message)}
        if ids & self._ledger:
            return SubmitResult(accepted=False, duplicate=True, reason="duplicate")
        self._ledger |= ids
        self.accepted.append(message)
        return SubmitResult(accepted=True, conversation_id="c1", message_id=str(len(self.accepted)))

    def stored_lately(self, binding_id: str, platform: str, dedupe_key: str) -> bool:
        if (binding_id, same_message_id(platform, dedupe_key)) not in self._ledger:
            return False
        self.dropped.append(dedupe_key)
        return True

    async def decide(self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str,
                     surface: str) -> DecisionOutcome:
        click = Click(approval_id, decision, decider, binding_id, surface)
        self.clicks.append(click)
        if self.outcome is not None:
            return self.outcome
        if self.deciders is not None and decider.account_id not in self.deciders:
            return DecisionOutcome(False, self.refusal)
        if approval_id in self.decided:
            return DecisionOutcome(False, f"Already decided by {self.decided[approval_id]}.")
        self.decided[approval_id] = decider.display_name
        if self.on_accepted is not None:
            await self.on_accepted(click)
        return DecisionOutcome(True, f"{decision} by {decider.display_name}", private=False)

    async def answer(self, question_id: str, choice: int, who: Sender, *, binding_id: str) -> DecisionOutcome:
        """A question card's button: recorded, refused to anyone not among `deciders`."""
        self.answers.append((question_id, choice, who.account_id))
        if self.deciders is not None and who.account_id not in self.deciders:
            return DecisionOutcome(False, self.refusal)
        return DecisionOutcome(True, "Answered.")

    async def get_state(self, binding_id: str, key: str) -> str | None:
        return self.state.get((binding_id, key))

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        self.state[(binding_id, key)] = value

    def texts(self) -> list[str]:
        """The texts handed over, in order (redeliveries too)."""
        return [m.text for m in self.submitted]
