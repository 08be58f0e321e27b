"""Who an HTTP API request acts as: the owner of the token it carries.

Each token is one principal (`http.api_tokens`: a person id or a platform account, and a name);
the plain `http.api_token`, and no token at all on the loopback default, act as the web binding's
local person. The approval service asks a principal the same question as a click on the card's own
platform (`gateway.approvals.service.Approvals.decide_for`), so no token is a wildcard.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from bindings.models import HttpConfig
from gateway.approvals.principal import Principal

LOCAL = Principal()
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


class ApiTokens:
    """The configured tokens, resolved once; `match` compares in constant time against every one."""

    def __init__(self, http: HttpConfig) -> None:
        table: list[tuple[bytes, Principal]] = []
        if http.api_token is not None:
            table.append((http.api_token.resolve().reveal().encode(), LOCAL))
        for entry in http.api_tokens:
            table.append((entry.token.resolve().reveal().encode(), Principal(entry.person, entry.name)))
        self._table = table

    @property
    def required(self) -> bool:
        return bool(self._table)

    def seed(self) -> bytes:
        """Key material every replica with the same tokens derives the same keys from."""
        return b"\0".join(token for token, _ in self._table)

    def match(self, offered: str) -> Principal | None:
        given = offered.encode("utf-8", "surrogatepass")
        found = None
        for token, principal in self._table:  # no early exit: the time says nothing about which one matched
            if hmac.compare_digest(given, token) and found is None:
                found = principal
        return found


def principal_of(request: web.Request) -> Principal:
    """Who this API request acts as (the local person when no token is configured)."""
    return request.get(PRINCIPAL, LOCAL)
