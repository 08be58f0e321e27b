"""A table's rows read on the driver (`driver.read`), as detached ORM instances for reading.

An ORM session costs ~0.4-0.8 ms of the loop's CPU (its checkout, the aiosqlite hand-off per statement,
the ORM's loading) where the driver answers the same SELECT in tens of microseconds; the reads the
daemon repeats (the sweeps', the start's) mostly find nothing, so that fixed cost is all they cost.
The instances are built as the ORM's own loading builds one (values in its `__dict__`, no change events)
and never go into a session: a session would take them for new rows.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy import Boolean
from sqlalchemy.orm import configure_mappers
from sqlalchemy.orm.instrumentation import manager_of_class

from gateway.store import driver
from gateway.store.models import Base, UTCDateTime

M = TypeVar("M", bound=Base)


class Rows(Generic[M]):
    """One model's columns: `columns` for a SELECT, `of` to build an instance from its row."""

    def __init__(self, model: type[M]) -> None:
        attributes = model.__mapper__.column_attrs
        self._names = tuple(a.key for a in attributes)
        self.columns = ", ".join(a.columns[0].name for a in attributes)
        self._times = tuple(a.key for a in attributes if isinstance(a.columns[0].type, UTCDateTime))
        self._flags = tuple(a.key for a in attributes if isinstance(a.columns[0].type, Boolean))  # SQLite: 0 / 1
        self._manager = manager_of_class(model)

    def of(self, q: driver.Statements, row: driver.Row) -> M:
        values = dict(zip(self._names, row))
        for name in self._times:
            values[name] = q.time(values[name])
        for name in self._flags:
            if values[name] is not None:
                values[name] = bool(values[name])
        return self.new(**values)

    def new(self, **values: Any) -> M:
        """An instance holding `values`, for reading; a constructor's every attribute set is an ORM change
        event (a claimed run's 19 were 8 % of the store's profiled time per message)."""
        if not self._manager.mapper.configured:  # what a constructor's first call does; new_instance does not
            configure_mappers()
        instance: M = self._manager.new_instance()
        instance.__dict__.update(values)
        return instance
