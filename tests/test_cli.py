"""`agent-gateway`'s command table (gateway/ops/cli.py:COMMANDS and group agent_gateway.commands): a call
imports its own command's module and no other's, nor what its work does not use (the store for `check`,
Alembic for `db current` at head), and every line of the table builds. `run_cli` runs a command in the
test's own process, for the tests of what it says rather than of what its process imports."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gateway import extensions
from gateway.ops import cli

from .conftest import ROOT, write_config

# Each command's module, as the table names it: what a call of another command must not import.
COMMAND_MODULES = {name: c.where.partition(":")[0] for name, c in cli.COMMANDS.items() if isinstance(c.where, str)}
# What the commands' modules bring along: a second of imports between them (the store's SQLAlchemy, the MCP
# SDK, pydantic-ai, the config's pydantic models and YAML reader, aiohttp).
HEAVY = ("sqlalchemy", "alembic", "mcp", "pydantic_ai", "pydantic", "ruamel", "aiohttp", "bindings")


def imported_by(*argv: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`agent-gateway ARGV` in a process of its own, and every module it had imported by the end."""
    script = ("import json, sys\n"
              "from gateway.ops import cli\n"
              "try:\n"
              "    code = cli.main(sys.argv[1:])\n"
              "except SystemExit as e:\n"
              "    code = e.code\n"
              "print('\\nIMPORTED ' + json.dumps(sorted(sys.modules)))\n"
              "sys.exit(code)\n")
    env = {**os.environ, "COLUMNS": "1000"}  # argparse's help on one line per command
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    head, _, modules = done.stdout.rpartition("\nIMPORTED ")
    done.stdout = head
    return done, set(json.loads(modules))


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """`agent-gateway ARGV` through `cli.main` in this process: its exit code, stdout and stderr.

    For the tests of what a command says and returns, where a process of its own would only pay the
    libraries' imports again (1-2 s of CPU each); a subprocess stays where the process is the point
    (what it imports, the daemon, the entry point itself). stderr holds, as the process's would, the
    warnings logged on this thread (a process with no handler prints them, `logging.lastResort`).
    Run it off the test's event loop (`asyncio.to_thread`) when the command talks to fakes on it;
    the command runs its own loop (`asyncio.run`) and must not find one running."""
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    logging.getLogger().addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(argv))
            except SystemExit as e:  # argparse: --help, a usage error
                code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    finally:
        logging.getLogger().removeHandler(handler)
    return subprocess.CompletedProcess(["agent-gateway", *argv], code, out.getvalue(), err.getvalue())


def heavy(modules: set[str]) -> set[str]:
    return {m.partition(".")[0] for m in modules} & set(HEAVY)


def test_version_imports_no_command_and_nothing_heavy() -> None:
    done, modules = imported_by("--version")
    assert done.returncode == 0 and done.stdout.startswith("agent-gateway "), done.stderr
    assert heavy(modules) == set()
    assert modules.isdisjoint(COMMAND_MODULES.values())


def test_the_top_level_help_lists_every_command_from_the_table_without_importing_one() -> None:
    done, modules = imported_by("--help")
    assert done.returncode == 0, done.stderr
    listed = " ".join(done.stdout.split())
    for name, command in cli.COMMANDS.items():
        assert f"{name} {' '.join(command.help.split())}" in listed
    # An installed distribution's command is listed too, its line the first of its add_cli's docstring;
    # listing it is the one call that imports that module (and only it).
    assert "capabilities print the capability catalog (what an agent file can name)" in listed
    assert heavy(modules) == set()
    assert modules.isdisjoint(COMMAND_MODULES.values())


def test_a_commands_help_imports_that_command_only() -> None:
    done, modules = imported_by("db", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: agent-gateway db" in done.stdout and "backup: copy the database to FILE" in done.stdout
    assert COMMAND_MODULES["db"] in modules
    assert modules.isdisjoint(m for name, m in COMMAND_MODULES.items() if name != "db")
    assert "capabilities.extension" not in modules  # an entry point's command is not imported for another
    assert heavy(modules) == set()


def test_a_config_command_imports_what_it_reads_and_no_other_command(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done, modules = imported_by("check", "--config", str(config))
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    assert "bindings.loader" in modules  # what `check` needs, it has
    # No command's module, nor MCP with no server configured, nor the store: the config's check of each
    # binding's platform names the adapter contract only as a type (SQLAlchemy came with it, ~0.3 s).
    assert modules.isdisjoint(COMMAND_MODULES.values())
    assert not any(m == "mcp" or m.startswith(("mcp.", "gateway.mcp")) for m in modules)
    assert heavy(modules) == {"pydantic", "ruamel", "bindings"}


def test_checking_the_shipped_config_reads_its_capabilities_without_pydantic_ai(tmp_path: Path) -> None:
    """The declarations and config models of what config/ names (clock, memory_files) are read, their
    runtime is not: pydantic-ai is a third of `check`'s CPU (bench/README.md, "Start-up and memory")."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    done, modules = imported_by("check", "--config", str(tmp_path / "config"))
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    assert {"capabilities.clock", "capabilities.memory_files"} <= modules  # their declarations were checked
    assert {m for m in modules if m.partition(".")[0] == "pydantic_ai"} == set()
    assert "capabilities.memory_files_tools" not in modules


def test_the_schema_of_a_database_at_head_is_read_without_alembic(tmp_path: Path) -> None:
    """`db current` (and `doctor`'s database line) on a database at this version's head reads its version row
    as the daemon's start does: Alembic, Mako and the dialects its DDL modules load are ~140 modules it does
    not need; a database behind or ahead is still Alembic's to describe (tests/test_backup.py)."""
    config = write_config(tmp_path)  # its database migrated to this version's head
    done, modules = imported_by("db", "current", "--config", str(config))
    assert done.returncode == 0 and "(up to date)" in done.stdout, done.stderr
    assert heavy(modules) == {"sqlalchemy", "pydantic", "ruamel", "bindings"}  # no Alembic, pydantic-ai, aiohttp, MCP


def test_the_stores_failures_are_still_said_in_words(tmp_path: Path) -> None:
    """The store's exceptions are caught without being imported by the CLI (a command that never opened
    the store cannot raise them): each still ends in its sentence and exit code, not a traceback."""
    import sqlite3

    empty = write_config(tmp_path / "empty", gateway={"database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'e.db'}",
                                                                   "migrate": "check"}})
    done = run_cli("approvals", "list", "--config", str(empty))  # a SchemaError: the schema is behind
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "db upgrade" in done.stderr

    locked = write_config(tmp_path / "locked", gateway={"database": {"busy_timeout_seconds": 0.2}})
    holder = sqlite3.connect(locked / "gateway.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock (a sqlite3 shell, say)
        done = run_cli("pairing", "revoke", "web", "U1", "--config", str(locked))  # a StoreUnavailable
    finally:
        holder.close()
    assert done.returncode == 75 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("the database is busy: ")


@pytest.mark.parametrize("name", [*cli.COMMANDS, *extensions.names(extensions.COMMANDS)])
def test_every_command_in_the_table_builds(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each line's "module:function" resolves and adds its arguments (a typo in the table fails here,
    not at an operator's prompt)."""
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args([name, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: agent-gateway {name}")
