"""`agent-gateway schedules list [--json] | pause ID | resume ID | cancel ID`: the operator's view of
scheduled tasks (people's, made with the schedules capability, and the binding files' own).

Pausing keeps a task and stops its occurrences (a resumed recurring task is due next after now;
what it missed while paused is not run). An admin schedule cancelled here comes back at the next
reload while its binding file still names it: remove it there instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING

from gateway.ops.subcommand import Load, subcommand
from gateway.store.schedules import ACTIVE, CANCELLED, LIVE, PAUSED, ScheduleStore

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig

ACTIONS = {"pause": (PAUSED, (ACTIVE,)), "resume": (ACTIVE, (PAUSED,)), "cancel": (CANCELLED, LIVE)}
DONE = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}


async def admin(url: str, action: str, task_id: str | None, *, as_json: bool, actor: str) -> tuple[int, str]:
    """(exit code, text) for one `schedules` action."""
    from gateway.runs.scheduled import task_json, task_line, where_text
    from gateway.store.engine import open_store

    async with open_store(url) as store:
        db = ScheduleStore(store)
        if action == "list":
            tasks = await db.listed()
            where = [where_text(await store.conversation(t.conversation_id)) for t in tasks]
            if as_json:
                return 0, "\n".join(json.dumps(task_json(t, w)) for t, w in zip(tasks, where))
            if not tasks:
                return 0, "no scheduled tasks"
            return 0, "\n".join(f"{task_line(t)} — {t.origin}, posts {w}" for t, w in zip(tasks, where))
        found = await db.find(task_id or "")
        if len(found) != 1:
            return 1, f"no single scheduled task {task_id!r}: `agent-gateway schedules list` shows the ids"
        status, only_from = ACTIONS[action]
        reason = "" if action == "resume" else f"{DONE[action]} by admin:{actor}"
        changed = await db.set_status(found[0].id, status, reason=reason, only_from=only_from)
        if changed is None:
            return 1, f"task {found[0].id[:8]} is {found[0].status}: it cannot be {DONE[action]}"
        return 0, f"{DONE[action]}: {task_line(changed)}"


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway schedules list [--json] | pause ID | resume ID | cancel ID`."""
    def run(args: argparse.Namespace, config: LoadedConfig) -> int:
        task_id = args.operands[0] if args.operands else None
        code, text = asyncio.run(admin(config.gateway.database.url, args.action, task_id, as_json=args.json,
                                       actor=args.actor))
        if text:
            print(text, file=sys.stdout if code == 0 else sys.stderr)
        return code

    subcommand(p, load, run, actions={"list": "", "pause": "ID", "resume": "ID", "cancel": "ID"},
               operands_help="the task's id (its first 8 characters are enough); not for list")
    p.add_argument("--json", action="store_true", help="list: one JSON object per line")
    p.add_argument("--actor", default=os.environ.get("USER") or "unknown", help="who is acting (default $USER)")
