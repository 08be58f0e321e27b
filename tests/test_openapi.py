"""`/api/v1/openapi.json` describes every `/api/v1` route the daemon serves, and nothing it does not."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from gateway.http.server import build_app

from .conftest import running_gateway


async def test_every_api_route_is_in_the_openapi_document_and_only_those(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        r = await s.get("/api/v1/openapi.json")
        assert r.status == 200
        doc = await r.json()
        served = {(route.resource.canonical, route.method.lower()) for route in build_app(gw).router.routes()
                  if route.resource is not None and route.resource.canonical.startswith("/api/v1")
                  and route.method != "HEAD"}
        described = {(path, method) for path, item in doc["paths"].items() for method in item}
        assert served - described == set(), "routes the document does not describe"
        assert described - served == set(), "the document describes routes nobody serves"
        assert doc["openapi"].startswith("3.")
        for path, item in doc["paths"].items():
            for method, operation in item.items():
                assert operation["summary"] and operation["responses"], (path, method)
                named = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
                assert named == set(re.findall(r"{(\w+)}", path)), (path, method)  # every placeholder, and only those
