"""`agent-gateway doctor [--online]`: is this deployment able to run, and if not, what to change.

One line per thing checked, `ok: …` or `problem: … fix: …`, and exit 1 if any is a problem. In
order: the dependencies (gateway.private_api), the config (every rule `check` and `run` apply),
the database (reachable, at this version's migration), each enabled binding's credentials (they
resolve; with --online the platform takes them, and Slack's token carries the manifest's scopes),
each agent's model (it can be built; with --online the provider answers a one-token request), and
with --online the MCP servers (they start and offer the tools their `tools:` entries name).

Nothing here starts the daemon or changes the database: a SQLite file that does not exist yet
is reported, not created.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.ops.subcommand import CONFIG_HELP, Load
from gateway.outbound.adapter import Trouble

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig

MODEL_TIMEOUT = 30.0  # seconds the provider has to answer its one-token request


@dataclass(frozen=True)
class Line:
    subject: str
    trouble: Trouble | None = None
    detail: str = ""

    def __str__(self) -> str:
        if self.trouble is None:
            return f"ok: {self.subject}" + (f": {self.detail}" if self.detail else "")
        return f"problem: {self.subject}: {self.trouble.problem} fix: {self.trouble.fix}"


async def examine(config: LoadedConfig, *, online: bool) -> list[Line]:
    lines = [await _database(config)]
    lines += await _bindings(config, online)
    lines += await _models(config, online)
    if online:
        lines += await _mcp(config)
    return lines


def dependencies() -> list[Line]:
    from gateway import private_api
    from gateway.version import python, version

    missing = private_api.problems()
    if not missing:
        return [Line("agent-gateway", detail=f"{version()} on Python {python()}, dependencies as expected")]
    return [Line("dependencies", Trouble(m.split(": install", 1)[0],
                                        "install the versions in requirements.lock "
                                        "(`pip install --require-hashes -r requirements.lock`)")) for m in missing]


async def _database(config: LoadedConfig) -> Line:
    from sqlalchemy.engine import make_url

    from gateway.store.daemon_lock import sqlite_file
    from gateway.store.engine import create_engine, schema_state

    database = config.gateway.database
    subject = f"database {make_url(database.url).render_as_string(hide_password=True)}"
    file = sqlite_file(database.url)
    if file is not None and not file.exists():
        return Line(subject, detail="does not exist yet; the first start creates it")
    engine = create_engine(database.url, busy_timeout=database.busy_timeout_seconds)
    try:
        state = await schema_state(engine)
    except Exception as e:
        return Line(subject, Trouble(f"cannot be reached ({type(e).__name__}: {e})",
                                     "check database.url and that the database runs and lets this user in"))
    finally:
        await engine.dispose()
    problem = state.problem(database.migrate)
    if problem is not None:
        fix = ("run `agent-gateway db upgrade`" if state.known else
               "run the newer version, or restore the backup taken before the upgrade (`agent-gateway db restore FILE`)")
        return Line(subject, Trouble(problem.split(":")[0], fix))
    if state.behind:
        return Line(subject, detail=f"schema {state.current or 'empty'}, upgraded to {state.head} at the next start "
                                    "(take a backup first: `agent-gateway db backup FILE`)")
    return Line(subject, detail=f"schema {state.head}, up to date")


async def _bindings(config: LoadedConfig, online: bool) -> list[Line]:
    from gateway.adapter_registry import AdapterContext, create_adapter

    lines = []
    for binding in sorted(config.bindings.values(), key=lambda b: b.id):
        subject = f"binding {binding.id} ({binding.platform})"
        if not binding.enabled:
            lines.append(Line(subject, detail="disabled"))
            continue
        adapter = create_adapter(binding, AdapterContext(config.gateway))
        troubles = await adapter.doctor(online)
        lines += [Line(subject, t) for t in troubles]
        if troubles:
            continue
        if binding.platform == "web":
            lines.append(Line(subject, detail="served by the daemon's HTTP server, no credentials of its own"))
        else:
            lines.append(Line(subject, detail="the platform took its credentials" if online else
                              "credentials resolve (--online asks the platform)"))
    return lines


async def _models(config: LoadedConfig, online: bool) -> list[Line]:
    from gateway.runs.llm import ModelConfigError, concrete_name, in_process, resolve_model

    lines = []
    agents_of: dict[str, list[str]] = {}
    for agent in config.agents.values():
        agents_of.setdefault(concrete_name(agent.model), []).append(agent.id)
    for name, agent_ids in sorted(agents_of.items()):
        subject = f"model {name} (agents {', '.join(sorted(agent_ids))})"
        if in_process(name) is not None:
            lines.append(Line(subject, detail="runs in this process"))
            continue
        try:
            model = resolve_model(name, config.gateway.providers)
        except ModelConfigError as e:
            lines.append(Line(subject, Trouble(str(e), "set the provider's api_key (or the key pydantic-ai reads from "
                                                       "the environment), or name another model in the agent's `model:`")))
            continue
        if not online:
            lines.append(Line(subject, detail="can be built (--online asks the provider)"))
            continue
        lines.append(await _ask(subject, model))
    return lines


async def _ask(subject: str, model: Any) -> Line:
    """One request of one token: the provider answers, the key and the model name are taken."""
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest

    try:
        # Entered, so that its provider's HTTP client is closed once asked (not left to the process's exit).
        async with model, asyncio.timeout(MODEL_TIMEOUT):
            await model_request(model, [ModelRequest.user_text_prompt("Say ok.")], model_settings={"max_tokens": 1})
    except Exception as e:
        return Line(subject, Trouble(f"the provider did not answer ({type(e).__name__}: {str(e)[:300]})",
                                     "check the provider's base_url, its api_key and the model's name"))
    return Line(subject, detail="the provider answered")


async def _mcp(config: LoadedConfig) -> list[Line]:
    from gateway.mcp.cli import online_problems

    servers = sum(1 for a in config.agents.values() for s in a.mcp_servers if s.enabled)
    if not servers:
        return []
    problems = await online_problems(config)
    if not problems:
        return [Line("MCP servers", detail=f"{servers} started, each offers the tools its `tools:` entries name")]
    return [Line(f"MCP {p.path}:{p.line}", Trouble(p.message, "start the server or correct its url / command; a "
                                                              "`tools:` entry must name a tool the server offers"))
            for p in problems]


def add_cli(p: argparse.ArgumentParser, load: Load) -> None:
    """`agent-gateway doctor [--online]`."""
    p.add_argument("--config", help=CONFIG_HELP)
    p.add_argument("--online", action="store_true", help="also connect: platforms, model providers, MCP servers")

    def run(args: argparse.Namespace) -> int:
        lines = dependencies()
        for line in lines:
            print(line)
        config = load(args)  # prints each config problem as path:line:column: field: message
        if config is None:
            print(Line("config", Trouble("it has the problems above", "correct each at the file and line it names")))
            return 1
        print(Line(f"config {config.directory}", detail=f"{len(config.agents)} agents, {len(config.bindings)} bindings"))
        found = asyncio.run(examine(config, online=args.online))
        for line in found:
            print(line)
        troubled = [line for line in (*lines, *found) if line.trouble is not None]
        if troubled:
            print(f"{len(troubled)} problem{'s' if len(troubled) != 1 else ''} found", file=sys.stderr)
        return 1 if troubled else 0

    p.set_defaults(fn=run)
