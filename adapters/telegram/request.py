"""python-telegram-bot's HTTP transport on aiohttp rather than its default, httpx.

Why: every Bot API call (typing, draft, message, edit, getUpdates) goes through it, and on
httpx/httpcore/anyio one call cost about 0.7 ms of CPU one at a time and 1.0-1.3 ms at 32 at once
(httpcore checks every idle pooled connection on each request and on each response's close, a
`getpeername` and a `poll` apiece); on aiohttp 0.25-0.4 ms (measured with `Bot.send_message` and
`send_chat_action` against the fake Bot API in another process). A private-chat reply makes three
calls or more, so that was the dearest part of a Telegram message after the model run.

`BaseRequest` is python-telegram-bot's own extension point: the `Bot` builds and parses every
call as before; this only moves the bytes. What HTTPXRequest did and this keeps: the same trust
store (`httpx.create_ssl_context`: certifi, or SSL_CERT_FILE / SSL_CERT_DIR), the proxy the
environment names (HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, unless NO_PROXY covers the host; no
~/.netrc), the parameters as a url-encoded form (multipart when a file goes along), no redirects
followed, a bounded pool, a timeout raised as `TimedOut` and any other transport failure as
`NetworkError`, and no logged traceback for an answer that is not JSON.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request
from typing import Any

import aiohttp
import httpx
from yarl import URL
from telegram import TelegramObject
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import BaseRequest, RequestData


def trust_store() -> ssl.SSLContext:
    """The context HTTPXRequest verified the Bot API with: certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR."""
    return httpx.create_ssl_context()


class AiohttpRequest(BaseRequest):
    """One aiohttp session (its own connection pool) for one python-telegram-bot `Bot` role.

    Timeouts as HTTPXRequest reads them: `connect_timeout` for the socket's connect,
    `read_timeout` between reads of the answer, `pool_timeout` for waiting for a free
    connection (aiohttp bounds that wait and the connect together, so its `connect` is their
    sum). aiohttp has no write timeout: a request's body here is a few hundred bytes of form (the
    adapter uploads no files), which the kernel takes at once; a `write_timeout` a call passes is
    not enforced.
    """

    def __init__(self, *, connection_pool_size: int, read_timeout: float | None, connect_timeout: float | None,
                 pool_timeout: float | None = 1.0, trust: ssl.SSLContext | None = None) -> None:
        self._pool_size = connection_pool_size
        # `trust`: one binding's two transports share one context (`trust_store`); loading the CA bundle
        # is ~30 ms of CPU at start, spent once rather than once per transport.
        self._trust = trust
        self._read, self._connect, self._pool = read_timeout, connect_timeout, pool_timeout
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str | None, int | None], str | None] = {}  # by origin

    @property
    def read_timeout(self) -> float | None:
        return self._read

    async def initialize(self) -> None:
        # Built here, not in __init__: an aiohttp session belongs to the running loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, ssl=self._trust or trust_store())
            # Not trust_env: aiohttp would then look the proxy and ~/.netrc up again for every
            # call, in a worker thread (a third of a call's CPU); `_proxy` reads the proxy once.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        read = self._read if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = self._connect if isinstance(connect_timeout, DefaultValue) else connect_timeout
        pool = self._pool if isinstance(pool_timeout, DefaultValue) else pool_timeout
        waiting = None if connect is None or pool is None else connect + pool
        timeout = aiohttp.ClientTimeout(total=None, connect=waiting, sock_connect=connect, sock_read=read)
        body, content_type = _body(request_data)
        headers = {"User-Agent": self.USER_AGENT}
        if content_type is not None:
            headers["Content-Type"] = content_type
        target = URL(url)
        try:
            async with session.request(method, target, data=body, headers=headers, proxy=self._proxy(target),
                                       timeout=timeout, allow_redirects=False) as response:
                return response.status, await response.read()
        # Not chained, and the URL taken out: it holds the bot's token, and aiohttp names it in some
        # errors ("Connection timeout to host <url>"), where no log filter would see it in a traceback.
        except asyncio.TimeoutError as e:  # aiohttp's own timeouts are TimeoutErrors too
            raise TimedOut(f"Timed out (aiohttp.{type(e).__name__})") from None
        except aiohttp.ClientError as e:
            raise NetworkError(f"aiohttp.{type(e).__name__}: {_without_url(str(e), url, target)}") from None

    def _proxy(self, url: URL) -> str | None:
        """The proxy the environment names for this origin, read once (as httpx read it at start)."""
        origin = (url.scheme, url.host, url.port)
        if origin not in self._proxies:
            bypass = url.host is not None and urllib.request.proxy_bypass_environment(url.host)
            proxies = urllib.request.getproxies_environment()
            self._proxies[origin] = None if bypass else proxies.get(url.scheme) or proxies.get("all")
        return self._proxies[origin]

    @staticmethod
    def parse_json_payload(payload: bytes) -> Any:
        """Without python-telegram-bot's logged traceback for an answer that is not JSON.

        A proxy in front of the Bot API answers 502 with an HTML page now and then; the poll
        loop logs that once as a warning and retries. One plain line is what an operator should see.
        """
        try:
            return json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            raise TelegramError("Invalid server response") from None


class JsonCall(RequestData):  # type: ignore[misc]  # PTB marks it final; only `do_request` here reads it
    """A call's parameters as one JSON body, which the Bot API takes for any method without a file.

    What `TelegramBot.call` (the texts, edits, drafts and typing of every reply) sends instead of
    PTB's form: `RequestData` turns each parameter into a `RequestParameter`, JSON-dumps it on its
    own, and url-encodes the lot, about 150 of a call's ~550 function calls. PTB's `post` still makes
    the call (its answer read, its refusals raised as `BadRequest`, `RetryAfter`, ...)."""

    __slots__ = ("body",)

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__()
        self.body = json.dumps(params, default=_jsonable).encode("ascii")


def _jsonable(value: object) -> Any:
    """A parameter json cannot dump itself: a markup or reply object, as PTB's form would carry it."""
    if isinstance(value, TelegramObject):
        return value.to_dict()
    raise TypeError(f"{type(value).__name__} is no Bot API parameter")


def _without_url(text: str, url: str, target: URL) -> str:
    """The text with the call's URL (the token is in its path) shown as its method alone."""
    method = target.name or "?"
    return text.replace(url, method).replace(str(target), method)


def _body(request_data: RequestData | None) -> tuple[bytes | aiohttp.FormData | None, str | None]:
    """The call's parameters as a form, as HTTPXRequest sends them: url-encoded, or multipart with
    files; and the content type to say so (multipart: aiohttp's, with its boundary). The url-encoded
    body is built here: aiohttp's own form for a dict makes a multipart writer (a uuid4) first."""
    if request_data is None:
        return None, None
    if isinstance(request_data, JsonCall):
        return request_data.body, "application/json"
    files = request_data.multipart_data
    if not files:
        return request_data.url_encoded_parameters().encode("ascii"), "application/x-www-form-urlencoded"
    fields = request_data.json_parameters
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in files.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form, None
