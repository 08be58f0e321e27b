"""The daemon's one aiohttp application: health, metrics, and the routes adapters serve.

The JSON API is guarded by `http.api_token` when one is set (a bearer token, or
`?access_token=` for EventSource, which cannot send headers). Platform webhooks check their
own signatures in their adapters instead.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .daemon import Gateway

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROTECTED_PREFIXES = ("/api/",)


def build_app(gateway: Gateway) -> web.Application:
    app = web.Application(middlewares=[_auth_middleware(gateway)], client_max_size=2 * 1024**2)
    app[GATEWAY_KEY] = gateway
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    for adapter in gateway.adapters.values():
        app.router.add_routes(adapter.http_routes())
    return app


def _auth_middleware(gateway: Gateway) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    token_ref = gateway.config.gateway.http.api_token
    token = token_ref.resolve().reveal() if token_ref is not None else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and request.path.startswith(PROTECTED_PREFIXES):
            offered = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            offered = offered or request.query.get("access_token", "")
            if not hmac.compare_digest(offered.encode(), token.encode()):
                return web.json_response(
                    {"error": "unauthorized", "message": "send the API token as 'Authorization: Bearer <token>'"},
                    status=401,
                )
        return await handler(request)

    return middleware


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    state = await request.app[GATEWAY_KEY].readiness()
    return web.json_response(state, status=200 if state["ready"] else 503)


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[GATEWAY_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
