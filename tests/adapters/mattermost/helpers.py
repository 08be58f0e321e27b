"""A recording stand-in for the core, and a way to build and serve an adapter in a test.

The recorder only records what the adapter hands it and answers the way the Dispatcher
protocol says; tests through the real daemon check the core's side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.adapter_registry import AdapterContext
from gateway.reconnect import Backoff
from adapters.mattermost.adapter import MattermostAdapter
from bindings.models import BindingSpec, GatewayConfig, HttpConfig
from gateway.messages import InboundMessage, Sender, reply_thread
from gateway.outbound.adapter import Decision, DecisionOutcome, ReplyTarget, SubmitResult


@dataclasses.dataclass
class DecideCall:
    approval_id: str
    decision: Decision
    decider: Sender
    binding_id: str
    surface: str


class RecordingDispatcher:
    def __init__(self, deciders: set[str] | None = None) -> None:
        self.messages: list[InboundMessage] = []
        self.decisions: list[DecideCall] = []
        self.state: dict[tuple[str, str], str] = {}
        self.deciders = deciders  # None: anyone may decide
        self.decided: dict[str, str] = {}
        self.on_accepted: Callable[[DecideCall], Awaitable[None]] | None = None
        self._ledger: set[str] = set()

    async def submit(self, message: InboundMessage) -> SubmitResult:
        self.messages.append(message)
        duplicate = message.event_id in self._ledger
        self._ledger.add(message.event_id)
        return SubmitResult(accepted=not duplicate, duplicate=duplicate)

    async def decide(self, approval_id: str, decision: Decision, decider: Sender, *, binding_id: str,
                     surface: str) -> DecisionOutcome:
        call = DecideCall(approval_id, decision, decider, binding_id, surface)
        self.decisions.append(call)
        if self.deciders is not None and decider.account_id not in self.deciders:
            return DecisionOutcome(False, "Only alice can decide this.")
        if approval_id in self.decided:
            return DecisionOutcome(False, f"Already decided by {self.decided[approval_id]}.")
        self.decided[approval_id] = decider.display_name
        if self.on_accepted is not None:
            await self.on_accepted(call)
        return DecisionOutcome(True, "Recorded.")

    async def get_state(self, binding_id: str, key: str) -> str | None:
        return self.state.get((binding_id, key))

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        self.state[(binding_id, key)] = value

    def texts(self) -> list[str]:
        return [m.text for m in self.messages]


def make_adapter(url: str, *, public_url: str | None = None, binding_id: str = "mm", token_env: str = "MM_TOKEN",
                 **binding: Any) -> MattermostAdapter:
    section = {"url": url, "token": f"env:{token_env}", **binding.pop("mattermost", {})}
    spec = BindingSpec(id=binding_id, platform="mattermost", agent="demo", mattermost=section, **binding)
    adapter = MattermostAdapter(spec, AdapterContext(gateway=GatewayConfig(http=HttpConfig(public_url=public_url))))
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
