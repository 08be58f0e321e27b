"""Approvals: a gated call parks the run, a card shows it, the first decision wins, the run resumes.

Built on pydantic-ai's deferred tool calls. The gate (a wrapper toolset) raises
`ApprovalRequired` for calls the policy gates; the run ends with `DeferredToolRequests`; its
messages are stored on the run row (`runs.state`) and a card is posted. A decision is a
conditional update, so the first click wins on any replica. When every call on the card is
decided the run goes back to the conversation's queue and resumes from the stored messages
with `DeferredToolResults` — in this process or the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from sqlalchemy import select, update

from .clock import unguessable_id
from .delivery import ReplyStream
from .policy import Modes, needs_approval
from .store import repo
from .store.models import Account, ApprovalCardRow, ApprovalRow, ConversationMode, Run
from .surface import ApprovalCard, ApprovalItem, Decision, DecisionOutcome, ItemState, Sender

if TYPE_CHECKING:
    from .daemon import Gateway
    from .runner import Turn

log = logging.getLogger("gateway.approvals")

ARGS_LIMIT = 1500
EXPIRY_CHECK_EVERY = 60.0
_SECRET_KEY = re.compile(r"(token|secret|passw|api[_-]?key|authorization|credential|cookie)", re.I)


# --- the gate -----------------------------------------------------------------------------


@dataclass
class _GateToolset(WrapperToolset[Any]):
    turn: Any = None

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        turn: Turn = self.turn
        if turn.modes is None:
            approvals = turn.gateway.approvals
            turn.modes = await approvals.modes(turn.conversation.id) if approvals is not None else Modes()
        if not ctx.tool_call_approved and needs_approval(turn.tools.get(name), turn.modes):
            raise ApprovalRequired
        return await super().call_tool(name, tool_args, ctx, tool)


@dataclass
class ApprovalGate(AbstractCapability[Any]):
    """Wraps the run's whole toolset (outermost), so it sees the names the model used."""

    turn: Any = None

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return _GateToolset(toolset, turn=self.turn)


# --- presentation -------------------------------------------------------------------------


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def show_arguments(args: str | dict[str, Any] | None) -> str:
    """Pretty-printed, secrets redacted, truncated with a visible marker."""
    if isinstance(args, str):
        try:
            parsed: Any = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            parsed = args
    else:
        parsed = args or {}
    text = json.dumps(redact(parsed), indent=2, ensure_ascii=False, default=str) if not isinstance(parsed, str) else parsed
    if len(text) > ARGS_LIMIT:
        text = text[:ARGS_LIMIT] + f"\n… (truncated: {len(text) - ARGS_LIMIT} more characters)"
    return text


def deciders_text(deciders: Any, requester_name: str) -> str:
    if deciders == "channel":
        return "Anyone in this chat can decide."
    if deciders == "requester":
        return f"Only {requester_name or 'the person who asked'} can decide."
    return f"Only {', '.join(deciders)} can decide."


# --- the service --------------------------------------------------------------------------


class Approvals:
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self._expiry: asyncio.Task[None] | None = None

    @property
    def store(self) -> repo.Store:
        return self.gw.store

    async def start(self) -> None:
        await self.expire_due()
        self._expiry = asyncio.create_task(self._expire_forever(), name="approvals:expiry")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_EVERY)
            try:
                await self.expire_due()
            except Exception:
                log.exception("approval expiry check failed")

    # --- modes --------------------------------------------------------------------------

    async def modes(self, conversation_id: str) -> Modes:
        async with self.store.sessions() as s:
            row = await s.get(ConversationMode, conversation_id)
            return Modes(row.approve_all, row.ask_every_tool) if row else Modes()

    async def set_mode(self, conversation_id: str, *, who: str, approve_all: bool | None = None,
                       ask_every_tool: bool | None = None) -> Modes:
        """Switch a mode (the two exclude each other) and leave a visible line in the thread."""
        async with self.store.sessions() as s, s.begin():
            row = await s.get(ConversationMode, conversation_id)
            if row is None:
                row = ConversationMode(conversation_id=conversation_id, approve_all=False, ask_every_tool=False,
                                       changed_by=who, changed_at=self.store.clock.now())
                s.add(row)
            if approve_all is not None:
                row.approve_all = approve_all
                if approve_all:
                    row.ask_every_tool = False
            if ask_every_tool is not None:
                row.ask_every_tool = ask_every_tool
                if ask_every_tool:
                    row.approve_all = False
            row.changed_by, row.changed_at = who, self.store.clock.now()
            modes = Modes(row.approve_all, row.ask_every_tool)
        await self.notice(conversation_id, f"{who} {_describe(modes)}.")
        return modes

    async def notice(self, conversation_id: str, text: str) -> None:
        """A short line in the thread, also kept in the conversation's messages."""
        await self.store.add_message(conversation_id, "notice", text)
        conv = await self.store.conversation(conversation_id)
        adapter = self.gw.adapters.get(conv.binding_id) if conv else None
        if conv is not None and adapter is not None:
            try:
                await adapter.post_message(conv.target(), adapter.render(f"_{text}_"))
            except Exception as e:
                log.warning("could not post a notice: %s", e)
            self.gw.events.publish(conv.id, {"type": "notice", "text": text})

    # --- parking ------------------------------------------------------------------------

    async def park(self, turn: Turn, messages: list[ModelMessage], requests: DeferredToolRequests,
                   stream: ReplyStream) -> None:
        """Record the pending calls, show one card, and leave the run parked."""
        if requests.calls:
            # External (non-approval) deferred calls are not something this gateway produces.
            log.warning("run %s deferred %d external calls; they will be denied", turn.run_id, len(requests.calls))
        now = self.store.clock.now()
        card_id = unguessable_id()
        deciders = turn.binding.approvals.deciders
        expires = now + timedelta(seconds=turn.binding.approvals.timeout)
        # Keyed by tool_call_id; ordered as the model called them (requests.approvals is not).
        order = {p.tool_call_id: i for i, p in enumerate(_calls_in_order(messages))}
        calls = sorted(requests.approvals, key=lambda p: order.get(p.tool_call_id, len(order)))
        rows = []
        async with self.store.sessions() as s, s.begin():
            s.add(ApprovalCardRow(id=card_id, run_id=turn.run_id, conversation_id=turn.conversation.id,
                                  binding_id=turn.binding.id, card_ref=None, deciders=json.dumps(deciders),
                                  state="pending", created_at=now, expires_at=expires))
            await s.flush()
            for i, call in enumerate(calls):
                info = turn.tools.get(call.tool_name)
                row = ApprovalRow(
                    id=unguessable_id(), card_id=card_id, run_id=turn.run_id, conversation_id=turn.conversation.id,
                    tool_call_id=call.tool_call_id, tool_id=info.stable_id if info else call.tool_name,
                    tool_name=call.tool_name, capability=info.capability if info else "unknown",
                    arguments=show_arguments(call.args), state=ItemState.PENDING.value, position=i, created_at=now,
                )
                s.add(row)
                rows.append(row)
        self.gw.metrics.approvals_pending.inc(len(rows))
        card = await self.card(card_id)
        try:
            ref = await turn.adapter.post_card(turn.target, card)
        except Exception as e:
            log.warning("could not post approval card %s: %s", card_id, e)
            ref = None
        async with self.store.sessions() as s, s.begin():
            await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_id).values(card_ref=ref))

    async def card(self, card_id: str) -> ApprovalCard:
        async with self.store.sessions() as s:
            row = await s.get(ApprovalCardRow, card_id)
            assert row is not None
            items = list(await s.scalars(select(ApprovalRow).where(ApprovalRow.card_id == card_id)
                                         .order_by(ApprovalRow.position)))
            run = await s.get(Run, row.run_id)
        note = ""
        if row.state == "expired":
            note = "Expired: nobody decided in time."
        return ApprovalCard(
            card_id=row.id,
            run_id=row.run_id,
            items=tuple(
                ApprovalItem(approval_id=i.id, tool_name=i.tool_name, capability=i.capability, arguments=i.arguments,
                             state=ItemState(i.state), decided_by=i.decided_by)
                for i in items
            ),
            deciders=deciders_text(json.loads(row.deciders), run.requester_name if run else ""),
            note=note,
        )

    # --- deciding -----------------------------------------------------------------------

    async def decide(self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str,
                     surface: str) -> DecisionOutcome:
        async with self.store.sessions() as s:
            item = await s.get(ApprovalRow, approval_id)
            card_row = await s.get(ApprovalCardRow, item.card_id if item else approval_id)
            if card_row is None or (surface != "api" and card_row.binding_id != binding_id):
                return DecisionOutcome(False, "This approval no longer exists.")
            run = await s.get(Run, card_row.run_id)
        conv = await self.store.conversation(card_row.conversation_id)
        if run is None or conv is None:
            return DecisionOutcome(False, "This approval no longer exists.")
        deciders = json.loads(card_row.deciders)
        if not await self._may_decide(deciders, decider, run, conv):
            return DecisionOutcome(False, deciders_text(deciders, run.requester_name).replace("can decide", "can decide this"))
        who = decider.display_name or decider.account_id
        now = self.store.clock.now()
        state = ItemState.DENIED if decision is Decision.DENY else ItemState.APPROVED
        async with self.store.sessions() as s, s.begin():
            where = [ApprovalRow.state == ItemState.PENDING.value]
            where.append(ApprovalRow.id == approval_id if item is not None else ApprovalRow.card_id == card_row.id)
            result = await s.execute(
                update(ApprovalRow).where(*where).values(state=state.value, decided_by=who,
                                                         decided_by_account=decider.account_id, decided_at=now,
                                                         surface=surface)
            )
            won = result.rowcount or 0
        if won == 0:
            return DecisionOutcome(False, await self._already(approval_id if item else None, card_row.id))
        self.gw.metrics.approvals_pending.dec(won)
        if decision is Decision.APPROVE_ALL:
            await self.set_mode(conv.id, who=who, approve_all=True)
        await self._refresh_card(card_row.id)
        await self._resume_if_decided(card_row.id, run.id, conv.id)
        verb = "Denied" if state is ItemState.DENIED else "Approved"
        return DecisionOutcome(True, f"{verb}.", private=True)

    async def _already(self, approval_id: str | None, card_id: str) -> str:
        async with self.store.sessions() as s:
            q = select(ApprovalRow).where(ApprovalRow.card_id == card_id, ApprovalRow.state != "pending")
            if approval_id:
                q = select(ApprovalRow).where(ApprovalRow.id == approval_id)
            row = (await s.scalars(q)).first()
        if row is None or row.state == ItemState.PENDING.value:
            return "Nothing left to decide here."
        if row.state == ItemState.EXPIRED.value:
            return "This request expired before anyone decided."
        return f"Already {row.state} by {row.decided_by}."

    async def _may_decide(self, deciders: Any, decider: Sender, run: Run, conv: repo.ConversationRef) -> bool:
        if deciders == "channel":
            return True
        person = await self._person_of(conv.platform, conv.workspace, decider.account_id)
        if deciders == "requester":
            return decider.account_id == run.requester_account or (
                person is not None and person == run.requester_person_id
            )
        names = {decider.account_id, f"{conv.platform}:{decider.account_id}"} | ({person} if person else set())
        return bool(names & set(deciders))

    async def _person_of(self, platform: str, workspace: str, account_id: str) -> str | None:
        async with self.store.sessions() as s:
            return await s.scalar(select(Account.person_id).where(
                Account.platform == platform, Account.workspace == workspace, Account.account_id == account_id))

    async def _refresh_card(self, card_id: str) -> None:
        card = await self.card(card_id)
        async with self.store.sessions() as s:
            row = await s.get(ApprovalCardRow, card_id)
        conv = await self.store.conversation(row.conversation_id) if row else None
        adapter = self.gw.adapters.get(row.binding_id) if row else None
        if row is None or conv is None or adapter is None:
            return
        try:
            await adapter.update_card(conv.target(), row.card_ref or "", card)
        except Exception as e:
            log.warning("could not update approval card %s: %s", card_id, e)

    async def _resume_if_decided(self, card_id: str, run_id: str, conversation_id: str) -> None:
        async with self.store.sessions() as s, s.begin():
            pending = (await s.scalars(select(ApprovalRow.id).where(ApprovalRow.card_id == card_id,
                                                                    ApprovalRow.state == "pending"))).first()
            if pending is not None:
                return
            await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_id,
                                                          ApprovalCardRow.state == "pending").values(state="decided"))
            # Back to the conversation's queue; exactly one decider's update moves it.
            moved = await s.execute(update(Run).where(Run.id == run_id, Run.status == repo.PARKED)
                                    .values(status=repo.QUEUED))
        if moved.rowcount:
            self.gw.scheduler.wake(conversation_id)

    async def results_for(self, run_id: str) -> DeferredToolResults:
        """The decisions of a parked run's latest card, as pydantic-ai wants them on resume."""
        async with self.store.sessions() as s:
            card = (await s.scalars(select(ApprovalCardRow).where(ApprovalCardRow.run_id == run_id)
                                    .order_by(ApprovalCardRow.created_at.desc()))).first()
            rows = list(await s.scalars(select(ApprovalRow).where(ApprovalRow.card_id == card.id))) if card else []
        results = DeferredToolResults()
        for row in rows:
            if row.state == ItemState.APPROVED.value:
                results.approvals[row.tool_call_id] = True
            elif row.state == ItemState.DENIED.value:
                results.approvals[row.tool_call_id] = ToolDenied(
                    f"{row.decided_by} denied this call. Do not retry it; tell them what you would have done instead."
                )
            else:
                results.approvals[row.tool_call_id] = ToolDenied("Nobody approved this call in time.")
        return results

    # --- expiry -------------------------------------------------------------------------

    async def expire_due(self) -> int:
        now = self.store.clock.now()
        async with self.store.sessions() as s:
            due = list(await s.scalars(select(ApprovalCardRow).where(ApprovalCardRow.state == "pending",
                                                                     ApprovalCardRow.expires_at <= now)))
        expired = 0
        for card_row in due:
            async with self.store.sessions() as s, s.begin():
                claimed = await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_row.id,
                                                                        ApprovalCardRow.state == "pending")
                                          .values(state="expired"))
                if not claimed.rowcount:
                    continue  # another replica got it
                result = await s.execute(update(ApprovalRow).where(ApprovalRow.card_id == card_row.id,
                                                                   ApprovalRow.state == "pending")
                                         .values(state=ItemState.EXPIRED.value, decided_at=now))
                self.gw.metrics.approvals_pending.dec(result.rowcount or 0)
                await s.execute(update(Run).where(Run.id == card_row.run_id, Run.status == repo.PARKED)
                                .values(status=repo.EXPIRED, reason="approval timed out", finished_at=now, state=None))
            expired += 1
            await self._refresh_card(card_row.id)
            await self.notice(card_row.conversation_id, "The approval request expired without a decision, so I stopped.")
            self.gw.events.run_ended(card_row.conversation_id, card_row.run_id, repo.EXPIRED)
            self.gw.scheduler.wake(card_row.conversation_id)
        return expired

    # --- reading ------------------------------------------------------------------------

    async def decisions(self, conversation_id: str | None = None) -> list[dict[str, Any]]:
        return await decisions(self.store, conversation_id)

    async def extras(self, conversation_id: str) -> dict[str, Any]:
        """What the conversation API adds: its cards, decisions and modes."""
        from adapters.web.adapter import card_json  # the web rendering of a card is the API's shape

        async with self.store.sessions() as s:
            rows = list(await s.execute(select(ApprovalCardRow.id, ApprovalCardRow.created_at)
                                        .where(ApprovalCardRow.conversation_id == conversation_id)
                                        .order_by(ApprovalCardRow.created_at)))
        modes = await self.modes(conversation_id)
        return {
            # Timed, so a page can show each card where it happened among the messages.
            "cards": [{**card_json(await self.card(i)), "time": created.isoformat()} for i, created in rows],
            "decisions": await self.decisions(conversation_id),
            "modes": {"approve_all": modes.approve_all, "ask_every_tool": modes.ask_every_tool},
        }


async def decisions(store: repo.Store, conversation_id: str | None = None) -> list[dict[str, Any]]:
    """Every recorded decision: who, when, which call, from which surface."""
    async with store.sessions() as s:
        q = select(ApprovalRow).order_by(ApprovalRow.created_at, ApprovalRow.position)
        if conversation_id:
            q = q.where(ApprovalRow.conversation_id == conversation_id)
        rows = list(await s.scalars(q))
    return [
        {"approval_id": r.id, "card_id": r.card_id, "run_id": r.run_id, "conversation_id": r.conversation_id,
         "tool": r.tool_name, "tool_id": r.tool_id, "capability": r.capability, "state": r.state,
         "decided_by": r.decided_by, "decided_at": r.decided_at.isoformat() if r.decided_at else None,
         "surface": r.surface}
        for r in rows
    ]


def add_cli(sub: Any, load: Any) -> None:
    """`agent-gateway approvals list`: every decision, who made it, when and from where."""
    p = sub.add_parser("approvals", help="list approval decisions")
    p.add_argument("action", choices=["list"])
    p.add_argument("--config", help="config directory")
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    def run(args: Any) -> int:
        config = load(args)
        if config is None:
            return 1
        from .store.engine import open_store

        async def main() -> list[dict[str, Any]]:
            async with open_store(config.gateway.database.url) as store:
                return await decisions(store, args.conversation)

        rows = asyncio.run(main())
        for r in rows:
            if args.json:
                print(json.dumps(r))
            else:
                print(f"{r['decided_at'] or '-':32} {r['state']:9} {r['tool']:24} by {r['decided_by'] or '-':16} "
                      f"via {r['surface'] or '-':6} run {r['run_id']} conversation {r['conversation_id']}")
        if not rows:
            print("no approvals recorded")
        return 0

    p.set_defaults(fn=run)


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

