"""One shape for the admin's sub-commands (`agent-gateway approvals list`, `pairing approve CODE`, ...).

Each is `agent-gateway NAME ACTION [OPERANDS] [--config DIR] [options]`: the action is checked by
argparse, the number of operands against the action's usage line (a wrong count prints that line and
exits 2, before any config is read), the config is loaded once (its problems printed, exit 1), and the
command gets the parsed arguments and the config. `on_store` runs async work on the config's database
from the CLI, which has no event loop of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.store.repo import Store

T = TypeVar("T")
Load = Callable[[argparse.Namespace], "LoadedConfig | None"]
Run = Callable[[argparse.Namespace, "LoadedConfig"], int]

CONFIG_HELP = "config directory (default ./config or $AGENT_GATEWAY_CONFIG)"


def subcommand(sub: argparse._SubParsersAction[Any], name: str, help: str, load: Load, run: Run, *,
               actions: Mapping[str, str], operands_help: str = "") -> argparse.ArgumentParser:
    """Add `name`, whose `actions` map each action to its operands' usage ("" for none, else one word
    per operand: "ACCOUNT PERSON|ACCOUNT"). Returns the parser, for the command's own options."""
    p = sub.add_parser(name, help=help)
    p.add_argument("action", choices=list(actions))
    if any(actions.values()):
        p.add_argument("operands", nargs="*", help=operands_help)
    p.add_argument("--config", help=CONFIG_HELP)

    def checked(args: argparse.Namespace) -> int:
        usage = actions[args.action]
        if len(getattr(args, "operands", [])) != len(usage.split()):
            print(f"usage: agent-gateway {name} {args.action}" + (f" {usage}" if usage else ""), file=sys.stderr)
            return 2
        config = load(args)
        if config is None:
            return 1
        return run(args, config)

    p.set_defaults(fn=checked)
    return p


def answer(code: int, text: str) -> int:
    """Print a command's answer (on stderr when it failed) and return its exit code."""
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


def on_store(config: LoadedConfig, work: Callable[[Store], Awaitable[T]]) -> T:
    """`work` on the config's database (migrated, then closed), in an event loop of its own."""
    from gateway.store.engine import open_store

    async def main() -> T:
        async with open_store(config.gateway.database) as store:
            return await work(store)

    return asyncio.run(main())
