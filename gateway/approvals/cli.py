"""`agent-gateway approvals list`: the audit, for an admin's terminal or a script (--json)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from gateway.approvals.audit import decisions, mode_changes
from gateway.store import repo

if TYPE_CHECKING:
    from gateway.ops.subcommand import Load


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway approvals list`: every decision and mode switch, who made it, when and from where."""
    from gateway.ops.subcommand import on_store, subcommand

    def run(args: Any, config: Any) -> int:
        async def main(store: repo.Store) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            return await decisions(store, args.conversation), await mode_changes(store, args.conversation)

        rows, switches = on_store(config, main)
        for r in rows:
            if args.json:
                print(json.dumps(r))
            else:
                print(f"{r['decided_at'] or '-':32} {r['state']:9} {r['tool']:24} by {r['decided_by'] or '-':16} "
                      f"via {r['surface'] or '-':6} run {r['run_id']} conversation {r['conversation_id']}")
        for m in switches:
            if args.json:
                print(json.dumps({"kind": "mode", **m}))
            else:
                mode = "approve all" if m["approve_all"] else "ask every tool" if m["ask_every_tool"] else "normal policy"
                print(f"{m['at']:32} mode      {mode:24} by {m['changed_by']:16} via {m['surface']:6} "
                      f"conversation {m['conversation_id']}")
        if not rows and not switches:
            print("no approvals recorded")
        return 0

    subcommand(p, load, run, actions={"list": ""})
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
