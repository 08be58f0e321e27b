"""A server's `elicitation/create` during a tool call, put to the person in the thread (`elicitation: ask`).

The request becomes a question (`gateway/approvals/questions.py`) asked in the thread of the run whose
call the server is serving: on 2026-07-28 the request rides the call's own `InputRequiredResult` (the
call's context is at hand, `CURRENT_CALL`); on the handshake revisions it arrives beside the call, and is
put to the run whose call is the only one in flight on the connection (as sampling is counted). The
form's fields are asked one by one; the person's accept, decline or the question's cancel (timeout, a
run stopped, a platform that cannot ask, a second question while one is open) goes back to the server
as the MCP action of that name, so the server is told in every case.

Not asked, and cancelled at once: a URL-mode request (a link the server wants opened is not something
this gateway shows as its own), a form with a field type the spec does not define for forms, and a
request with no run to ask in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gateway.approvals.questions import Answer, Ask, Field
from gateway.mcp.call import CURRENT_CALL, RunCall

log = logging.getLogger("gateway.mcp.elicitation")


def asking_handler(label: str, server: str, sole_call: Callable[[], RunCall | None]) -> Any:
    """A FastMCP elicitation handler for one connection."""
    from fastmcp.client.elicitation import ElicitResult
    from mcp_types import ElicitRequestFormParams

    async def handler(message: str, response_type: Any, params: Any, context: Any) -> Any:
        call = CURRENT_CALL.get() or sole_call()
        if call is None or call.ask is None:
            log.info("MCP server %s asked the person, with no run that can ask; cancelled", label)
            return ElicitResult(action="cancel")
        if not isinstance(params, ElicitRequestFormParams):
            log.info("MCP server %s asked the person to open a link (URL elicitation); cancelled", label)
            return ElicitResult(action="cancel")
        fields = form_fields(params.requested_schema)
        if fields is None:
            log.info("MCP server %s asked for a form this gateway cannot show; cancelled", label)
            return ElicitResult(action="cancel")
        answer: Answer = await call.ask(Ask(asker=f"The {server} MCP server", text=message, fields=fields))
        return ElicitResult(action=answer.action, content=answer.content if answer.action == "accept" else None)

    return handler


def form_fields(schema: dict[str, Any]) -> tuple[Field, ...] | None:
    """The form's fields in the spec's flat shape (boolean, string, number, integer, enums), or None."""
    required = set(schema.get("required") or [])
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict):
            return None
        title = str(prop.get("title") or name)
        described = str(prop.get("description") or "")
        kind = prop.get("type")
        options: tuple[str, ...] = ()
        if "enum" in prop:
            options = tuple(str(o) for o in prop["enum"])
        elif "oneOf" in prop or "anyOf" in prop:  # a titled enum: the values are what goes back
            choices = prop.get("oneOf") or prop.get("anyOf") or []
            if not all(isinstance(c, dict) and "const" in c for c in choices):
                return None
            options = tuple(str(c["const"]) for c in choices)
        if options:
            fields.append(Field(name, title, "enum", options, name in required, described))
        elif kind in ("boolean", "string", "number", "integer"):
            fields.append(Field(name, title, kind, (), name in required, described))
        else:
            return None
    return tuple(fields)
