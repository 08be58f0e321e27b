"""Ended runs by outcome, for operators: `agent-gateway runs list --status guardrail_blocked`.

A refusal by a guardrail, a budget cap or a time limit is the platform working; an operator filtering
for them should find them here (and in the `gateway_runs` metric by outcome), not read them as answers.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.store.models import Run
from gateway.store.run_costs import media_text, media_usage

if TYPE_CHECKING:
    from gateway.ops.subcommand import Load


async def ended_runs(sessions: async_sessionmaker[AsyncSession], *, status: str | None = None,
                     conversation_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The most recent runs first; each with its outcome and the reason recorded for it."""
    query = select(Run).where(Run.finished_at.is_not(None)).order_by(Run.finished_at.desc()).limit(limit)
    if status is not None:
        query = query.where(Run.status == status)
    if conversation_id is not None:
        query = query.where(Run.conversation_id == conversation_id)
    async with sessions() as s:
        return [{"run_id": r.id, "status": r.status, "reason": r.reason, "agent": r.agent_id, "binding": r.binding_id,
                 "conversation_id": r.conversation_id, "requester": r.requester_name,
                 "finished_at": r.finished_at.isoformat() if r.finished_at else None,
                 "usage": {"requests": r.requests, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                           **media_usage(r)}}
                for r in await s.scalars(query)]


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway runs list [--status S] [--conversation C] [--json]`."""
    import json

    from gateway.ops.subcommand import on_store, subcommand

    def run(args: Any, config: Any) -> int:
        rows = on_store(config, lambda store: ended_runs(store.sessions, status=args.status,
                                                          conversation_id=args.conversation, limit=args.limit))
        for r in rows:
            if args.json:
                print(json.dumps(r))
            else:
                u = r["usage"]
                media = f", {spent}" if (spent := media_text(u)) else ""
                print(f"{r['finished_at']:32} {r['status']:17} run {r['run_id']} agent {r['agent']} "
                      f"conversation {r['conversation_id']}: {r['reason'] or '-'} "
                      f"({u['input_tokens']}+{u['output_tokens']} tokens{media})")
        if not rows:
            print("no runs recorded" + (f" with status {args.status}" if args.status else ""))
        return 0

    subcommand(p, load, run, actions={"list": ""})
    p.add_argument("--status", help="only this outcome: finished, failed, stopped, expired, guardrail_blocked, "
                                    "budget_exceeded")
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--limit", type=int, default=100, help="at most this many, newest first (default 100)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
