"""What the log holds at its most verbose: never a secret, an SQL parameter or a message's text.

The daemon runs as operators run it (its own process, `logging.level: debug`, a model over HTTP),
on SQLite and on PostgreSQL, and the whole of its stderr is searched (docs/security.md, "Logs").
"""

from __future__ import annotations

import pytest

from .conftest import database_url, wait_for, write_config
from .fakes.openai import FakeOpenAI
from .test_operations import Daemon

SECRET = "sk-planted-secret-4c1d9e"
FILED = "planted workspace text about the zebra 2d8c"
ASKED = "planted question about the quarterly zebra 7f3a"
ANSWERED = "planted answer about the zebra 9b2e"


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_debug_level_turn_logs_no_secret_parameter_or_text(tmp_path, engine: str) -> None:
    fake = await FakeOpenAI(chunks=[ANSWERED]).start()
    # The model keeps a file: a statement whose parameters are the model's text.
    fake.tool_call = lambda body: ("write_file", {"path": "notes.md", "content": FILED})
    async with database_url(engine, tmp_path / "c") as url:
        cfg = write_config(
            tmp_path / "c",
            agents={"assistant": {"name": "A", "model": "local:chat", "capabilities": [{"id": "sandbox"}]}},
            gateway={"database": {"url": url}, "logging": {"level": "debug"},
                     "providers": {"local": {"kind": "openai-chat", "base_url": fake.base_url,
                                             "api_key": "env:PLANTED_KEY"}}},
        )
        daemon = await Daemon(cfg, env={"PLANTED_KEY": SECRET}).start()
        try:
            _, conv = await daemon.request("POST", "/api/v1/conversations")
            status, sent = await daemon.request("POST", f"/api/v1/conversations/{conv['id']}/messages", {"text": ASKED})
            assert status == 202

            async def answered() -> bool:
                _, body = await daemon.request("GET", f"/api/v1/conversations/{conv['id']}/messages")
                return any(ANSWERED in (m.get("text") or "") for m in body["messages"])

            await wait_for(answered, timeout=30, what="the model's answer")
            assert any(ASKED in str(r) for r in fake.requests)  # the text did travel: it is not logged
            await daemon.signal(15)
            assert await daemon.wait() == 0
        finally:
            await daemon.close()
            await fake.stop()
    log = daemon.stderr.decode()
    assert "level=debug" in log  # the level was in force: this is the most the daemon writes
    assert SECRET not in log
    assert ASKED not in log and ANSWERED not in log and FILED not in log
    assert "zebra" not in log  # not a fragment either (a statement's parameters, a request body)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_failed_statement_names_no_parameter(tmp_path, engine: str) -> None:
    """An error is logged with its exception's text: the statement is there, its values are not."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from gateway.store.engine import create_engine

    async with database_url(engine, tmp_path) as url:
        db = create_engine(url)
        try:
            async with db.begin() as c:
                await c.execute(text("create table planted (v varchar(100) primary key)"))
                await c.execute(text("insert into planted values (:v)"), {"v": FILED})
            with pytest.raises(IntegrityError) as failed:
                async with db.begin() as c:
                    await c.execute(text("insert into planted values (:v)"), {"v": FILED})
        finally:
            await db.dispose()
    assert "insert into planted" in str(failed.value)
    assert "zebra" not in str(failed.value)


@pytest.fixture
def logging_restored():
    """configure_logging changes the process's loggers: put back what pytest and the other tests set."""
    import logging

    from gateway.ops.logs import OWN_LOGGERS

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    own = {name: logging.getLogger(name).level for name in OWN_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in own.items():
        logging.getLogger(name).setLevel(was)


@pytest.mark.parametrize("level", ["debug", "info", "warning"])
def test_a_library_line_below_warning_is_not_even_made(logging_restored, capsys, level: str) -> None:
    """What the handler would drop (a library's info and debug, docs/operations.md "Logs") is never
    built as a record; the gateway's own lines at the configured level are written, as are a library's
    warnings (bench/README.md, Round 16: the model client's line per request was made and dropped)."""
    import logging

    from bindings.models import LoggingConfig
    from gateway.ops.logs import configure_logging

    made: list[str] = []
    factory = logging.getLogRecordFactory()

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        record = factory(*args, **kwargs)
        made.append(f"{record.name} {record.levelname}")
        return record

    configure_logging(LoggingConfig(level=level))  # type: ignore[arg-type]
    logging.setLogRecordFactory(counting)
    try:
        logging.getLogger("httpx").info("HTTP Request: POST https://example.invalid/v1/chat")
        logging.getLogger("aiosqlite").debug("executing an SQL statement with parameters")
        logging.getLogger("httpx").warning("a library's warning")
        logging.getLogger("gateway.runs.runner").debug("the gateway's own detail")
        logging.getLogger("adapters.slack").info("the gateway's own line")
    finally:
        logging.setLogRecordFactory(factory)
    written = capsys.readouterr().err
    assert made == ["httpx WARNING", *{"debug": ["gateway.runs.runner DEBUG", "adapters.slack INFO"],
                                       "info": ["adapters.slack INFO"], "warning": []}[level]]
    assert "a library's warning" in written and "SQL" not in written and "HTTP Request" not in written
    assert ("the gateway's own detail" in written) == (level == "debug")
    assert ("the gateway's own line" in written) == (level in ("debug", "info"))
