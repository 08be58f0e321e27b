"""Structured log lines: logfmt or JSON, one line per event, no timestamps under journald.

Context (binding, conversation, run ids) travels in `extra=` fields. Secret values are never
formatted: config holds `SecretRef`s whose repr is the reference, and resolved `Secret`s print
as '***'.

Below WARNING only the gateway's own loggers speak, whatever `logging.level` says. A library's
info and debug lines are what it is about to send or has just read: aiosqlite writes every
statement with its parameters (message text, notes, workspace files, knowledge chunks), the
model SDKs and websocket clients their payloads, HTTP clients URLs that hold tokens. A list of
the noisy ones drifts as dependencies change; the rule is the other way round, so a library
added tomorrow is quiet too (docs/security.md, "Logs").
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from bindings.models import LoggingConfig

_STD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    out: dict[str, object] = {}
    if "JOURNAL_STREAM" not in os.environ:
        out["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
    out["level"] = record.levelname.lower()
    out["logger"] = record.name
    out["msg"] = record.getMessage()
    for key, value in record.__dict__.items():
        if key not in _STD and not key.startswith("_"):
            out[key] = value
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = []
        for key, value in _fields(record).items():
            text = str(value)
            if not text or any(c in text for c in ' ="\n'):
                text = json.dumps(text)
            parts.append(f"{key}={text}")
        return " ".join(parts)


# The packages whose log lines we write ourselves and keep free of secrets and message text.
OWN_LOGGERS = ("gateway", "adapters", "capabilities", "bindings", "bench")


def own(name: str) -> bool:
    return name.split(".", 1)[0] in OWN_LOGGERS


class LibraryQuiet(logging.Filter):
    """Drops a library's records below WARNING (see the module docstring). `configure_logging`'s levels
    keep most of them from being made; this catches a library that sets its own logger's level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or own(record.name)


def configure_logging(cfg: LoggingConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if cfg.format == "json" else LogfmtFormatter())
    handler.addFilter(LibraryQuiet())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # A record the filter would drop is not made at all: a library's logger inherits the root's WARNING, so
    # its `isEnabledFor(INFO)` says no at the call (the model client's line per request, aiohttp's access
    # log); our own loggers take the configured level, and their records reach the root's handler as before.
    level = logging.getLevelName(cfg.level.upper())
    root.setLevel(max(level, logging.WARNING))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)
