"""One compiled-statement cache for every engine of the process, not one per engine.

SQLAlchemy keeps the SQL it compiled from a statement in its engine's cache, keyed by the engine's
dialect object: a new engine compiles every statement again. Each in-process gateway start makes an
engine, and its first statements (the start-up sweeps', the approvals', the schedules') were compiled
anew every time: a third of the start's loop CPU. Here the dialect in the key is replaced by what
compiling depends on (its class and its settings, a PostgreSQL server's version among them), so two
engines with equal dialects share what either compiled, and a different one (another server version,
another backend) keeps its own.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.util import LRUCache

# SQLAlchemy's own default per engine is 500; two backends (a test process's SQLite and PostgreSQL) fit twice.
CAPACITY = 1000

_SETTINGS = (bool, int, float, str, type(None))


def _plain(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, _SETTINGS)


class SharedCompiledCache(LRUCache[Any, Any]):
    """An LRU cache whose keys name a dialect by its class and plain settings, not by its identity.

    A dialect's settings are read at its first statement, after its first connection initialized it
    (the server's version, what it supports); a dialect's objects (its preparer, its type compiler)
    are built from those settings and its class, and are left out. So is a JSON serializer passed to
    `create_engine`: ours pass none, and engines that differ only in theirs must not share this cache."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        super().__init__(capacity)
        self._names: weakref.WeakKeyDictionary[Dialect, tuple[Any, ...]] = weakref.WeakKeyDictionary()

    def _name(self, dialect: Dialect) -> tuple[Any, ...]:
        name = self._names.get(dialect)
        if name is None:
            settings = tuple(sorted((k, v) for k, v in vars(dialect).items() if _plain(v)))
            name = self._names[dialect] = (type(dialect), settings)
        return name

    def _key(self, key: Any) -> Any:
        # SQLAlchemy's key: (dialect, statement's cache key, column keys, schema map?, executemany?). A key of
        # another shape (a later release) is kept as it is: per engine again, as before this cache.
        return (self._name(key[0]), *key[1:]) if isinstance(key, tuple) and isinstance(key[0], Dialect) else key

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(self._key(key), default)

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(self._key(key), value)

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(self._key(key))


COMPILED = SharedCompiledCache()
