"""Text made storable on both engines: a NUL byte and a lone surrogate become U+FFFD.

PostgreSQL's text cannot hold a NUL, and neither engine's driver can encode a lone surrogate
("\\ud800", which JSON allows and Python keeps); either one made the statement fail, so a
message that carried one answered 500. Every parameter bound by the store passes through here,
on the driver's path (`driver`) and the ORM's (`clean_statement`, an engine hook), so text from
anywhere (a platform, the web API, a model, a tool) is stored, not refused.
"""

from __future__ import annotations

import re
from typing import Any

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(value: Any) -> Any:
    """`value` with NULs and lone surrogates replaced, if it is a string; anything else as it is."""
    if isinstance(value, str) and UNSTORABLE.search(value):
        return UNSTORABLE.sub(REPLACEMENT, value)
    return value


def storable_params(params: Any) -> Any:
    """A statement's parameters (a dict, a sequence, or a list of either for executemany), cleaned."""
    if isinstance(params, dict):
        return {k: storable(v) for k, v in params.items()}
    if isinstance(params, tuple):
        return tuple(storable(v) for v in params)
    if isinstance(params, list):
        return [storable_params(p) if isinstance(p, (dict, tuple, list)) else storable(p) for p in params]
    return params


def clean_statement(conn: Any, cursor: Any, statement: str, parameters: Any,
                    context: Any, executemany: bool) -> tuple[str, Any]:
    """SQLAlchemy's `before_cursor_execute` hook (retval=True): the ORM's parameters, cleaned."""
    return statement, storable_params(parameters)
