"""Approvals: a gated call parks the run, a card shows it, the first decision wins, the run resumes.

Built on pydantic-ai's deferred tool calls. The gate (`capabilities/approval_gate.py`, a
wrapper toolset) raises `ApprovalRequired` for calls the policy gates; the run ends with `DeferredToolRequests`; its
messages are stored on the run row (`runs.state`) and a card is posted. A decision is a
conditional update, so the first click wins on any replica. When every call on the card is
decided the run goes back to the conversation's queue and resumes from the stored messages
with `DeferredToolResults` — in this process or the next one. The queries live in
`gateway.store.approvals`; what a card says and how it is posted, in `gateway.approvals.cards`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ModelMessage

from bindings.models import BindingSpec

from gateway.approvals import arguments, cards
from gateway.runs.delegated import APPROVED, DECISIONS, delegated_calls
from gateway.outbound.delivery import Outbound, ReplyStream
from gateway.http.events import EventBus
from gateway.ops.metrics import Metrics
from gateway.approvals.audit import decisions
from gateway.periodic import every
from gateway.approvals.policy import Modes
from gateway.messages import CommandAnswer
from gateway.store import repo
from gateway.store.approvals import ApprovalStore, NewItem, Speaker
from gateway.store.models import Run
from gateway.outbound.adapter import (Adapter, ApprovalCard, ApprovalItem, Decision, DecisionOutcome, ItemState,
                                      PlatformError, ReplyTarget, Sender)
from gateway.runs.turn import Turn
from gateway.approvals.principal import Principal
from gateway.membership import Membership, Place
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.approvals.service")

EXPIRY_CHECK_EVERY = 60.0


class Chat(Protocol):
    """Where the deciders rule is asked: a conversation (`repo.ConversationRef`), or a group chat
    whose notes serve every conversation in it (a `ReplyTarget` there)."""

    @property
    def platform(self) -> str: ...
    @property
    def binding_id(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def chat_kind(self) -> str: ...


class Approvals:
    """The approval service: parks runs, shows cards, takes decisions, and switches modes.

    Who may decide a card, switch a conversation's modes or change a group chat's notes is asked
    here, on every door (a click, a chat command, the API), so no surface can go round them.
    """

    def __init__(self, store: repo.Store, outbound: Outbound, adapter_for: Callable[[str], Adapter | None],
                 bindings: Callable[[], Mapping[str, BindingSpec]], events: EventBus, metrics: Metrics,
                 wake: Callable[[str], None], membership: Membership) -> None:
        self.store = store
        self._membership = membership
        self.db = ApprovalStore(store.sessions, store.clock)
        self._outbound, self._adapter_for, self._bindings = outbound, adapter_for, bindings
        self._events, self._metrics, self._wake = events, metrics, wake
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.expire_due()
        self._expiry = asyncio.create_task(self._expire_forever(), name="approvals:expiry")

    async def stop(self) -> None:
        await cancel_and_wait(self._expiry)

    async def _expire_forever(self) -> None:
        await every(EXPIRY_CHECK_EVERY, self.expire_due, "approval expiry check", log)

    # --- modes --------------------------------------------------------------------------

    async def modes(self, conversation_id: str) -> Modes:
        return await self.db.modes(conversation_id)

    async def may_change_modes(self, conv: repo.ConversationRef, sender: Sender) -> str | None:
        """None when `sender` may switch this conversation's modes; else why not, for them alone.

        A mode covers every run of the conversation, so it is for whoever would decide all of them
        (`decides_for_everyone`): under `requester` the one person who has asked anything here.
        """
        deciders = self._deciders(conv.binding_id)
        speakers = await self.db.speakers(conv.id) if deciders == "requester" else []
        if await self.decides_for_everyone(deciders, sender, speakers, conv):
            return None
        return await self._not_for_everyone(
            deciders, sender, speakers, conv, "change approvals here",
            several=("Approvals can't be switched for this whole conversation: several people have asked here, "
                     "and each decides their own requests."))

    async def may_manage_chat_memory(self, chat: Chat, sender: Sender) -> str | None:
        """None when `sender` may change a group chat's notes (`/memory` there: a command, a card's
        button); else why not, for them alone.

        The chat's notes serve every run in the chat (every thread of it), so, as for a mode, they
        are for whoever would decide all of those runs: under `channel` someone in the chat as its
        platform says now, under `requester` the one person who has asked the agent anything in the
        chat (anyone, before anybody has), under a list only those named.
        """
        deciders = self._deciders(chat.binding_id)
        speakers = (await self.db.chat_speakers(chat.platform, chat.workspace, chat.channel)
                    if deciders == "requester" else [])
        if await self.decides_for_everyone(deciders, sender, speakers, chat):
            return None
        log.info("chat memory change refused for %s in %s (deciders: %s)", sender.account_id, chat.channel,
                 deciders if isinstance(deciders, str) else "list")
        return await self._not_for_everyone(
            deciders, sender, speakers, chat, "change this chat's notes",
            several=("This chat's notes can't be changed by one person here: several people have asked the agent "
                     "in this chat, and each decides only their own requests. The binding's admin can name who may "
                     "(`approvals.deciders`)."))

    async def decides_for_everyone(self, deciders: Any, who: Sender, requesters: Sequence[Speaker],
                                   where: Chat) -> bool:
        """Whether `who` would decide every run these people asked for here, by the one deciders rule
        (`may_decide_as`): what covers all their runs (a conversation's modes, a chat's notes) is for
        such a person alone. Under `requester` nobody has asked yet means anyone; `channel` and a list
        do not depend on who asked."""
        if deciders != "requester":
            return await self.may_decide_as(deciders, who, None, None, where)
        for requester in requesters:
            if not await self.may_decide_as(deciders, who, requester.account_id, requester.person_id, where):
                return False
        return True

    async def _not_for_everyone(self, deciders: Any, sender: Sender, speakers: Sequence[Speaker], where: Chat,
                                what: str, *, several: str) -> str:
        """Why `decides_for_everyone` said no, for `sender` alone: `what` they may not do."""
        if deciders == "channel":
            return cards.not_in_chat(what)
        if deciders != "requester":
            return f"{cards.who_decides(deciders, '')} can {what}."
        person = await self.db.person_of(where.platform, where.workspace, sender.account_id)
        mine = [s for s in speakers if s.account_id == sender.account_id or (person is not None and s.person_id == person)]
        others = [s for s in speakers if s not in mine]
        if len(others) == 1 and not mine:
            return f"{cards.who_decides('requester', others[0].name)} can {what}."
        return several

    def _deciders(self, binding_id: str) -> Any:
        binding = self._bindings().get(binding_id)
        return binding.approvals.deciders if binding is not None else "requester"

    async def switch(self, conv: repo.ConversationRef, sender: Sender, *, surface: str,
                     approve_all: bool | None = None, ask_every_tool: bool | None = None,
                     answers: list[CommandAnswer] | None = None) -> Modes | str:
        """Switch a mode if `sender` may (audited, and a line in the thread, added to `answers` when
        a command asked); else why not."""
        refusal = await self.may_change_modes(conv, sender)
        if refusal is not None:
            log.info("mode switch refused for %s in conversation %s (%s)", sender.account_id, conv.id, surface)
            return refusal
        who = sender.display_name or sender.account_id
        modes = await self.db.set_modes(conv.id, who=who, account_id=sender.account_id, surface=surface,
                                        approve_all=approve_all, ask_every_tool=ask_every_tool)
        said = f"{who} {_describe(modes)}."
        kept = await self.notice(conv, said)
        if answers is not None:
            answers.append(CommandAnswer("notice", said, kept))
        return modes

    async def notice(self, conv: repo.ConversationRef, text: str, *, posted: bool = False, kept: bool = False) -> int:
        """A short line in the thread, also kept in the conversation's messages (its id returned; 0 when `kept`: the
        caller kept it already, as a stop keeps its line with its end, so a retried post records it once). `posted`:
        returns once the line is posted, for a caller that keeps it until then; PlatformError when it was given up."""
        kept_id = 0 if kept else await self.store.add_message(conv.id, "notice", text)
        sent = self._outbound.send(conv.target(), f"_{text}_")
        self._events.publish(conv.id, {"type": "notice", "text": text})
        if posted and not await asyncio.shield(sent):
            raise PlatformError(f"a line for conversation {conv.id} was not posted")
        return kept_id

    # --- parking ------------------------------------------------------------------------

    async def park(self, turn: Turn, messages: list[ModelMessage], requests: DeferredToolRequests,
                   stream: ReplyStream, parked: Callable[[], Awaitable[None]]) -> None:
        """Record the pending calls, leave the run parked (`parked` records it), and show one card.

        In that order, so a process that dies between two steps leaves something whole: a card
        with its run still running (the run runs again and asks again; its new card replaces the
        old one), or a parked run whose card no message shows yet (`show_unshown` posts it).
        """
        if requests.calls:
            # External (non-approval) deferred calls are not something this gateway produces.
            log.warning("run %s deferred %d external calls; they will be denied", turn.run_id, len(requests.calls))
        # Keyed by tool_call_id; ordered as the model called them (requests.approvals is not).
        order = {p.tool_call_id: i for i, p in enumerate(_calls_in_order(messages))}
        calls = sorted(requests.approvals, key=lambda p: order.get(p.tool_call_id, len(order)))
        items = []
        for call in calls:
            delegated = delegated_calls(requests.metadata.get(call.tool_call_id))
            if delegated is not None:  # a sync delegate's gated calls, made inside this `task` call
                items.extend(NewItem(d.tool_call_id, d.tool_id, d.tool_name, d.capability, arguments.shown(d.args),
                                     d.arguments_digest, delegate=d.delegate, parent_call_id=call.tool_call_id)
                             for d in delegated)
                continue
            info = turn.tools.get(call.tool_name)
            # The gate said what the tool would receive (validated, defaults filled in) and its digest.
            gate = requests.metadata.get(call.tool_call_id) or {}
            items.append(NewItem(call.tool_call_id, info.stable_id if info else call.tool_name, call.tool_name,
                                 info.capability if info else "unknown",
                                 arguments.shown(gate.get(arguments.ARGUMENTS, call.args)), gate.get(arguments.DIGEST)))
        card_id = await self.db.create_card(
            run_id=turn.run_id, conversation_id=turn.conversation.id, binding_id=turn.binding.id,
            deciders=turn.binding.approvals.deciders,
            expires_at=self.store.clock.now() + timedelta(seconds=turn.binding.approvals.timeout), items=items)
        await parked()
        self._metrics.approvals_pending.inc(len(items))
        # The card is decidable once stored (the web API lists it), before the run is parked.
        if await self.db.requeue_decided(card_id):
            self._wake(turn.conversation.id)
        await self._show(card_id, stream.adapter, turn.target)

    async def _show(self, card_id: str, adapter: Adapter, target: ReplyTarget, *, recovering: bool = False) -> None:
        ref = await cards.post(adapter, target, await self.card(card_id), recovering=recovering)
        if ref is not None:  # else the sweep shows it again (show_unshown)
            await self.db.set_card_ref(card_id, ref)

    async def show_unshown(self, *, at_start: bool) -> int:
        """Post the cards of parked runs that no message shows (their process died first, or the
        post failed). At start-up on SQLite every such card is the last process's; on a shared
        database only cards older than a run lease, so a live replica's card about to be posted
        is left alone."""
        older_than = None
        if self.store.shared or not at_start:
            older_than = self.store.clock.now() - timedelta(seconds=self.store.lease_seconds)
        shown = 0
        for card_id in await self.db.unshown(older_than=older_than):
            found = await self.db.card(card_id)
            conv = await self.store.conversation(found[0].conversation_id) if found else None
            adapter = self._adapter_for(found[0].binding_id) if found else None
            if conv is None or adapter is None:
                continue
            await self._show(card_id, adapter, conv.target(), recovering=True)
            shown += 1
        if shown:
            log.info("posted %d approval cards no message showed", shown)
        return shown

    async def card(self, card_id: str) -> ApprovalCard:
        found = await self.db.card(card_id)
        assert found is not None
        return cards.approval_card(*found)

    # --- deciding -----------------------------------------------------------------------

    async def decide(self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str,
                     surface: str) -> DecisionOutcome:
        """A decision by `decider`, an account on the platform of `binding_id`, which must be the card's:
        a click decides only cards of the binding it came through (the API goes through `decide_for`)."""
        found = await self.db.target_of(approval_id)
        if found is None or found[1].binding_id != binding_id:
            return DecisionOutcome(False, "This approval no longer exists.")
        item, card_row, run = found
        conv = await self.store.conversation(card_row.conversation_id)
        if run is None or conv is None:
            return DecisionOutcome(False, "This approval no longer exists.")
        deciders = json.loads(card_row.deciders)
        if not await self._may_decide(deciders, decider, run, conv):
            return DecisionOutcome(False, cards.refusal(deciders, run.requester_name))
        state = ItemState.DENIED if decision is Decision.DENY else ItemState.APPROVED
        won, requeued = await self.db.decide(card_id=card_row.id, approval_id=approval_id if item is not None else None,
                                             state=state.value, who=decider.display_name or decider.account_id,
                                             account_id=decider.account_id, surface=surface)
        if won == 0:
            return DecisionOutcome(False, await self._already(approval_id if item else None, card_row.id))
        self._metrics.approvals_pending.dec(won)
        said = "Denied." if state is ItemState.DENIED else "Approved."
        if decision is Decision.APPROVE_ALL:
            switched = await self.switch(conv, decider, surface="button" if surface != "api" else "api",
                                         approve_all=True)
            if isinstance(switched, str):
                said = f"Approved these calls only. {switched}"
        if requeued:
            self._wake(conv.id)
        await self._refresh_card(card_row.id)
        return DecisionOutcome(True, said, private=True)

    async def decide_for(self, approval_id: str, decision: Decision, principal: Principal) -> DecisionOutcome:
        """An API client's decision: made as the principal's own account on the card's platform, so the
        card's binding asks it exactly what it would ask that account's click. A principal with no
        account there decides nothing (never a wildcard that reaches every binding's cards)."""
        found = await self.db.target_of(approval_id)
        conv = await self.store.conversation(found[1].conversation_id) if found else None
        if found is None or conv is None:
            return DecisionOutcome(False, "This approval no longer exists.")
        decider = await self._decider_for(principal, found, conv)
        if decider is None:
            said = cards.refusal(json.loads(found[1].deciders), found[2].requester_name if found[2] else "")
            if not await self._accounts_of(principal, conv.platform, conv.workspace):
                said += (f" Deciding through the API acts as your own {conv.platform} account, and none is linked to "
                         "you: link it, or use a token whose person may decide.")
            return DecisionOutcome(False, said)
        return await self.decide(approval_id, decision, decider, binding_id=found[1].binding_id, surface="api")

    async def readable_by(self, approval_id: str, principal: Principal) -> ApprovalItem | None:
        """The item with its full arguments, for someone who may decide it; None for anyone else."""
        found = await self.db.target_of(approval_id)
        conv = await self.store.conversation(found[1].conversation_id) if found else None
        if found is None or found[0] is None or conv is None or await self._decider_for(principal, found, conv) is None:
            return None
        return next(i for i in (await self.card(found[1].id)).items if i.approval_id == approval_id)

    async def item_on(self, binding_id: str, approval_id: str) -> ApprovalItem | None:
        """The item, with its full arguments, when it is on a card of `binding_id` (a "Show all" button
        there: whoever sees the card in that chat may read what it stands for)."""
        found = await self.db.target_of(approval_id)
        if found is None or found[0] is None or found[1].binding_id != binding_id:
            return None
        return next(i for i in (await self.card(found[1].id)).items if i.approval_id == approval_id)

    async def _decider_for(self, principal: Principal, found: tuple[Any, Any, Run | None],
                           conv: repo.ConversationRef) -> Sender | None:
        """The principal's account on the card's platform and workspace that may decide it, or None."""
        run = found[2]
        if run is None:
            return None
        deciders = json.loads(found[1].deciders)
        for account, name in await self._accounts_of(principal, conv.platform, conv.workspace):
            sender = Sender(account, principal.name or name or account)
            if await self._may_decide(deciders, sender, run, conv):
                return sender
        return None

    async def _accounts_of(self, principal: Principal, platform: str, workspace: str) -> list[tuple[str, str]]:
        """(account id, display name) of the principal on one platform and workspace: the account it
        names, and every account linked to its person there."""
        assert principal.ref is not None, "the API resolves the local person before asking"
        return await self.db.accounts_of(principal.ref, platform, workspace)

    async def _already(self, approval_id: str | None, card_id: str) -> str:
        row = await self.db.decided_item(approval_id, card_id)
        return cards.too_late(row.state if row else None, row.decided_by if row else None)

    async def may_stop(self, run: Run, conv: repo.ConversationRef, who: Sender) -> bool:
        """Whether `who` may stop `run`: its requester, or whoever may decide its binding's cards."""
        return await self.may_stop_for(run.binding_id, conv, who, run.requester_account, run.requester_person_id)

    async def may_stop_for(self, binding_id: str, conv: repo.ConversationRef, who: Sender, account: str | None,
                           person: str | None) -> bool:
        """Whether `who` may stop what `account` (`person`) asked under `binding_id`: the asker, or whoever may
        decide the binding's cards. A waiting run's messages are asked so one by one (`Stops.stop`)."""
        if await self.may_decide_as("requester", who, account, person, conv):
            return True
        binding = self._bindings().get(binding_id)
        return binding is not None and await self.may_decide_as(binding.approvals.deciders, who, account, person, conv)

    async def _may_decide(self, deciders: Any, decider: Sender, run: Run, conv: repo.ConversationRef) -> bool:
        return await self.may_decide_as(deciders, decider, run.requester_account, run.requester_person_id, conv)

    async def may_decide_as(self, deciders: Any, decider: Sender, requester_account: str | None,
                            requester_person: str | None, conv: Chat) -> bool:
        """The one deciders rule, asked by every door: a click, a command, a Stop, the API, a question
        put to the person (`questions.py`), and through `decides_for_everyone` a mode switch and a
        change to a chat's notes."""
        if deciders == "channel":
            return await self._in_channel(conv, decider)
        person = await self.db.person_of(conv.platform, conv.workspace, decider.account_id)
        if deciders == "requester":
            return decider.account_id == requester_account or (
                person is not None and person == requester_person
            )
        return bool(_names(conv, decider, person) & set(deciders))

    async def _in_channel(self, conv: Chat, sender: Sender) -> bool:
        """Whether `sender` is in the conversation's channel now, as its platform says (cached briefly).

        A click arrives from inside the chat, but the API (a linked account) does not: a person who
        left the channel would otherwise still decide its cards. Asked on every door all the same, so
        one answer holds everywhere; a platform that cannot say counts as no (fail closed)."""
        place = Place(conv.platform, conv.binding_id, conv.workspace, conv.channel, conv.chat_kind,
                      (sender.account_id,))
        return await self._membership.counts(place) is True

    async def _refresh_card(self, card_id: str) -> None:
        found = await self.db.card(card_id)
        if found is None:
            return
        row = found[0]
        conv = await self.store.conversation(row.conversation_id)
        adapter = self._adapter_for(row.binding_id)
        if conv is None or adapter is None:
            return
        await cards.refresh(adapter, conv.target(), row.card_ref or "", cards.approval_card(*found))

    async def results_for(self, run_id: str) -> DeferredToolResults:
        """The decisions of a parked run's latest card, as pydantic-ai wants them on resume."""
        results = DeferredToolResults()
        for row in await self.db.latest_decisions(run_id):
            if row.state == ItemState.APPROVED.value:
                decision: bool | str = True
            elif row.state == ItemState.DENIED.value:
                decision = f"{row.decided_by} denied this call. Do not retry it; tell them what you would have done instead."
            else:
                decision = "Nobody approved this call in time."
            if row.parent_call_id is not None:
                # A delegate's call: the run's `task` call goes on, and hands each decision down to the
                # delegate it resumes (a denial reaches the delegate's model, not the parent's).
                results.approvals[row.parent_call_id] = ToolApproved()
                handed = results.metadata.setdefault(row.parent_call_id, {DECISIONS: {}, APPROVED: {}})
                handed[DECISIONS][row.tool_call_id] = decision
                if decision is True:  # the delegate's gate checks it as below
                    handed[APPROVED][row.tool_call_id] = arguments.approved_metadata(row.id, row.arguments_digest)
            else:
                results.approvals[row.tool_call_id] = True if decision is True else ToolDenied(str(decision))
                if decision is True:
                    # The gate starts each approved call at most once, and only on the arguments the
                    # decision was made on (capabilities/approval_gate.py).
                    results.metadata[row.tool_call_id] = arguments.approved_metadata(row.id, row.arguments_digest)
        return results

    async def stop_parked(self, run: Run, conv: repo.ConversationRef, who: Sender) -> bool:
        """Stop a run waiting on its card: the card closes (its calls denied by `who`, nothing runs),
        the run ends `stopped`, and the thread gets one line. False when it was no longer parked."""
        name = who.display_name or who.account_id
        closed = await self.db.close_for_stop(run.id, who=name, account_id=who.account_id)
        if closed is None:
            return False
        self._metrics.approvals_pending.dec(closed.items)
        await self._refresh_card(closed.card_id)
        await self.notice(conv, f"⏹ Stopped by {name} while waiting for approval; nothing on the card ran.")
        self._events.run_ended(conv.id, run.id, repo.STOPPED)
        self._wake(conv.id)  # what waited behind the parked run goes next
        return True

    # --- expiry -------------------------------------------------------------------------

    async def expire_due(self) -> int:
        expired = await self.db.expire_due()
        for card in expired:
            self._metrics.approvals_pending.dec(card.items)
            await self._refresh_card(card.card_id)
            conv = await self.store.conversation(card.conversation_id)
            if conv is not None:
                await self.notice(conv, "The approval request expired without a decision, so I stopped.")
            self._events.run_ended(card.conversation_id, card.run_id, repo.EXPIRED)
            self._wake(card.conversation_id)
        return len(expired)

    # --- reading ------------------------------------------------------------------------

    async def decisions(self, conversation_id: str | None = None) -> list[dict[str, Any]]:
        return await decisions(self.store, conversation_id)

    async def cards(self, conversation_id: str) -> list[tuple[ApprovalCard, datetime]]:
        """The conversation's cards with when each was posted (a page shows them among the messages)."""
        return [(await self.card(card_id), created) for card_id, created in await self.db.cards_of(conversation_id)]


def _names(conv: Chat, sender: Sender, person: str | None) -> set[str]:
    """The ways a decider list may name `sender`: account, platform:account, person id."""
    return {sender.account_id, f"{conv.platform}:{sender.account_id}"} | ({person} if person else set())


def _calls_in_order(messages: list[ModelMessage]) -> list[Any]:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    return [p for p in last.parts if isinstance(p, ToolCallPart)] if last else []


def _describe(modes: Modes) -> str:
    if modes.approve_all:
        return "switched on “approve all in this conversation”: gated tools now run without asking here"
    if modes.ask_every_tool:
        return "switched on “ask for every tool”: every tool call in this conversation now needs approval"
    return "switched approvals back to the agent's normal policy in this conversation"

