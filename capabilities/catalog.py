"""The catalog: what capabilities this deployment ships, for `agent-gateway capabilities` and the HTTP API.

Both read the running registry, so what they show is what an agent file can name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from aiohttp import web

from bindings.models import KNOWN_SCOPES

from .registry import load_all


def catalog() -> list[dict[str, Any]]:
    """Each capability as data, config schema included, ordered by id."""
    return [decl.catalog_entry() for _, decl in sorted(load_all().items())]


def scope_set(granted: Collection[str]) -> dict[str, list[str]]:
    """The deployment's scopes: every one a capability may need, and those gateway.yaml grants."""
    return {"known": list(KNOWN_SCOPES), "granted": [s for s in KNOWN_SCOPES if s in granted]}


def as_json(granted: Collection[str]) -> dict[str, Any]:
    return {"capabilities": catalog(), "scopes": scope_set(granted)}


def render_text(granted: Collection[str] = KNOWN_SCOPES) -> str:
    """The catalog for an admin's terminal: tools (marked when side-effecting) and config defaults."""
    withheld = [s for s in KNOWN_SCOPES if s not in granted]
    out: list[str] = [f"scopes granted: {', '.join(s for s in KNOWN_SCOPES if s in granted) or 'none'}"]
    if withheld:
        out.append(f"scopes withheld (gateway.yaml scopes.granted): {', '.join(withheld)}")
    out.append("")
    decls = load_all()
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
            marks = [s if s in granted else f"{s} (not granted: agents cannot use {entry['id']})" for s in entry["scopes"]]
            out.append(f"  scopes: {', '.join(marks)}")
        if entry["key"] != "no":
            out.append(f"  key: {entry['key']} (set secret_id)")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def http_routes(granted: Callable[[], Collection[str]]) -> Sequence[web.AbstractRouteDef]:
    """`granted` reads the running config's scopes, so a reload shows at once."""

    async def capabilities(request: web.Request) -> web.Response:
        return web.json_response(as_json(granted()))

    return [web.get("/api/v1/agents/capabilities", capabilities)]
