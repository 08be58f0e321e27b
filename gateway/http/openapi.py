"""The OpenAPI document of `/api/v1`, served at `/api/v1/openapi.json`.

Written by hand, next to the routes it describes, and kept honest by a test: every route the
application registers under `/api/v1` must be in it (`tests/test_openapi.py`). What holds for
every route is said once, in `info.description` and the shared responses: the API token in
the Authorization header only, state-changing requests as JSON (the message upload also as
multipart) from no foreign origin.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

OPENAPI_ROUTE = "/api/v1/openapi.json"

Schema = dict[str, Any]

_ERROR: Schema = {"type": "object", "required": ["error", "message"],
                  "properties": {"error": {"type": "string"}, "message": {"type": "string"}}}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 64}}


def _obj(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema, description: str = "") -> Schema:
    return {"description": description or "OK", "content": {"application/json": {"schema": schema}}}


def _body(schema: Schema, *, multipart: bool = False) -> Schema:
    content: Schema = {"application/json": {"schema": schema}}
    if multipart:
        content["multipart/form-data"] = {"schema": _obj({"text": {"type": "string"},
                                                          "file": {"type": "array", "items": {
                                                              "type": "string", "format": "binary"}}})}
    return {"required": True, "content": content}


_EMPTY = _body({"type": "object", "description": "an empty object: a state-changing request is always JSON"})
_ANSWER = _obj({"id": {"type": ["integer", "null"]}, "role": {"type": "string", "enum": ["notice", "memory"]},
                "text": {"type": "string"}, "card": _ref("MemoryCard")}, ["id", "role", "text"])
_TURN = _obj({
    "id": {"type": ["integer", "null"]},
    "role": {"type": "string", "enum": ["user", "assistant", "notice", "report", "command", "memory"],
             "description": "command: a chat command as typed; notice: the gateway's answer or a line of its own; "
                            "memory: a /memory card, drawn from the notes as they are now"},
    "text": {"type": "string", "description": "Markdown"},
    "status": {"type": "string", "description": "private: a command or its answer, for its asker alone"},
    "run_id": {"type": ["string", "null"]}, "time": {"type": "string", "format": "date-time"},
    "agent": {"type": "string"}, "card": _ref("MemoryCard"),
}, ["role", "text", "time"])
_LISTED = _obj({"id": {"type": "string"}, "title": {"type": "string"},
                "last_active": {"type": "string", "format": "date-time"},
                "passage": {"type": "string", "description": "with ?q=: the best matching words, in **bold**"}},
               ["id", "title", "last_active"])
_NOTE = _obj({"agent": {"type": "string"}, "name": {"type": "string"}, "content": {"type": "string"},
              "in_use": {"type": "boolean"}, "created_at": {"type": "string", "format": "date-time"},
              "updated_at": {"type": "string", "format": "date-time"}})

PATHS: dict[str, dict[str, Schema]] = {
    "/api/v1/conversations": {
        "post": {"summary": "Start a web conversation", "requestBody": _EMPTY,
                 "responses": {"201": _json(_obj({"id": {"type": "string"}}, ["id"]))}},
        "get": {"summary": "The person's web conversations (linked accounts as one person), most recently active "
                           "first; with q, those matching it (full-text, best first)",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100,
                                                                "default": 30}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"},
                     "description": "next_cursor of the previous page"},
                    {"name": "q", "in": "query", "schema": {"type": "string"},
                     "description": "words, \"phrases\", or, -excluded"}],
                "responses": {"200": _json(_obj({"conversations": {"type": "array", "items": _LISTED},
                                                 "next_cursor": {"type": ["string", "null"]}})),
                              "400": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/conversations/{id}": {
        "patch": {"summary": "Rename a conversation (null or blank: its first message again)", "parameters": [_ID],
                  "requestBody": _body(_obj({"title": {"type": ["string", "null"], "maxLength": 200}}, ["title"])),
                  "responses": {"200": _json(_obj({"id": {"type": "string"}, "title": {"type": ["string", "null"]}})),
                                "404": {"$ref": "#/components/responses/Error"}}},
        "delete": {"summary": "Erase a conversation: its messages, runs, deliveries, cards, modes, attachment "
                              "references and capability state (notes, the person's, stay)",
                   "parameters": [_ID], "requestBody": _EMPTY,
                   "responses": {"200": _json(_obj({"deleted": {"type": "boolean"}})),
                                 "404": {"$ref": "#/components/responses/Error"},
                                 "409": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/conversations/{id}/messages": {
        "get": {"summary": "The conversation: turns, commands and their answers, approval cards, decisions, modes",
                "parameters": [_ID],
                "responses": {"200": _json(_obj({"conversation_id": {"type": "string"},
                                                 "messages": {"type": "array", "items": _TURN},
                                                 "cards": {"type": "array", "items": _ref("ApprovalCard")},
                                                 "files": {"type": "array", "items": _obj({
                                                     "id": {"type": "string"}, "time": {"type": "string"},
                                                     "caption": {"type": "string"},
                                                     "files": {"type": "array", "items": _obj({
                                                         "id": {"type": "string"}, "name": {"type": "string"},
                                                         "media_type": {"type": "string"},
                                                         "url": {"type": "string"}})}})},
                                                 "decisions": {"type": "array", "items": {"type": "object"}},
                                                 "modes": _ref("Modes")})),
                              "404": {"$ref": "#/components/responses/Error"}}},
        "post": {"summary": "Say something; a chat command (/help, /memory, …) is answered in the response",
                 "parameters": [_ID, {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}],
                 "requestBody": _body(_obj({"text": {"type": "string", "maxLength": 32000}}, ["text"]),
                                      multipart=True),
                 "responses": {
                     "202": _json(_obj({"message_id": {"type": "string"}, "run_id": {"type": "string"}}),
                                  "accepted: the answer streams on the event stream"),
                     "200": _json(_obj({"command": {"type": "boolean"},
                                        "answers": {"type": "array", "items": _ANSWER}}), "a command, answered"),
                     "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
                     "409": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
                     "429": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/conversations/{id}/files/{file_id}": {
        "get": {"summary": "A file the agent posted in the conversation (a chart, a shared file, speech): PNG, "
                           "JPEG, GIF, WebP, OGG and MP3 inline, anything else as a download",
                "parameters": [_ID, {"name": "file_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "the file's bytes", "content": {"application/octet-stream": {}}},
                              "404": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/conversations/{id}/events": {
        "get": {"summary": "Server-sent events: delta, card, notice, memory_card, report, status, typing, "
                           "stop_control, files, run_end",
                "parameters": [_ID, {"name": "stream_token", "in": "query", "schema": {"type": "string"},
                                     "description": "from POST /api/v1/stream-tokens (EventSource sends no headers)"}],
                "responses": {"200": {"description": "the stream", "content": {"text/event-stream": {}}}}},
    },
    "/api/v1/conversations/{id}/modes": {
        "post": {"summary": "Switch approval modes (the binding's deciders only)", "parameters": [_ID],
                 "requestBody": _body(_obj({"approve_all": {"type": "boolean"}, "ask_every_tool": {"type": "boolean"}})),
                 "responses": {"200": _json(_ref("Modes")), "403": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/stream-tokens": {
        "post": {"summary": "A two-minute token that opens one conversation's event stream",
                 "requestBody": _body(_obj({"conversation_id": {"type": "string"}}, ["conversation_id"])),
                 "responses": {"201": _json(_obj({"token": {"type": "string"},
                                                  "expires_at": {"type": "string", "format": "date-time"}}))}},
    },
    "/api/v1/approvals/{id}": {
        "get": {"summary": "One gated call with every argument it will receive, for someone who may decide it "
                           "(404 for anyone else, as for an id that does not exist)",
                "parameters": [_ID],
                "responses": {"200": _json(_obj({
                    "approval_id": {"type": "string"}, "tool": {"type": "string"},
                    "delegate": {"type": ["string", "null"]}, "headline": {"type": ["string", "null"]},
                    "capability": {"type": ["string", "null"]},
                    "arguments": {"type": "string", "description": "every argument, whole (secret-named values masked)"},
                    "state": {"type": "string"}, "decided_by": {"type": ["string", "null"]}},
                    ["approval_id", "tool", "arguments", "state"])),
                    "404": {"$ref": "#/components/responses/Error"}}},
        "post": {"summary": "Decide an approval (or approve_all with a card's id): the same checks as a click",
                 "parameters": [_ID],
                 "requestBody": _body(_obj({"decision": {"type": "string", "enum": ["approve", "deny", "approve_all"]}},
                                           ["decision"])),
                 "responses": {"200": _json(_obj({"accepted": {"type": "boolean"}, "message": {"type": "string"}})),
                               "403": {"$ref": "#/components/responses/Error"},
                               "404": {"$ref": "#/components/responses/Error"},
                               "409": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/runs/{id}/stop": {
        "post": {"summary": "Stop a reply being written (or a background run)", "parameters": [_ID],
                 "requestBody": _EMPTY,
                 "responses": {"200": _json(_obj({"stopped": {"type": "boolean"}, "message": {"type": "string"}})),
                               "403": _json(_obj({"stopped": {"type": "boolean"}, "message": {"type": "string"}})),
                               "409": _json(_obj({"stopped": {"type": "boolean"}, "message": {"type": "string"}}))}},
    },
    "/api/v1/me/memory": {
        "get": {"summary": "What agents wrote about the web's person",
                "responses": {"200": _json(_obj({"notes": {"type": "array", "items": _NOTE}}))}},
        "post": {"summary": "Stop using, use again or delete a note; or erase them all",
                 "requestBody": _body(_obj({"action": {"type": "string", "enum": ["stop", "use", "delete", "erase"]},
                                            "agent": {"type": "string"}, "name": {"type": "string"}}, ["action"])),
                 "responses": {"200": _json({"type": "object"}), "404": {"$ref": "#/components/responses/Error"}}},
    },
    "/api/v1/memory/click": {
        "post": {"summary": "A /memory card's button, as the web's person",
                 "requestBody": _body(_obj({"data": {"type": "string"}}, ["data"])),
                 "responses": {"200": _json(_obj({"card": {"oneOf": [_ref("MemoryCard"), {"type": "null"}]},
                                                  "message": {"type": ["string", "null"]}}))}},
    },
    "/api/v1/agents/capabilities": {
        "get": {"summary": "The capability catalog (ids, config, scopes granted)",
                "responses": {"200": _json({"type": "array", "items": {"type": "object"}})}},
    },
    "/api/v1/admin/reload": {
        "post": {"summary": "Reload the configuration (as SIGHUP)", "requestBody": _EMPTY,
                 "responses": {"200": _json(_obj({"reloaded": {"type": "boolean"},
                                                  "problems": {"type": "array", "items": {"type": "string"}}})),
                               "422": _json(_obj({"reloaded": {"type": "boolean"},
                                                  "problems": {"type": "array", "items": {"type": "string"}}}))}},
    },
    OPENAPI_ROUTE: {
        "get": {"summary": "This document", "responses": {"200": _json({"type": "object"})}},
    },
}

_BUTTON = _obj({"label": {"type": "string"}, "data": {"type": "string"}, "style": {"type": "string"}})
COMPONENTS: Schema = {
    "schemas": {
        "Error": _ERROR,
        "Modes": _obj({"approve_all": {"type": "boolean"}, "ask_every_tool": {"type": "boolean"}}),
        "MemoryCard": _obj({"title": {"type": "string"}, "status": {"type": "string"}, "footer": {"type": "string"},
                            "actions": {"type": "array", "items": _BUTTON},
                            "notes": {"type": "array", "items": _obj({
                                "label": {"type": "string"}, "detail": {"type": "string"},
                                "in_use": {"type": "boolean"}, "buttons": {"type": "array", "items": _BUTTON}})}}),
        "ApprovalCard": _obj({"card_id": {"type": "string"}, "run_id": {"type": "string"},
                              "pending": {"type": "boolean"}, "deciders": {"type": "string"},
                              "note": {"type": "string"}, "time": {"type": "string", "format": "date-time"},
                              "items": {"type": "array", "items": {"type": "object"}}}),
    },
    "responses": {"Error": _json(_ref("Error"), "refused, with the reason")},
    "securitySchemes": {"token": {"type": "http", "scheme": "bearer",
                                  "description": "http.api_token; only in the Authorization header"}},
}

DOCUMENT: Schema = {
    "openapi": "3.1.0",
    "info": {
        "title": "agent-gateway HTTP API", "version": "1",
        "description": "The web chat's API: one local person (bindings' web.person) talking to the web binding. "
                       "With http.api_token set, every route needs 'Authorization: Bearer <token>' (never in a "
                       "URL; the event stream takes a stream token instead). A state-changing request must be "
                       "Content-Type: application/json (the message upload also multipart/form-data), with no "
                       "foreign Origin and no Sec-Fetch-Site: cross-site: 415/403 otherwise. A database that "
                       "stays locked is 503 with Retry-After on every route.",
    },
    "security": [{"token": []}],
    "paths": PATHS,
    "components": COMPONENTS,
}


def routes() -> list[web.AbstractRouteDef]:
    async def document(request: web.Request) -> web.Response:
        return web.json_response(DOCUMENT)

    return [web.get(OPENAPI_ROUTE, document)]
