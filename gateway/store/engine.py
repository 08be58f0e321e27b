"""Engine creation, SQLite pragmas, and migrations (run at start-up, or checked: `database.migrate`)."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from gateway.store import sqlite
from gateway.store.compiled_cache import COMPILED
from gateway.store.storable import clean_statement
from gateway.store.availability import StoreUnavailable, guard, is_lock_wait, is_transient
from gateway.version import version

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from bindings.models import DatabaseConfig
    from gateway.store.repo import Store

MIGRATIONS = Path(__file__).parent / "migrations"
DEFAULT_BUSY_TIMEOUT = 5.0




class GuardedPool(AsyncAdaptedQueuePool):
    """The pool, with "no connection in time" (every one busy past the bound, or the server
    refusing or not answering) raised as StoreUnavailable."""

    def connect(self) -> Any:
        try:
            return super().connect()
        except StoreUnavailable:
            raise
        except Exception as e:
            if isinstance(e, sa_exc.TimeoutError):  # every connection busy: a wait, not an outage
                raise StoreUnavailable(f"no database connection free in time ({e})", sqlite.RETRY_AFTER_QUEUE) from e
            if is_transient(e):
                raise StoreUnavailable(f"no database connection ({e})", self._timeout, unreachable=True) from e
            raise


def create_engine(url: str, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
                  queue_wait: float = sqlite.QUEUE_WAIT) -> AsyncEngine:
    """An async engine whose waits for a lock held by another process or replica, and for a
    PostgreSQL connection, are bounded by `busy_timeout` seconds; on SQLite a wait for the one
    connection behind our own work by `queue_wait` (a test's is short; a burst needs the default). For SQLite the file's directory is created, WAL is on,
    and every call runs in the connection's thread (see `sqlite`)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ":memory:"
        # In memory: the database lives as long as the pool's one connection (the engine's life).
        if database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        # One connection (see `sqlite`): our transactions queue for it in asyncio. A store
        # method must not open a second session while its first still holds the connection.
        # Waiting for it is waiting behind our own work, which moves (a lock held by another
        # process is bounded where it is waited for: the busy handler, `sqlite.run`): a burst of
        # hundreds of messages at once queued past `busy_timeout` here, and each was refused
        # (Slack: not acked, answered only at its retry a minute later) while the queue drained.
        engine = create_async_engine(
            url,
            hide_parameters=True,  # a statement's error text names no value (docs/security.md, "Logs")
            poolclass=GuardedPool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=max(busy_timeout, queue_wait),
            # Sessions end their own transactions; a reset would cost a thread round trip.
            pool_reset_on_return=None,
            # The connection is used from aiosqlite's thread and, for a transaction that can take
            # the lock at once, from the loop's (`sqlite.inline`): never both at a time. SQLAlchemy
            # turns sqlite3's same-thread check off for a file, not for ":memory:", so say it here.
            connect_args={"timeout": busy_timeout, "check_same_thread": False},
        )
        event.listen(engine.sync_engine, "connect", sqlite.pragmas(busy_timeout))
        sqlite.track(engine.sync_engine, busy_timeout)
    else:
        engine = create_async_engine(
            url,
            hide_parameters=True,
            poolclass=GuardedPool,
            pool_size=10,
            max_overflow=10,
            pool_timeout=busy_timeout,
            # No `pool_pre_ping`: SQLAlchemy's asyncpg ping is three round trips per checkout (BEGIN, ";",
            # ROLLBACK), 6 of a message's 20 statements. A connection the server closed (a restart, a
            # terminated backend) is known to asyncpg already and replaced at checkout (`_replace_closed`);
            # one that dies unseen fails its statement as transient (StoreUnavailable: the message is not
            # acked, accepted work is tried again), as one that died just after a ping did.
            # A lock held by another replica (or an admin's psql) is waited for up to the bound.
            connect_args={"timeout": busy_timeout,
                          "server_settings": {"lock_timeout": str(int(busy_timeout * 1000))}},
        )
        event.listen(engine.sync_engine, "checkout", _replace_closed)
    event.listen(engine.sync_engine, "before_cursor_execute", clean_statement, retval=True)
    guard(engine).bound = busy_timeout
    guard(engine).queue_wait = queue_wait
    _watch(engine)
    # What one engine compiled, the next one of this process need not (`compiled_cache`).
    engine.sync_engine.update_execution_options(compiled_cache=COMPILED)
    return engine


def _replace_closed(dbapi_connection: Any, _record: object, _proxy: object) -> None:
    """A pooled PostgreSQL connection the server has closed is not handed out: the pool tries the
    checkout again with a new one (SQLAlchemy's DisconnectionError contract), without a round trip."""
    if dbapi_connection.driver_connection.is_closed():
        raise sa_exc.DisconnectionError("the server closed this connection")


def _watch(engine: AsyncEngine) -> None:
    """Statements through SQLAlchemy: count their waits for /readyz, and raise a busy or
    unreachable database as StoreUnavailable."""
    limits = guard(engine)
    started: dict[int, int] = {}

    # Keyed by the statement's execution context, which the error handler sees too.
    def before(_conn: Any, _cursor: Any, _statement: Any, _params: Any, context: Any, _many: bool) -> None:
        started[id(context)] = limits.waits.begin()

    def after(_conn: Any, _cursor: Any, _statement: Any, _params: Any, context: Any, _many: bool) -> None:
        token = started.pop(id(context), None)
        if token is not None:
            limits.waits.end(token)
        limits.outages.answered()

    def on_error(context: Any) -> BaseException | None:
        token = started.pop(id(context.execution_context), None)
        if token is not None:
            limits.waits.end(token)
        error = context.original_exception
        if context.is_pre_ping or not isinstance(error, Exception):
            return None  # the pool reconnects on its own; a cancellation stays a cancellation
        if context.is_disconnect or is_transient(error):
            unavailable = StoreUnavailable(f"the database did not answer in time ({error})", limits.bound,
                                           unreachable=context.is_disconnect or not is_lock_wait(error))
            limits.outages.failed(unavailable)
            raise unavailable
        return None

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    event.listen(engine.sync_engine, "after_cursor_execute", after)
    event.listen(engine.sync_engine, "handle_error", on_error)


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


class SchemaError(Exception):
    """The database's schema is not the one this version runs on (the message says what to do)."""


@dataclass(frozen=True)
class SchemaState:
    """Where the database's schema is, against what this code needs."""

    current: str | None  # the database's migration (None: no schema yet)
    head: str  # the newest migration this code has
    known: bool  # whether this code has `current` among its migrations (False: a newer version wrote it)

    @property
    def behind(self) -> bool:
        return self.known and self.current != self.head

    def problem(self, mode: str) -> str | None:
        """Why a daemon (or a CLI command) may not use the database as it is, in `mode` (auto | check)."""
        if not self.known:
            return (f"the database schema is at {self.current}, a migration this version ({version()}) does not have: "
                    "a newer agent-gateway upgraded it. Run that version, or restore the backup taken before the "
                    "upgrade (`agent-gateway db restore FILE`; docs/operations.md, Rollback)")
        if mode == "check" and self.behind:
            return (f"the database schema is at {self.current or 'nothing (an empty database)'}, this version needs "
                    f"{self.head}: run `agent-gateway db upgrade` first (database.migrate is check)")
        return None

    def describe(self) -> str:
        if not self.known:
            return f"{self.current} (newer than this version, which knows up to {self.head})"
        if self.current == self.head:
            return f"{self.head} (up to date)"
        return f"{self.current or 'nothing (empty)'}, this version needs {self.head}: `agent-gateway db upgrade`"


def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def known_revisions() -> set[str]:
    """Every migration this version has."""
    return {script.revision for script in _scripts().walk_revisions()}


def _state(connection: Connection) -> SchemaState:
    from alembic.runtime.migration import MigrationContext

    current = MigrationContext.configure(connection).get_current_revision()
    return SchemaState(current, _scripts().get_current_head() or "", current is None or current in known_revisions())


async def schema_state(engine: AsyncEngine) -> SchemaState:
    """Where the schema is. A database at this code's head is read as `migrate` reads it, without
    Alembic (a third of `db current`'s and `doctor`'s imports); any other state is Alembic's to say."""
    head = head_revision()
    if head is not None and await _recorded_revisions(engine) == [head]:
        return SchemaState(head, head, True)
    async with engine.connect() as conn:
        return await conn.run_sync(_state)


@cache
def head_revision() -> str | None:
    """The newest migration, read from the migration files' `revision = ...` and `down_revision =
    ...` lines without importing them: importing Alembic (its DDL modules load four SQLAlchemy
    dialects) was a third of the daemon's start-up, for a database that is at head on every start
    but the first. None when the files do not say it plainly (then Alembic is asked)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for file in (MIGRATIONS / "versions").glob("[0-9]*.py"):
        found: dict[str, Any] = {}
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if node.targets[0].id in ("revision", "down_revision"):
                    try:
                        found[node.targets[0].id] = ast.literal_eval(node.value)
                    except ValueError:
                        return None
        revision, down = found.get("revision"), found.get("down_revision")
        if not isinstance(revision, str) or not (down is None or isinstance(down, (str, tuple))):
            return None
        revisions.add(revision)
        parents.update((down,) if isinstance(down, str) else down or ())
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


async def _recorded_revisions(engine: AsyncEngine) -> list[str]:
    """What the database's `alembic_version` table says (nothing when it has none yet), read in a
    connection of its own: on PostgreSQL a failed statement would spoil the migration's transaction."""
    async with engine.connect() as conn:
        try:
            result = await conn.exec_driver_sql("SELECT version_num FROM alembic_version")
        except sa_exc.DBAPIError:  # no such table: an empty database
            return []
        return [str(row[0]) for row in result]


async def migrate(engine: AsyncEngine, mode: str = "auto") -> None:
    """Bring the schema to head (mode "auto"), or only check that it is there (mode "check", for
    operators who run `db upgrade` themselves before a rolling upgrade). Either way a schema newer
    than this code is refused (SchemaError) rather than run on. Safe to run from several replicas:
    PostgreSQL serializes it.

    A database already at head (one version row, this code's newest migration) is left as it is
    without Alembic: nothing would run, and no lock is needed to learn it (a replica migrating
    past our head would be a newer version, which the full check below would not stop either)."""
    head = head_revision()
    if head is not None and await _recorded_revisions(engine) == [head]:
        return

    def upgrade(connection: Connection) -> None:
        from alembic import command

        if connection.dialect.name == "postgresql":
            # One replica migrates at a time; the others wait, then find nothing to do.
            # No lock_timeout here: a long migration on another replica is worth waiting for.
            connection.exec_driver_sql("SET LOCAL lock_timeout = 0")
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7263510)")
        problem = _state(connection).problem(mode)
        if problem is not None:
            raise SchemaError(problem)
        if mode == "auto":
            command.upgrade(alembic_config(connection), "head")

    async with engine.begin() as conn:
        await conn.run_sync(upgrade)


@contextlib.asynccontextmanager
async def open_store(database: DatabaseConfig | str) -> AsyncIterator["Store"]:
    """A migrated store for the CLI's one-off reads and writes: `database` is gateway.yaml's
    `database` (its busy timeout and `migrate` mode apply) or a bare URL (auto)."""
    from gateway.store.repo import Store

    if isinstance(database, str):
        url, busy_timeout, mode = database, DEFAULT_BUSY_TIMEOUT, "auto"
    else:
        url, busy_timeout, mode = database.url, database.busy_timeout_seconds, database.migrate
    engine = create_engine(url, busy_timeout=busy_timeout)
    try:
        await migrate(engine, mode)
        yield Store(engine)
    finally:
        await engine.dispose()
