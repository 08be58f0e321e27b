"""The approvals audit: every decision and every switch of a conversation's approval modes, who
made it, when and through which surface (`agent-gateway approvals list`, the web page's cards)."""

from __future__ import annotations

from typing import Any

from gateway.store import repo
from gateway.store.approvals import ApprovalStore


async def decisions(store: repo.Store, conversation_id: str | None = None) -> list[dict[str, Any]]:
    """Every recorded decision and mode switch: who, when, which call or mode, from which surface."""
    db = ApprovalStore(store.sessions, store.clock)
    rows: list[dict[str, Any]] = [
        {"approval_id": r.id, "card_id": r.card_id, "run_id": r.run_id, "conversation_id": r.conversation_id,
         "tool": r.tool_name, "tool_id": r.tool_id, "capability": r.capability, "state": r.state,
         "decided_by": r.decided_by, "decided_at": r.decided_at.isoformat() if r.decided_at else None,
         "surface": r.surface}
        for r in await db.decisions(conversation_id)
    ]
    return rows


async def mode_changes(store: repo.Store, conversation_id: str | None = None) -> list[dict[str, Any]]:
    """Every switch of a conversation's approval modes (the audit): who, from where, to what, when."""
    db = ApprovalStore(store.sessions, store.clock)
    return [
        {"conversation_id": m.conversation_id, "changed_by": m.who, "account_id": m.account_id,
         "surface": m.surface, "approve_all": m.approve_all, "ask_every_tool": m.ask_every_tool,
         "at": m.at.isoformat()}
        for m in await db.mode_changes(conversation_id)
    ]
