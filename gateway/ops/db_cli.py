"""`agent-gateway db …`: table sizes (stats), retention now (prune), backup and restore, and the
schema's migrations (current, upgrade) for operators who migrate before they start."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.ops.subcommand import Load, on_store, subcommand

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.store.repo import Store

ACTIONS = {
    "stats": "each growing table's rows and size",
    "prune": "delete what is past retention, now",
    "backup": "copy the database to FILE, safe while the daemon runs",
    "restore": "replace the database with the backup FILE (the daemon must be stopped)",
    "current": "the schema's migration, against what this version needs",
    "upgrade": "bring the schema up to this version (for database.migrate: check)",
}


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway db stats | prune | backup FILE | restore FILE | current | upgrade`."""
    p.description = "; ".join(f"{a}: {h}" for a, h in ACTIONS.items())
    subcommand(p, load, _run, actions={action: "FILE" if action in ("backup", "restore") else "" for action in ACTIONS},
               operands_help="backup / restore: the backup file")


def _run(args: argparse.Namespace, config: LoadedConfig) -> int:
    database = config.gateway.database
    if args.action in ("backup", "restore"):
        return _copy(args.action, database, Path(args.operands[0]))
    if args.action in ("current", "upgrade"):
        return asyncio.run(_schema(args.action, database))
    from gateway.clock import Clock
    from gateway.ops.retention import retention_of
    from gateway.store.retention import prune, table_sizes

    async def main(store: Store) -> list[str]:
        if args.action == "prune":
            deleted = await prune(store, retention_of(config.gateway.retention), Clock().now())
            return [f"{table:16} {n:>10} rows deleted" for table, n in deleted.items()]
        lines = [f"{'table':16} {'rows':>10} {'size':>10}"]
        for table, rows, size in await table_sizes(store):
            lines.append(f"{table:16} {rows:>10} {_size(size):>10}")
        return lines

    print("\n".join(on_store(config, main)))
    return 0


def _copy(action: str, database: Any, file: Path) -> int:
    from gateway.store import backup
    from gateway.store.daemon_lock import DatabaseInUse, sqlite_file
    from gateway.store.engine import known_revisions

    path = sqlite_file(database.url)
    if path is None and database.url.startswith("postgresql"):
        line = (backup.pg_dump_command(database.url, str(file)) if action == "backup"
                else backup.pg_restore_command(database.url, str(file)))
        what = ("a PostgreSQL database is backed up with pg_dump" if action == "backup" else
                "a PostgreSQL database is restored with pg_restore, every replica stopped first")
        print(f"agent-gateway does not {action} PostgreSQL itself: {what} (docs/operations.md). Run:", file=sys.stderr)
        print(line)
        return 2
    if path is None:
        print(f"database.url is an in-memory database: nothing outlives the daemon to {action}", file=sys.stderr)
        return 2
    try:
        if action == "backup":
            done = backup.backup(path, file, busy_timeout=database.busy_timeout_seconds)
            print(f"backed up {path} to {done.path} (schema {done.revision})")
            return 0
        done = backup.restore(file, path, known_revisions())
    except (backup.BackupError, DatabaseInUse) as e:
        print(f"db {action}: {e}", file=sys.stderr)
        return 1
    print(f"restored {file} into {path} (schema {done.revision})"
          + (f"; the database it replaced is kept as {done.kept}" if done.kept else ""))
    return 0


async def _schema(action: str, database: Any) -> int:
    from gateway.store.engine import SchemaError, create_engine, migrate, schema_state

    engine = create_engine(database.url, busy_timeout=database.busy_timeout_seconds)
    try:
        before = await schema_state(engine)
        if action == "upgrade":
            try:
                await migrate(engine, "auto")
            except SchemaError as e:
                print(f"db upgrade: {e}", file=sys.stderr)
                return 1
            after = await schema_state(engine)
            print(f"schema {after.current}" + ("" if after.current == before.current else
                                              f" (was {before.current or 'empty'})"))
            return 0
        print(f"schema {before.describe()}")
        return 0 if before.known and not before.behind else 1
    finally:
        await engine.dispose()


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return "-"
