"""One shape for the admin's sub-commands (`agent-gateway approvals list`, `pairing approve CODE`, ...),
and the table they are found in.

Each is `agent-gateway NAME ACTION [OPERANDS] [--config DIR] [options]`: the action is checked by
argparse, the number of operands against the action's usage line (a wrong count prints that line and
exits 2, before any config is read), the config is loaded once (its problems printed, exit 1), and the
command gets the parsed arguments and the config. `on_store` runs async work on the config's database
from the CLI, which has no event loop of its own.

Which commands exist is a table (`gateway/ops/cli.py:COMMANDS`, and the entry points of group
`agent_gateway.commands`): each line names the command, where its `add_cli(parser, load)` lives and its
one-line help. `Commands` adds a command's arguments only when argparse chooses it, so a call imports
its own command's module and no other's (the store, SQLAlchemy, MCP, ... are a second of imports that
`--version` or `db current` has no use for); the module owns its arguments, the table only where it is.
"""

from __future__ import annotations

import argparse
import pkgutil
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.store.repo import Store

T = TypeVar("T")
Load = Callable[[argparse.Namespace], "LoadedConfig | None"]
Run = Callable[[argparse.Namespace, "LoadedConfig"], int]
# A command's `add_cli`: adds its arguments to its parser (made from its table line) and sets `fn`.
AddCli = Callable[[argparse.ArgumentParser, Load], None]

CONFIG_HELP = "config directory (default ./config or $AGENT_GATEWAY_CONFIG)"

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # generic only in typeshed
    _SubParsers = argparse._SubParsersAction


@dataclass(frozen=True)
class Command:
    """A line of the command table: where the command's `add_cli` lives ("module:function", imported
    when the command is chosen; or the function, for the CLI module's own), and its line in `--help`."""

    where: str | AddCli
    help: str


class Commands(_SubParsers):
    """argparse's sub-commands, each declared from its table line and built (its `add_cli` imported and
    called) only when argparse chooses it, as pip's and Mercurial's command tables are: `agent-gateway
    db current` imports the db command's module and no other command's, `agent-gateway --help` lists
    the core's table without importing any of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unbuilt: dict[str, tuple[str | AddCli, Load]] = {}

    def declare(self, name: str, where: str | AddCli, help: str | None, load: Load) -> None:
        """Name a command; help None: an entry point's, whose help is its `add_cli`'s docstring's first
        line, read (the module imported) only when the top-level help lists it."""
        self.add_parser(name, help=help)
        self._unbuilt[name] = (where, load)

    def built(self, name: str) -> argparse.ArgumentParser:
        """`name`'s parser with its arguments: its `add_cli` imported and called the first time."""
        parser = self._name_parser_map[name]
        if (unbuilt := self._unbuilt.pop(name, None)) is not None:
            where, load = unbuilt
            _resolve(where)(parser, load)
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        # argparse has checked the name against the declared ones; now it parses the rest with its parser.
        self.built(values[0])
        super().__call__(parser, namespace, values, option_string)

    def _get_subactions(self) -> list[argparse.Action]:
        # Asked only by the help formatter: the moment an entry point's help line is needed.
        for line in self._choices_actions:
            if line.help is None and line.dest in self._unbuilt:
                doc = _resolve(self._unbuilt[line.dest][0]).__doc__ or ""
                line.help = doc.strip().split("\n", 1)[0]
        return super()._get_subactions()


def _resolve(where: str | AddCli) -> AddCli:
    if isinstance(where, str):
        return cast(AddCli, pkgutil.resolve_name(where))
    return where


def add_commands(parser: argparse.ArgumentParser, dest: str) -> Commands:
    """`parser`'s sub-commands, to be declared line by line (`Commands.declare`)."""
    return cast(Commands, parser.add_subparsers(dest=dest, required=True, action=Commands))


def subcommand(p: argparse.ArgumentParser, load: Load, run: Run, *, actions: Mapping[str, str],
               operands_help: str = "") -> None:
    """Give the command's parser `p` (made from its table line) its `actions`, which map each action to
    its operands' usage ("" for none, else one word per operand: "ACCOUNT PERSON|ACCOUNT"); the command
    adds its own options to `p`."""
    p.add_argument("action", choices=list(actions))
    if any(actions.values()):
        p.add_argument("operands", nargs="*", help=operands_help)
    p.add_argument("--config", help=CONFIG_HELP)

    def checked(args: argparse.Namespace) -> int:
        usage = actions[args.action]
        if len(getattr(args, "operands", [])) != len(usage.split()):
            print(f"usage: {p.prog} {args.action}" + (f" {usage}" if usage else ""), file=sys.stderr)
            return 2
        config = load(args)
        if config is None:
            return 1
        return run(args, config)

    p.set_defaults(fn=checked)


def answer(code: int, text: str) -> int:
    """Print a command's answer (on stderr when it failed) and return its exit code."""
    print(text, file=sys.stdout if code == 0 else sys.stderr)
    return code


def on_store(config: LoadedConfig, work: Callable[[Store], Awaitable[T]]) -> T:
    """`work` on the config's database (migrated, then closed), in an event loop of its own."""
    import asyncio

    from gateway.store.engine import open_store

    async def main() -> T:
        async with open_store(config.gateway.database) as store:
            return await work(store)

    return asyncio.run(main())
