"""`agent-gateway people show | link | unlink`: an admin's view of who is whom, audited.

People link their own accounts with `/link` in a DM (gateway.inbound.commands); an admin can do the
same here, for instance for someone who cannot reach the bot on one platform yet. Every link
and unlink is recorded with the admin's name (`people show` lists the record).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING

from gateway.ops.subcommand import Load, answer, subcommand
from gateway.store.people import AccountRef, PeopleStore

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from bindings.models import DatabaseConfig


async def admin(database: DatabaseConfig | str, action: str, refs: list[str], *, actor: str) -> tuple[int, str]:
    """(exit code, text) for one `people` action."""
    from gateway.store.engine import open_store

    async with open_store(database) as store:
        people = PeopleStore(store)

        async def person(ref: str) -> str | None:
            account = AccountRef.parse(ref)
            if account is not None:
                return await people.person_of(account)
            from gateway.store.notes import NoteStore

            return await NoteStore(store).person(ref)  # a person id as it stands

        if action == "show":
            person_id = await person(refs[0])
            if person_id is None:
                return 1, f"no person {refs[0]!r}: give a person id or platform:workspace:account (e.g. slack:T01:U02)"
            lines = [f"person {person_id}"]
            lines += [f"  {a}  {a.display_name}" for a in await people.accounts(person_id)]
            for row in await people.audit_log(person_id):
                lines.append(f"  {row.at:%Y-%m-%d %H:%M} UTC  {row.action:6} {row.account}  by {row.actor}")
            return 0, "\n".join(lines)
        account = AccountRef.parse(refs[0])
        if account is None:
            return 2, f"{refs[0]!r} is not platform:workspace:account (e.g. telegram:777:4242)"
        if action == "unlink":
            if await people.unlink(account, actor=f"admin:{actor}") is None:
                return 1, f"{account} is not linked to any other account"
            return 0, f"unlinked {account}: it is a person of its own again"
        target = await person(refs[1])
        if target is None:
            return 1, f"no person {refs[1]!r}: give a person id or an account of theirs (platform:workspace:account)"
        linked = await people.link(account, target, actor=f"admin:{actor}")
        if linked.already:
            return 0, f"{account} already belongs to person {target}"
        return 0, f"linked {account} to person {target} ({linked.notes_moved} notes moved along)"


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway people show PERSON|ACCOUNT | link ACCOUNT PERSON|ACCOUNT | unlink ACCOUNT`."""
    def run(args: argparse.Namespace, config: LoadedConfig) -> int:
        return answer(*asyncio.run(admin(config.gateway.database, args.action, args.operands, actor=args.actor)))

    subcommand(p, load, run, actions={"show": "PERSON|ACCOUNT", "link": "ACCOUNT PERSON|ACCOUNT", "unlink": "ACCOUNT"},
               operands_help="show: PERSON|ACCOUNT; link: ACCOUNT PERSON|ACCOUNT; unlink: ACCOUNT "
                             "(an account is platform:workspace:account)")
    p.add_argument("--actor", default=os.environ.get("USER") or "unknown", help="who is acting (default $USER)")
