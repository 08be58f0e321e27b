"""Shared test helpers: a config directory on disk, a gateway started in-process, polling.

Tests talk to a real daemon (real SQLite file, real HTTP on an ephemeral loopback port);
models are pydantic-ai FunctionModels registered by name (`gateway.runs.llm.register_model`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import io

import pytest
from aiohttp import web_app
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bindings.loader import load_config  # noqa: E402
from gateway.clock import Clock, ManualClock  # noqa: E402
from gateway.daemon import Gateway  # noqa: E402
from tests.support.template_db import PG_ADMIN_DSN, copy_migrated_sqlite, create_migrated_pg  # noqa: E402
from tests.support.patience import PATIENCE  # noqa: E402

pytest_plugins = ["tests.support.longest_first",  # the lane's order: longest tests first
                  "tests.support.browser"]  # the `chromium` fixture: one browser per test process

T = TypeVar("T")

def dump_yaml(data: Any) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()


DEFAULT_AGENT = {"name": "Test agent", "model": "demo", "instructions": "You are a test agent."}


def write_config(
    directory: Path,
    *,
    agents: dict[str, dict[str, Any]] | None = None,
    bindings: dict[str, dict[str, Any]] | None = None,
    gateway: dict[str, Any] | None = None,
) -> Path:
    """Write a config directory. The database defaults to a SQLite file inside it, a copy of one
    migrated once for the test process (tests/support/template_db.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    gw = {"database": {"url": f"sqlite+aiosqlite:///{directory / 'gateway.db'}"}, "http": {"listen": "127.0.0.1:0"}}
    if "url" not in (gateway or {}).get("database", {}):
        copy_migrated_sqlite(directory / "gateway.db")
    for key, value in (gateway or {}).items():
        gw[key] = {**gw.get(key, {}), **value} if isinstance(value, dict) else value
    (directory / "gateway.yaml").write_text(dump_yaml(gw))
    (directory / "agents").mkdir(exist_ok=True)
    (directory / "bindings").mkdir(exist_ok=True)
    for agent_id, spec in (agents or {"assistant": DEFAULT_AGENT}).items():
        (directory / "agents" / f"{agent_id}.yaml").write_text(dump_yaml(spec))
    for binding_id, spec in (bindings or {"web": {"platform": "web", "agent": "assistant"}}).items():
        (directory / "bindings" / f"{binding_id}.yaml").write_text(dump_yaml(spec))
    return directory


@contextlib.asynccontextmanager
async def running_gateway(config_dir: Path, *, clock: Clock | None = None) -> AsyncIterator[Gateway]:
    """A gateway started on `config_dir` (re-read every time, so a restart sees edits).

    On a `ManualClock` that jumps by itself, it never jumps while an adapter's paced call is on its
    way: a fake platform on the same clock counts each call at the moment it was sent."""
    from gateway import extensions

    extensions.register_checks()
    gateway = Gateway(load_config(config_dir), clock=clock)
    if isinstance(clock, ManualClock):
        idle = clock.idle
        clock.idle = lambda: _paced_in_flight(gateway) == 0
    await gateway.start()
    try:
        # As a restarted daemon a moment after READY: models built, its first run rehearsed. A test of a
        # message during the warm-up starts its Gateway itself (tests/test_warm_up.py).
        await gateway.warmed()
        yield gateway
    finally:
        # As `agent-gateway run` stops: runs in flight get the config's shutdown_grace_seconds, here at
        # most Gateway.stop's own 10 s (the default 30 s is for a real deployment's runs, not a test's).
        await gateway.stop(grace=min(10.0, gateway.config.gateway.limits.shutdown_grace_seconds))
        if isinstance(clock, ManualClock):
            # The clock outlives this gateway: a test's script holds it, and the model registry the script.
            clock.idle = idle


def _paced_in_flight(gateway: Gateway) -> int:
    """The adapters' calls on their way that their pacing let go: Slack's and Telegram's `Pacer`
    (the published budgets), Mattermost's `server_limit` (the limit its server states)."""
    return sum(paced.in_flight for a in gateway.adapters.values() for name in ("pacer", "server_limit")
               if (paced := getattr(a, name, None)) is not None)


_ports = itertools.count()


def free_port() -> int:
    """A loopback port nobody listens on right now, for the few tests that must know a gateway's
    address before it starts (a `public_url` the platform calls back). Daemons in their own process
    listen on port 0 and report theirs (`--port-file`); this one is taken below the kernel's
    ephemeral range, which every port-0 listener and client connection draws from, in a block of
    its own per xdist worker, so parallel tests do not hand each other the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 20_000 + 500 * (int(worker) % 24 if worker.isdigit() else 0)
    for _ in range(500):
        port = base + next(_ports) % 500
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # in use (another run's test, or a lingering connection): the next one
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + 499}")


async def wait_for(
    predicate: Callable[[], Awaitable[T] | T], timeout: float = PATIENCE, interval: float = 0.02, what: str = ""
) -> T:
    """Poll until `predicate` returns something truthy; fail the test after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value  # type: ignore[misc]
        if value:
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(interval)


async def run_finished(gw: Gateway, run_id: str) -> bool:
    """Whether a run ended `finished` (for wait_for)."""
    run = await gw.store.run(run_id)
    return run is not None and run.status == "finished"


@contextlib.contextmanager
def leftovers_released() -> Iterator[None]:
    """aiohttp keeps the (handler, app) pairs it served in a process-wide cache of 1,024
    (`web_app._cached_build_middleware`): each stopped gateway's app, and with it the gateway, its store,
    compiled SQL and fakes, and each fake platform's server, stayed alive for the next thousand tests, and
    every full pass of the collector walked them again (11 gateways alive after 16 tests). Dropped when a
    test ends. A daemon has one app."""
    try:
        yield
    finally:
        cached = getattr(web_app, "_cached_build_middleware", None)  # aiohttp's own: gone in a later release, nothing to drop
        if cached is not None:
            cached.cache_clear()


@pytest.fixture(autouse=True)
def _leftovers_released() -> Iterator[None]:
    with leftovers_released():
        yield


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config")


@contextlib.asynccontextmanager
async def pg_database() -> AsyncIterator[str]:
    """A fresh, migrated database on the machine's PostgreSQL (127.0.0.1:5432, trust auth), dropped after."""
    import asyncpg

    name = f"gw_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    await create_migrated_pg(admin, name)
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def database_url(engine: str, directory: Path) -> AsyncIterator[str]:
    """A fresh, migrated database: "postgresql" (see pg_database) or "sqlite" (a file in `directory`)."""
    if engine == "postgresql":
        async with pg_database() as url:
            yield url
    else:
        copy_migrated_sqlite(directory / "gateway.db")
        yield f"sqlite+aiosqlite:///{directory / 'gateway.db'}"


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with pg_database() as url:
        yield url


PG_PARAMS = {"postgres", "postgresql"}


def _uses_postgres(item: pytest.Item) -> bool:
    """Whether a test reaches the machine's PostgreSQL: through the `pg_url` fixture, or a store
    parameter ("postgres" / "postgresql") of its own or of a fixture it uses."""
    if "pg_url" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(v, str) and v in PG_PARAMS for v in callspec.params.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # One rule for the `postgres` marker, so `-m "not postgres"` really leaves the server alone;
    # a test that opens `pg_database()` in its body carries the marker itself.
    for item in items:
        if _uses_postgres(item) and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)
        # One Chromium at a time (`--dist loadgroup`): two on two cores starve every other worker.
        if item.get_closest_marker("browser") is not None:
            item.add_marker(pytest.mark.xdist_group("browser"))
        if getattr(config.option, "loadgroup", False):
            _group_in_nodeid(item)


def _group_in_nodeid(item: pytest.Item) -> None:
    """Put a test's xdist group into its node id ("...::test@browser"), the suffix xdist's loadgroup
    scheduler groups by.

    xdist does this itself by assigning `item._nodeid`, but since pytest 9.2 `nodeid` is read from a
    structured `item._id` and that assignment changes nothing (pytest-xdist issue 1386): every group
    was scattered over the workers. Set where pytest 9.2 reads it, and only when xdist's own did not
    take, so a fixed xdist finds the suffix already there. Workers send these ids to the controller
    at the end of collection, after this hook.
    """
    groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")})
    suffix = f"@{'_'.join(groups)}"
    if not groups or item.nodeid.endswith(suffix):
        return
    node_id = getattr(item, "_id", None)
    if node_id is None or not hasattr(type(node_id), "parse"):
        return  # a pytest before 9.2: xdist's `_nodeid` assignment works there
    item._id = type(node_id).parse(item.nodeid + suffix)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test process collects garbage as `agent-gateway run` does once started: what is loaded by now
    (the test modules, the product, its dependencies) frozen out of the full passes, and the young
    generation collected every 10,000 allocations, not 700 (`freeze_startup_objects`). The in-process
    gateways then run as the daemon does; unchanged, the collector's passes over pytest's, every fixture's
    and every gateway's short-lived objects took ~9 % of a worker's CPU (2 s of 23 s over 29 tests)."""
    from gateway.daemon import freeze_startup_objects

    freeze_startup_objects()
