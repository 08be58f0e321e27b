"""Who may use the API: an API token in the Authorization header, and stream tokens.

Each configured token (`http.api_token`, `http.api_tokens`) stands for a principal
(`gateway.http.principals`); the request carries it on (`PRINCIPAL`) for the routes that act as
someone (a decision).

The API token is read from `Authorization: Bearer <token>` only, never from a URL (a URL ends
up in proxy logs, browser history and Referer headers). The one route a browser cannot send a
header to is the event stream (EventSource takes a URL and nothing else), so an authenticated
call mints a stream token for it: `POST /api/v1/stream-tokens {"conversation_id": ID}` answers
`{token, expires_at}`, good for STREAM_TOKEN_SECONDS, for opening that conversation's event
stream and nothing else (`?stream_token=`). It is an HMAC under a key derived from the API
token, so every replica that shares the token accepts it and nothing has to be stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from aiohttp import web

from gateway.clock import Clock
from gateway.approvals.principal import Principal
from gateway.http.principals import PRINCIPAL, ApiTokens

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROTECTED_PREFIXES = ("/api/",)
STREAM_TOKEN_SECONDS = 120  # long enough to open (and reopen) a stream; an open stream stays open
STREAM_TOKENS_PATH = "/api/v1/stream-tokens"


class Access:
    """The API token check and the stream tokens, for one gateway's tokens (none: the API is open)."""

    def __init__(self, tokens: ApiTokens, clock: Clock, stream_route: str) -> None:
        self._tokens = tokens
        # A key of its own, so a stream token can never be turned back into an API token.
        seed = tokens.seed() if tokens.required else secrets.token_bytes(32)
        self._stream_key = hmac.new(seed, b"agent-gateway stream token v1", hashlib.sha256).digest()
        self._clock, self._stream_route = clock, stream_route

    @property
    def open(self) -> bool:
        return not self._tokens.required

    def has_token(self, request: web.Request) -> bool:
        """Whether the request carries an API token in its Authorization header."""
        if self.open:
            return True
        return self._principal(request) is not None

    def _principal(self, request: web.Request) -> Principal | None:
        scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
        return self._tokens.match(offered.strip()) if scheme.lower() == "bearer" else None

    def mint(self, conversation_id: str) -> tuple[str, datetime]:
        expires = int(self._clock.now().timestamp()) + STREAM_TOKEN_SECONDS
        return f"{expires:x}.{self._mac(conversation_id, expires)}", datetime.fromtimestamp(expires, UTC)

    def stream_token_valid(self, token: str, conversation_id: str) -> bool:
        head, _, mac = token.partition(".")
        try:
            expires = int(head, 16)
        except ValueError:
            return False
        return (expires > self._clock.now().timestamp()
                and hmac.compare_digest(mac.encode(), self._mac(conversation_id, expires).encode()))

    def _mac(self, conversation_id: str, expires: int) -> str:
        digest = hmac.new(self._stream_key, f"events|{conversation_id}|{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:18]).decode()

    def _stream_request_allowed(self, request: web.Request) -> bool:
        route = request.match_info.route.resource
        token = request.query.get("stream_token")
        return (token is not None and request.method == "GET" and route is not None
                and route.canonical == self._stream_route
                and self.stream_token_valid(token, request.match_info.get("id", "")))

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        @web.middleware
        async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not self.open and request.path.startswith(PROTECTED_PREFIXES):
                principal = self._principal(request)
                if principal is None and not self._stream_request_allowed(request):
                    return web.json_response(
                        {"error": "unauthorized", "message": "send the API token as 'Authorization: Bearer <token>' "
                         "(the event stream: a ?stream_token= from POST /api/v1/stream-tokens)"},
                        status=401,
                    )
                if principal is not None:
                    request[PRINCIPAL] = principal  # who the request acts as (a decision is theirs)
            return await handler(request)

        return authenticate

    def routes(self) -> list[web.AbstractRouteDef]:
        return [web.post(STREAM_TOKENS_PATH, self._mint)]

    async def _mint(self, request: web.Request) -> web.Response:
        """`{"conversation_id": ID}` → a token for that conversation's event stream (behind the API token)."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        conversation_id = body.get("conversation_id") if isinstance(body, dict) else None
        if not isinstance(conversation_id, str) or not 0 < len(conversation_id) <= 64:
            return web.json_response({"error": "bad_request", "message": 'send {"conversation_id": ID}'}, status=400)
        token, expires = self.mint(conversation_id)
        return web.json_response({"token": token, "expires_at": expires.isoformat()}, status=201)
