"""The catalog: what capabilities this deployment ships, for `agent-gateway capabilities` and the HTTP API.

Both read the running registry, so what they show is what an agent file can name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from .registry import load_builtin


def catalog() -> list[dict[str, Any]]:
    """Each capability as data, config schema included, ordered by id."""
    return [decl.catalog_entry() for _, decl in sorted(load_builtin().items())]


def render_text() -> str:
    """The catalog for an admin's terminal: tools (marked when side-effecting) and config defaults."""
    out: list[str] = []
    decls = load_builtin()
    for entry in catalog():
        fields = decls[entry["id"]].config_model.model_fields
        where = " — set on a binding, not an agent" if entry["binding_only"] else ""
        out.append(f"{entry['id']} ({entry['name']}, {entry['category']}){where}")
        if entry["description"]:
            out.append(f"  {entry['description']}")
        if entry["tools"]:
            for tool in entry["tools"]:
                mark = " [side-effecting: asks for approval by default]" if tool["side_effecting"] else ""
                out.append(f"  tool {tool['id']}{mark}: {tool['summary']}")
        else:
            out.append("  no tools (instructions or model settings only)")
        props = entry["config_schema"].get("properties", {})
        for name, schema in props.items():
            field = fields[name]
            default = "(required)" if field.is_required() else json.dumps(field.get_default(call_default_factory=True))
            limits = "".join(f", {k} {schema[k]}" for k in ("minimum", "maximum") if k in schema)
            choices = schema.get("items", schema).get("enum") or [
                v for alt in schema.get("anyOf", []) for v in alt.get("enum", [])
            ]
            if choices:
                limits += f", any of {', '.join(map(str, choices))}"
            note = f" — {schema['description']}" if schema.get("description") else ""
            out.append(f"  config {name}: default {default}{limits}{note}")
        if entry["scopes"]:
            out.append(f"  scopes: {', '.join(entry['scopes'])}")
        if entry["key"] != "no":
            out.append(f"  key: {entry['key']} (set secret_id)")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


async def _capabilities(request: web.Request) -> web.Response:
    return web.json_response({"capabilities": catalog()})


def http_routes() -> Sequence[web.AbstractRouteDef]:
    return [web.get("/api/v1/agents/capabilities", _capabilities)]
