"""The web surface serves its own page and API clients, nothing else: one middleware says so.

A browser sends requests to 127.0.0.1 for any page the person visits. Two attacks follow, and
neither needs a token to be missing (a token in localStorage is not sent by another page, but
the default web chat has none):
- DNS rebinding: a page whose name now resolves to 127.0.0.1 is same-origin with us under its
  own name, so it can read answers. The Host header still names it: every route refuses a Host
  that is not ours (421), before anything runs.
- CSRF: a page on another site can send a "simple" POST (text/plain, a form, no body) with no
  preflight. A state-changing API route therefore takes only `application/json` (the upload
  route also `multipart/form-data`), refuses an `Origin` that is not the gateway's own (or one
  in `http.allowed_origins`) and refuses `Sec-Fetch-Site: cross-site`. A JSON body from another
  origin needs a CORS preflight, which this server never grants.

Platform webhooks (Slack events, the Telegram webhook, Mattermost actions) arrive through
`http.public_url`, whose host is allowed; they are not under /api/ and keep their own signatures.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from bindings.models import HttpConfig, is_loopback  # is_loopback: the listen rule's, one place

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
API_PREFIX = "/api/"
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
log = logging.getLogger("gateway.http.guard")


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in; None for what is no http(s) origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _host_name(host_header: str) -> str | None:
    """The name in a Host header, lower-cased, without port or brackets; None when malformed."""
    try:
        parts = urlsplit(f"//{host_header}")
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path:
        return None
    return parts.hostname


@dataclass(frozen=True)
class SurfaceRules:
    """Which Host names and Origins this gateway answers, from its http config and listen address."""

    hosts: frozenset[str]
    origins: frozenset[tuple[str, str, int]]
    upload_routes: frozenset[str]  # canonical paths that also take multipart/form-data

    @classmethod
    def of(cls, config: HttpConfig, listen: str, upload_routes: Collection[str]) -> SurfaceRules:
        host = listen.rpartition(":")[0].strip("[]").lower()
        hosts = {"localhost", *config.allowed_hosts}
        if host not in WILDCARDS:
            hosts.add(host)
        if is_loopback(host):
            hosts |= {"127.0.0.1", "::1"}
        origins = {o for o in map(_origin, config.allowed_origins) if o is not None}
        if config.public_url and (public := _origin(config.public_url)) is not None:
            hosts.add(public[1])
            origins.add(public)
        return cls(frozenset(hosts), frozenset(origins), frozenset(upload_routes))

    def host_allowed(self, request: web.Request) -> bool:
        name = _host_name(request.host)
        if name is None:
            return False
        if name in self.hosts:
            return True
        # Listening on a wildcard: the address the client reached us at is ours too (a DNS name
        # that rebinds to it would be named in the Host header instead).
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        return bool(sockname) and name == str(sockname[0]).lower()

    def origin_allowed(self, request: web.Request, origin: str) -> bool:
        theirs = _origin(origin)
        if theirs is None:  # "null" (a sandboxed frame, a file: page) or garbage
            return False
        return theirs in self.origins or theirs == _origin(f"{request.scheme}://{request.host}")

    def refusal(self, request: web.Request) -> web.Response | None:
        """The answer to a request this surface does not serve; None to let it through."""
        if not self.host_allowed(request):
            log.info("refused Host %r on %s %s", request.host[:100], request.method, request.path[:200])
            return _refuse(421, "misdirected", "this server does not answer to that host name; "
                                               "add it to http.allowed_hosts if it is yours")
        if request.method in SAFE_METHODS or not request.path.startswith(API_PREFIX):
            return None
        if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            return _refuse(403, "cross_site", "requests from another site's page are refused")
        origin = request.headers.get("Origin")
        if origin is not None and not self.origin_allowed(request, origin):
            log.info("refused Origin %r on %s %s", origin[:100], request.method, request.path[:200])
            return _refuse(403, "foreign_origin", "requests from another origin are refused; "
                                                  "add it to http.allowed_origins if it is yours")
        route = request.match_info.route.resource
        canonical = route.canonical if route is not None else ""
        allowed = ("application/json", "multipart/form-data") if canonical in self.upload_routes else ("application/json",)
        if request.content_type not in allowed:
            return _refuse(415, "unsupported_media_type", f"send the body as {' or '.join(allowed)}"
                                                          " (with that Content-Type header), even when it is empty")
        return None


def middleware(rules: SurfaceRules) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = rules.refusal(request)
        return refused if refused is not None else await handler(request)

    return guard


def _refuse(status: int, code: str, message: str) -> web.Response:
    # Connection: close: a refused client gets nothing more out of this connection either.
    return web.Response(status=status, text=json.dumps({"error": code, "message": message}),
                        content_type="application/json", headers={"Connection": "close"})
