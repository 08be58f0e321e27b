"""The admin's MCP commands: `agent-gateway mcp list` and `agent-gateway check --online`.

Both connect to each enabled server once (in parallel, no retries), with the same connection
code the daemon uses, and disconnect when done.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gateway.mcp.offered import visible_tools
from gateway.mcp.pool import McpConnection

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig, Problem
    from gateway.ops.subcommand import Load


async def probe(config: LoadedConfig, agent_ids: Iterable[str]) -> list[McpConnection]:
    """Connect each enabled server of these agents once (in parallel) and leave them connected."""
    settings = config.gateway.mcp
    connections = [McpConnection(a, s, retry=False, settings=settings) for a in agent_ids
                   for s in config.agents[a].mcp_servers if s.enabled]
    for c in connections:
        c.start()
    await asyncio.gather(*(c.wait_usable(settings.connect_timeout_seconds + 10) for c in connections))
    return connections


async def online_problems(config: LoadedConfig) -> list[Problem]:
    """`check --online`: warnings for servers that cannot be reached and `tools:` entries naming nothing."""
    connections = await probe(config, sorted(config.agents))
    problems = []
    try:
        for c in connections:
            agent = config.agents[c.agent_id]
            index = agent.mcp_servers.index(c.spec)
            source = config.sources[f"agent:{c.agent_id}"]
            if c.state != "up":
                problems.append(source.problem(("mcp_servers", index, "name"),
                                               f"MCP server {c.spec.name} ({c.spec.describe()}) cannot be reached: "
                                               f"{c.detail}", warning=True))
                continue
            offered = ", ".join(sorted(t.name for t in c.tools)) or "none"
            for name in c.unknown_entries():
                problems.append(source.problem(("mcp_servers", index, "tools", name),
                                               f"{c.spec.name} offers no tool {name!r} (it offers: {offered})",
                                               warning=True))
    finally:
        await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)
    return problems


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway mcp list [--agent ID]`: connect and print each server's tools and permissions."""
    from gateway.ops.subcommand import subcommand

    def run(args: Any, config: LoadedConfig) -> int:
        if args.agent and args.agent not in config.agents:
            print(f"no agent {args.agent!r} (known: {', '.join(sorted(config.agents)) or 'none'})")
            return 1
        agent_ids = [args.agent] if args.agent else sorted(config.agents)
        return asyncio.run(_list(config, agent_ids, as_json=args.json))

    subcommand(p, load, run, actions={"list": ""})
    p.add_argument("--agent", help="only this agent")
    p.add_argument("--json", action="store_true", help="one JSON object per server")


async def _list(config: LoadedConfig, agent_ids: list[str], *, as_json: bool) -> int:
    connections = await probe(config, agent_ids)
    by_key = {(c.agent_id, c.spec.name): c for c in connections}
    failed = False
    try:
        for agent_id in agent_ids:
            servers = config.agents[agent_id].mcp_servers
            if not as_json:
                print(f"agent {agent_id}: " + (f"{len(servers)} MCP servers" if servers else "no MCP servers"))
            for spec in servers:
                c = by_key.get((agent_id, spec.name))
                row: dict[str, Any] = {"agent": agent_id, "server": spec.name, "where": spec.describe(),
                                       "state": "disabled" if c is None else c.state,
                                       "detail": "" if c is None else c.detail, "tools": []}
                if c is not None and c.state == "up":
                    row["tools"] = [{"tool": t.server_name, "name": t.visible, "permission": t.permission,
                                     "note": t.note} for t in visible_tools(spec, c.tools, handshake=c.handshake())]
                    row["unknown_entries"] = c.unknown_entries()
                elif c is not None:
                    failed = True
                if as_json:
                    print(json.dumps(row))
                    continue
                state = row["state"] if row["state"] != "up" else f"up, {len(row['tools'])} tools"
                print(f"  {spec.name} ({spec.describe()}): {state}" + (f": {row['detail']}" if row["state"] == "down" else ""))
                width = max((len(t["name"]) for t in row["tools"]), default=0)
                for t in row["tools"]:
                    print(f"    {t['name']:{width}}  {t['permission']}" + (f"  ({t['note']})" if t["note"] else ""))
                for name in row.get("unknown_entries", []):
                    print(f"    warning: tools: {name!r} names no tool this server offers")
    finally:
        await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)
    return 1 if failed else 0
