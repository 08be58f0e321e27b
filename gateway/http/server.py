"""The daemon's one aiohttp application: health, metrics, the API, and the routes adapters serve.

A database that does not answer in time is 503 with Retry-After on every route (one middleware,
`_busy_middleware`), never a 500.

The JSON API is guarded by `http.api_token` when one is set (a bearer token, or
`?access_token=` for EventSource, which cannot send headers). Platform webhooks check their
own signatures in their adapters instead.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.http import api
from gateway.store.availability import StoreUnavailable

if TYPE_CHECKING:
    from gateway.daemon import Gateway
    from gateway.outbound.adapter import Adapter

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROTECTED_PREFIXES = ("/api/",)
log = logging.getLogger("gateway.http.server")


class AdapterRoutes:
    """The routes adapters serve, swappable while the server runs.

    aiohttp freezes an application's router once it starts, but a reload may add, change or
    remove bindings (and so webhook routes). Adapter routes therefore live in a router of
    their own, rebuilt on reload and consulted by one catch-all route.
    """

    def __init__(self) -> None:
        self._router = web.UrlDispatcher()

    def rebuild(self, adapters: Iterable[Adapter]) -> None:
        router = web.UrlDispatcher()
        for adapter in adapters:
            router.add_routes(adapter.http_routes())
        self._router = router  # one assignment: a request sees the old table or the new one

    async def handle(self, request: web.Request) -> web.StreamResponse:
        match_info = await self._router.resolve(request)
        http_exception = match_info.http_exception
        if http_exception is not None:
            raise http_exception
        match_info.add_app(request.app)
        # What aiohttp's own dispatch does; match_info is cached (reify), so drop the catch-all's.
        request._match_info = match_info  # type: ignore[attr-defined]
        request._cache.pop("match_info", None)  # type: ignore[attr-defined]
        return await match_info.handler(request)


def build_app(gateway: Gateway) -> web.Application:
    app = web.Application(middlewares=[_auth_middleware(gateway), _busy_middleware], client_max_size=2 * 1024**2)
    app[GATEWAY_KEY] = gateway
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/api/v1/admin/reload", _reload)
    app.router.add_routes(api.routes(gateway))
    app.router.add_routes(gateway.extra_routes)  # before the catch-all
    app.router.add_route("*", "/{tail:.*}", gateway.routes.handle)
    gateway.routes.rebuild(gateway.adapters.values())
    return app


async def _reload(request: web.Request) -> web.Response:
    """`agent-gateway reload` without a signal: the same as SIGHUP (behind the API token)."""
    ok, problems = await request.app[GATEWAY_KEY].reload_from_disk()
    return web.json_response({"reloaded": ok, "problems": problems}, status=200 if ok else 422)


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


@web.middleware
async def _busy_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A database that did not answer within its bound is 503 + Retry-After on every route,
    wherever it is served; nothing was stored, so the client sends the same request again."""
    try:
        return await handler(request)
    except StoreUnavailable as e:
        log.warning("%s %s: 503, %s: %s", request.method, request.path, e.what, e)
        return web.json_response(
            {"error": "unavailable", "message": f"{e.what}; try again shortly",
             "retry_after": e.retry_after},
            status=503,
            headers={"Retry-After": e.retry_after_header},
        )


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    state = await request.app[GATEWAY_KEY].readiness()
    return web.json_response(state, status=200 if state["ready"] else 503)


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[GATEWAY_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
