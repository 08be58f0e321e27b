"""A way to build and serve a Mattermost adapter in a test (the stand-in for the core is
`tests.support.dispatcher.FakeDispatcher`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from gateway.adapter_registry import AdapterContext
from gateway.clock import Clock
from gateway.reconnect import Backoff
from adapters.mattermost.adapter import MattermostAdapter
from bindings.models import BindingSpec, GatewayConfig, HttpConfig
from gateway.messages import InboundMessage, reply_thread
from gateway.outbound.adapter import ReplyTarget


def make_adapter(url: str, *, public_url: str | None = None, binding_id: str = "mm", token_env: str = "MM_TOKEN",
                 clock: Clock | None = None, **binding: Any) -> MattermostAdapter:
    """`clock`: the gateway's (the fake server's, when the test gave it one: one time for both)."""
    section = {"url": url, "token": f"env:{token_env}", **binding.pop("mattermost", {})}
    spec = BindingSpec(id=binding_id, platform="mattermost", agent="demo", mattermost=section, **binding)
    adapter = MattermostAdapter(spec, AdapterContext(gateway=GatewayConfig(http=HttpConfig(public_url=public_url)),
                                                     clock=clock or Clock()))
    adapter.backoff = Backoff(base=0.05, cap=0.2)  # reconnect quickly in tests
    return adapter


def free_socket() -> socket.socket:
    """A loopback socket bound to an ephemeral port, so a URL can be known before the server runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serve_routes(adapter: MattermostAdapter, sock: socket.socket) -> AsyncIterator[None]:
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield
    finally:
        await runner.cleanup()


def target_for(msg: InboundMessage) -> ReplyTarget:
    """Where the core would send the answer to `msg`."""
    return ReplyTarget(platform=msg.platform, binding_id=msg.binding_id, workspace=msg.workspace, channel=msg.channel,
                       thread=reply_thread(msg), chat_kind=msg.chat_kind)
