"""The web chat: the embedded default surface, served by the daemon itself.

It is a one-to-one surface (one local person by default), so it behaves like a DM. This
adapter serves the page and publishes what the core posts onto the conversation's event
stream; the HTTP API the page talks to (`/api/v1`, the stream itself) is the core's
(`gateway/http/api.py`). The page and its script are static files with no build step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from bindings.models import BindingSpec
from gateway.adapter_registry import AdapterContext
from gateway.http.api import card_json, memory_card_json
from gateway.inbound.memory_card import MemoryCard
from gateway.clock import new_id
from gateway.outbound.adapter import (
    AdapterHealth,
    ApprovalCard,
    Dispatcher,
    PlatformLimits,
    PostsMemoryCards,
    PostsReportCards,
    ReplyTarget,
    ShowsStatus,
    ShowsStopControl,
    Trouble,
)

STATIC = Path(__file__).parent / "static"


class WebAdapter(PostsReportCards, PostsMemoryCards, ShowsStatus, ShowsStopControl):
    """The page streams every delta itself (no native stream needed), has no channel to look up, and
    takes files through the API's uploads, not through the adapter."""

    platform = "web"
    # The browser renders Markdown itself and can take every delta: pace lightly, never split.
    limits = PlatformLimits(max_message_chars=1_000_000, min_edit_interval=0.05, supports_edit=True)

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        self.binding = binding
        self.binding_id = binding.id
        self._dispatcher: Dispatcher | None = None
        self._shown: dict[str, str] = {}  # message id -> text the browser has

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def stop(self) -> None:
        self._dispatcher = None

    async def doctor(self, online: bool) -> list[Trouble]:
        """The web chat has no credentials of its own (the HTTP server's api_token is the gateway's)."""
        return []

    def health(self) -> AdapterHealth:
        return AdapterHealth(connected=True, detail="serving")

    # --- outbound: everything becomes an event on the conversation's stream ---------------

    def render(self, markdown: str) -> str:
        return markdown

    def _publish(self, target: ReplyTarget, event: dict[str, Any]) -> None:
        if self._dispatcher is not None:
            self._dispatcher.publish(target.channel, event)

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        message_id = new_id()
        self._shown[message_id] = text
        self._publish(target, {"type": "delta", "message_id": message_id, "text": text, "delta": text})
        return message_id

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        before = self._shown.get(message_id, "")
        self._shown[message_id] = text
        delta = text[len(before) :] if text.startswith(before) else None
        event: dict[str, Any] = {"type": "delta", "message_id": message_id, "text": text}
        if delta is not None:
            event["delta"] = delta
        self._publish(target, event)

    async def show_typing(self, target: ReplyTarget) -> None:
        self._publish(target, {"type": "typing"})

    async def show_status(self, target: ReplyTarget, text: str) -> None:
        """The page's status line under the conversation ("tracker: 40 %"), cleared when the run ends."""
        self._publish(target, {"type": "status", "text": text})

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        self._publish(target, {"type": "card", "card": card_json(card)})
        return card.card_id

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        self._publish(target, {"type": "card", "card": card_json(card)})

    async def post_report(self, target: ReplyTarget, text: str) -> str:
        """A background run's report: the page shows it as a report card, never as someone's message."""
        message_id = new_id()
        self._publish(target, {"type": "report", "message_id": message_id, "text": text})
        return message_id

    async def post_memory_card(self, target: ReplyTarget, card: MemoryCard) -> str | None:
        """The page draws the card with buttons; a click's answer (`POST /api/v1/memory/click`) redraws it."""
        card_id = new_id()
        self._publish(target, {"type": "memory_card", "id": card_id, "card": memory_card_json(card)})
        return card_id

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        """The page shows a Stop button under the streaming reply, and removes it when the reply is final."""
        self._publish(target, {"type": "stop_control", "message_id": message_id, "run_id": run_id, "present": present})

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        self._publish(target, {"type": "notice", "text": text})

    def forget(self, message_ids: Sequence[str]) -> None:
        for message_id in message_ids:
            self._shown.pop(message_id, None)

    # --- HTTP ---------------------------------------------------------------------------

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        return [web.get("/", self._index), web.static("/static", STATIC)]

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


__all__ = ["WebAdapter"]
