"""Stop's share of the sweep: SQL statements a sweep's `Stops.take_requests` sends with nothing kept (the idle case,
every 2 s on every replica), and with one stopped line waiting. Run against a checkout: PYTHONPATH=<checkout>.

    PYTHONPATH=/work/main python bench/stop_sweep.py
    PYTHONPATH=/work/wt-durstop python bench/stop_sweep.py
"""

from __future__ import annotations

import asyncio
import inspect
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import event

import gateway
from gateway.runs.stop import Stops
from gateway.store import driver
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Store


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        engine = create_engine(f"sqlite+aiosqlite:///{Path(directory) / 'gateway.db'}")
        await migrate(engine)
        store = Store(engine)
        statements: list[str] = []

        def counting(run: Any) -> Any:  # the driver's statements (its own sqlite3 calls): each one a program yields
            async def wrapped(engine: Any, program: Any, *args: Any, **kw: Any) -> Any:
                def counted_program(q: Any) -> Any:
                    steps = program(q)
                    try:
                        stmt = next(steps)
                        while True:
                            statements.append(stmt.sql)
                            stmt = steps.send((yield stmt))
                    except StopIteration as done:
                        return done.value
                return await run(engine, counted_program, *args, **kw)
            return wrapped

        driver.transaction = counting(driver.transaction)  # `driver.read` goes through it

        @event.listens_for(engine.sync_engine, "before_cursor_execute")  # the ORM's
        def counted(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
            if not sql.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA")):
                statements.append(sql)


        kw: dict[str, Any] = {"sweep_every": 2.0, "ended": lambda c, r, s: None}
        if "adapter_for" in inspect.signature(Stops.__init__).parameters:
            kw["adapter_for"] = lambda binding_id: None  # no binding connected: a kept line waits
        stops = Stops(store, None, lambda run_id, who: False, **kw)  # type: ignore[arg-type]
        rounds = 100
        for _ in range(rounds):
            await stops.take_requests([])
        print(f"{gateway.__file__}: an idle sweep's Stop: {len(statements) / rounds:g} statements")
        statements.clear()
        await store.capability_state.put("stop", "lines", "gone-run", "a line whose run is gone")
        statements.clear()
        await stops.take_requests([])
        print(f"  with one kept line of a run that is gone: {len(statements)} statements (forgotten)")
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
