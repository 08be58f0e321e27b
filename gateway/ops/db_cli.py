"""`agent-gateway db stats` (how big each table is) and `db prune` (retention, now)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def add_cli(sub: Any, load: Any) -> None:
    p = sub.add_parser("db", help="the database: table sizes (stats), or prune past retention now (prune)")
    p.add_argument("action", choices=["stats", "prune"])
    p.add_argument("--config", help="config directory")

    def run(args: argparse.Namespace) -> int:
        config = load(args)
        if config is None:
            return 1
        from gateway.clock import Clock
        from gateway.ops.retention import retention_of
        from gateway.store.engine import open_store
        from gateway.store.retention import prune, table_sizes

        async def main() -> list[str]:
            async with open_store(config.gateway.database.url) as store:
                if args.action == "prune":
                    deleted = await prune(store, retention_of(config.gateway.retention), Clock().now())
                    return [f"{table:16} {n:>10} rows deleted" for table, n in deleted.items()]
                lines = [f"{'table':16} {'rows':>10} {'size':>10}"]
                for table, rows, size in await table_sizes(store):
                    lines.append(f"{table:16} {rows:>10} {_size(size):>10}")
                return lines

        print("\n".join(asyncio.run(main())))
        return 0

    p.set_defaults(fn=run)


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return "-"
