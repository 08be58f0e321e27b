"""`agent-gateway run | check | schema`: the admin's and the operator's entry point."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.ops.subcommand import CONFIG_HELP, Command, Load, add_commands

if TYPE_CHECKING:
    import asyncio

    from bindings.loader import LoadedConfig
    from bindings.models import RuntimeConfig

# Nothing heavy at module level: `main` turns the collector off before the imports start (see there),
# and a command imports what it needs when chosen (`COMMANDS`).

log = logging.getLogger("gateway")


def _config_dir(args: argparse.Namespace) -> Path:
    from bindings.loader import config_directory

    return config_directory(args.config)


def _load(args: argparse.Namespace) -> LoadedConfig | None:
    from bindings.loader import ConfigError, load_config
    from gateway import extensions

    extensions.register_checks()
    try:
        config = load_config(_config_dir(args))
    except ConfigError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        errors = sum(1 for p in e.problems if not p.warning)
        print(f"{errors} problem{'s' if errors != 1 else ''} found", file=sys.stderr)
        return None
    for warning in config.warnings:
        print(warning, file=sys.stderr)
    return config


def cmd_check(args: argparse.Namespace) -> int:
    config = _load(args)
    if config is None:
        return 1
    if getattr(args, "online", False):
        from gateway import extensions

        for problem in extensions.online_problems(config):
            print(problem, file=sys.stderr)
    print(
        f"{_config_dir(args)}: ok ({len(config.agents)} agent{'s' if len(config.agents) != 1 else ''}, "
        f"{len(config.bindings)} binding{'s' if len(config.bindings) != 1 else ''})"
    )
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from bindings.models import AgentSpec, BindingSpec, GatewayConfig

    schema = {
        "gateway": GatewayConfig.model_json_schema(),
        "agent": AgentSpec.model_json_schema(),
        "binding": BindingSpec.model_json_schema(),
    }
    json.dump(schema if args.kind == "all" else schema[args.kind], sys.stdout, indent=2)
    print()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    config = _load(args)
    if config is None:
        return 1
    from gateway.ops.logs import configure_logging

    configure_logging(config.gateway.logging)
    from gateway.daemon import Gateway, StartupError, freeze_startup_objects

    from gateway.ops import open_files

    open_files.raise_limit()

    runtime = config.gateway.runtime
    try:
        loop_factory = event_loop_factory(runtime)
    except RuntimeError as e:
        log.error("cannot start: %s", e)
        return 1
    log.info("event loop: %s%s", "asyncio" if loop_factory is None else "uvloop",
             ", eager tasks" if runtime.eager_tasks else "")

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if runtime.eager_tasks:
            loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]  # 3.12+, checked above
        open_files.quiet_accept_errors(loop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        gateway = Gateway(config, listen=args.listen)
        try:
            await gateway.start()
        except StartupError as e:
            log.error("cannot start: %s", e)
            return 1
        if args.port_file:
            _write_port(Path(args.port_file), gateway.port)
        freeze_startup_objects()  # and the collector runs again (main held it off through start-up)
        reloads: list[asyncio.Task[object]] = []
        loop.add_signal_handler(signal.SIGHUP, lambda: reloads.append(loop.create_task(gateway.reload_from_disk())))
        print(f"agent-gateway: web chat on {gateway.url}/", flush=True)
        ready = loop.create_task(gateway.announce_ready())
        try:
            await stop.wait()
        finally:
            log.info("stopping")
            ready.cancel()
            for task in reloads:
                task.cancel()
            await gateway.stop(grace=config.gateway.limits.shutdown_grace_seconds)
        return 0

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


def event_loop_factory(runtime: RuntimeConfig) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop `runtime` asks for (None: asyncio's own). RuntimeError, in words, when this
    interpreter or installation cannot give it: a daemon never runs on another loop than configured."""
    import asyncio  # here, not at the top: `--version` and `--help` import no event loop

    if runtime.eager_tasks and not hasattr(asyncio, "eager_task_factory"):
        raise RuntimeError(f"runtime.eager_tasks needs Python 3.12 or later (this is {sys.version.split()[0]})")
    if runtime.event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        raise RuntimeError("runtime.event_loop is uvloop, which is not installed: pip install 'agent-gateway[uvloop]'") from None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def _write_port(path: Path, port: int) -> None:
    """The bound port, for whoever started the daemon on port 0 (whole or not at all: renamed into place)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(f"{port}\n")
    partial.replace(path)


def cmd_reload(args: argparse.Namespace) -> int:
    """Ask the running daemon to re-read its config (the same as SIGHUP), and say what happened."""
    config = _load(args)
    if config is None:
        return 1
    import urllib.error
    import urllib.request

    http_cfg = config.gateway.http
    host = "127.0.0.1" if http_cfg.host in ("0.0.0.0", "::", "") else http_cfg.host
    # JSON, like every state-changing API request (`gateway.http.guard`); the body says nothing more.
    request = urllib.request.Request(f"http://{host}:{http_cfg.port}/api/v1/admin/reload", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    if http_cfg.api_token is not None:
        request.add_header("Authorization", f"Bearer {http_cfg.api_token.resolve().reveal()}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(f"reloaded {_config_dir(args)}")
            return 0 if response.status == 200 else 1
    except urllib.error.HTTPError as e:
        for problem in json.loads(e.read() or b"{}").get("problems", []):
            print(problem, file=sys.stderr)
        print(f"reload refused (HTTP {e.code}); the daemon keeps its last good config", file=sys.stderr)
    except OSError as e:
        print(f"cannot reach the daemon at {host}:{http_cfg.port}: {e}", file=sys.stderr)
    return 1


def _add_run(p: argparse.ArgumentParser, load: Load) -> None:
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--listen", metavar="HOST:PORT",
                   help="listen here instead of http.listen (port 0: any free port; see --port-file)")
    p.add_argument("--port-file", metavar="PATH",
                   help="once listening, write the bound port to PATH (how a supervisor or a test that "
                   "started the daemon on port 0 finds it)")
    p.set_defaults(fn=cmd_run)


def _add_check(p: argparse.ArgumentParser, load: Load) -> None:
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--online", action="store_true",
                   help="also connect to each MCP server: warn when one cannot be reached or a `tools:` "
                   "entry names no tool it offers")
    p.set_defaults(fn=cmd_check)


def _add_reload(p: argparse.ArgumentParser, load: Load) -> None:
    p.add_argument("--config", help=CONFIG_HELP)
    p.set_defaults(fn=cmd_reload)


def _add_schema(p: argparse.ArgumentParser, load: Load) -> None:
    p.add_argument("kind", nargs="?", default="all", choices=["all", "gateway", "agent", "binding"])
    p.set_defaults(fn=cmd_schema)


# Every command of the core, in `--help`'s order: where its `add_cli(parser, load)` lives (imported only
# when the command is chosen, by `Commands`) and its line in `--help`. The module owns the arguments.
# Installed distributions add theirs as entry points of group `agent_gateway.commands` (pyproject.toml).
COMMANDS: dict[str, Command] = {
    "run": Command(_add_run, "run the daemon"),
    "check": Command(_add_check, "validate the config directory and print every problem"),
    "reload": Command(_add_reload, "ask the running daemon to re-read its config (like SIGHUP)"),
    "schema": Command(_add_schema, "print the JSON Schema of config files"),
    "approvals": Command("gateway.approvals.cli:add_cli", "list approval decisions and approval-mode switches"),
    "pairing": Command("gateway.inbound.pairing:add_cli",
                       "list and approve pairing requests from unknown direct-message senders"),
    "mcp": Command("gateway.mcp.cli:add_cli", "MCP servers: connect and list their tools with the permission of each"),
    "people": Command("gateway.ops.people:add_cli", "show, link and unlink people's accounts across platforms (audited)"),
    "schedules": Command("gateway.ops.schedules:add_cli", "list, pause, resume or cancel scheduled tasks"),
    "runs": Command("gateway.store.run_outcomes:add_cli",
                    "list ended runs and their outcomes (e.g. --status guardrail_blocked)"),
    "db": Command("gateway.ops.db_cli:add_cli",
                  "the database: table sizes (stats), retention now (prune), backup and restore, the schema's "
                  "migration (current, upgrade)"),
    "doctor": Command("gateway.ops.doctor:add_cli",
                      "check that this deployment can run: config, database, credentials, models "
                      "(--online: ask the platforms, the model providers and the MCP servers)"),
    "memory": Command("gateway.runs.memory:add_cli", "read or erase what agents keep about a person (audited)"),
}


def build_parser() -> argparse.ArgumentParser:
    from gateway import extensions, version

    parser = argparse.ArgumentParser(prog="agent-gateway", description=__doc__)
    parser.add_argument("--version", action="version",
                        version=f"agent-gateway {version.version()} (Python {version.python()})")
    sub = add_commands(parser, dest="command")
    for name, command in COMMANDS.items():
        sub.declare(name, command.where, command.help, _load)
    for ep in extensions.declared(extensions.COMMANDS):  # named without importing them
        sub.declare(ep.name, ep.value, None, _load)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Importing the daemon's libraries makes about a million objects that live as long as the process;
    # the cyclic collector's passes over them while they are made were a fifth of `run`'s start-up CPU
    # (bench/README.md, "Start-up and memory"). So it is off until `run` has started and frozen what it
    # built (`freeze_startup_objects` collects once, then turns it back on); other commands get it back
    # once their parser is built, and whatever happens it is on again when main returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if collecting:
            gc.enable()


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.fn is not cmd_run:
        gc.enable()
    try:
        return int(args.fn(args))
    except Exception as e:
        code = _store_failure(e)
        if code is None:
            raise
        return code


def _store_failure(e: Exception) -> int | None:
    """The exit code for the store's own failures, said in words; None for any other exception.

    Looked up in the modules already imported rather than imported here: a command that never
    opened the store cannot have raised them, and importing the store's engine (SQLAlchemy) only to
    catch them cost every command, `--version` included, a quarter of a second of imports."""
    availability = sys.modules.get("gateway.store.availability")
    if availability is not None and isinstance(e, availability.StoreUnavailable):
        # the daemon (or a backup) holds the database's lock: say so
        print(f"the database is busy: {e}; try again in {e.retry_after_header}s", file=sys.stderr)
        return 75  # EX_TEMPFAIL
    engine = sys.modules.get("gateway.store.engine")
    if engine is not None and isinstance(e, engine.SchemaError):
        # database.migrate: check and an older schema, or a newer one
        print(e, file=sys.stderr)
        return 1
    return None


if __name__ == "__main__":
    sys.exit(main())
