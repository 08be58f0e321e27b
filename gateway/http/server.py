"""The daemon's one aiohttp application: health, metrics, the API, and the routes adapters serve.

Every request passes the same middlewares, outermost first:
1. `guard`: a Host that is not ours is 421; a state-changing API request must be JSON from our
   own origin (`gateway.http.guard`);
2. `access`: the API token in the Authorization header, or a stream token on the event stream
   (`gateway.http.access`);
3. `_busy_middleware`: a database that does not answer in time is 503 with Retry-After, never a 500;
4. `slow_clients`: a body that stops arriving is 408 and its connection closed.
Platform webhooks check their own signatures in their adapters.

Listening beyond loopback, `/readyz` and `/metrics` keep their details (MCP commands and URLs,
bindings, databases) for a caller with the API token; anyone else learns only ready or not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.http import api, guard, openapi, slow_clients
from gateway.http.access import Access
from gateway.http.principals import ApiTokens
from gateway.store.availability import StoreUnavailable

if TYPE_CHECKING:
    from gateway.daemon import Gateway
    from gateway.outbound.adapter import Adapter

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey("gateway")
ACCESS_KEY: web.AppKey[Access] = web.AppKey("access")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
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
    http_config = gateway.config.gateway.http
    access = Access(ApiTokens(http_config), gateway.clock, api.EVENTS_ROUTE)
    rules = guard.SurfaceRules.of(http_config, gateway.listen, upload_routes={api.MESSAGES_ROUTE})
    app = web.Application(
        middlewares=[guard.middleware(rules), access.middleware(), _busy_middleware,
                     slow_clients.middleware(http_config.body_timeout_seconds)],
        client_max_size=2 * 1024**2,
    )
    app[GATEWAY_KEY] = gateway
    app[ACCESS_KEY] = access
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/api/v1/admin/reload", _reload)
    app.router.add_routes(api.routes(gateway))
    app.router.add_routes(access.routes())
    app.router.add_routes(openapi.routes())
    app.router.add_routes(gateway.extra_routes)  # before the catch-all
    app.router.add_route("*", "/{tail:.*}", gateway.routes.handle)
    gateway.routes.rebuild(gateway.adapters.values())
    return app


async def _reload(request: web.Request) -> web.Response:
    """`agent-gateway reload` without a signal: the same as SIGHUP (behind the API token)."""
    ok, problems = await request.app[GATEWAY_KEY].reload_from_disk()
    return web.json_response({"reloaded": ok, "problems": problems}, status=200 if ok else 422)


def _shows_details(request: web.Request) -> bool:
    """On loopback, everyone who can connect is on this machine; beyond it, only a token holder."""
    gateway = request.app[GATEWAY_KEY]
    return guard.is_loopback(gateway.listen.rpartition(":")[0]) or request.app[ACCESS_KEY].has_token(request)


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
    status = 200 if state["ready"] else 503
    if not _shows_details(request):
        return web.json_response({"ready": state["ready"]}, status=status)
    return web.json_response(state, status=status)


async def _metrics(request: web.Request) -> web.Response:
    if not _shows_details(request):
        return web.json_response({"error": "unauthorized", "message": "beyond loopback, /metrics needs "
                                  "'Authorization: Bearer <http.api_token>'"}, status=401)
    body = request.app[GATEWAY_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
