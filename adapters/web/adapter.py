"""The web chat: the embedded default surface, served by the daemon itself.

It is a one-to-one surface (one local person by default), so it behaves like a DM. This
adapter serves the page and publishes what the core posts onto the conversation's event
stream; the HTTP API the page talks to (`/api/v1`, the stream itself) is the core's
(`gateway/http/api.py`). The page and its script are static files with no build step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from bindings.models import BindingSpec
from gateway.adapter_registry import AdapterContext
from gateway.http.api import card_json, memory_card_json
from gateway.inbound.memory_card import MemoryCard
from gateway.clock import new_id, unguessable_id
from gateway.http import web_files
from gateway.outbound.adapter import (
    FileKind,
    FileLimits,
    OutboundFile,
    PlatformError,
    SendsFiles,
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


# The gateway keeps the web chat's files itself (in its store): a few megabytes each, ten a message.
WEB_FILE_LIMITS = FileLimits(max_bytes=dict.fromkeys(FileKind, 10 * 1024 * 1024), max_files=10,
                             max_caption_chars=4000)


class WebAdapter(PostsReportCards, PostsMemoryCards, ShowsStatus, ShowsStopControl, SendsFiles):
    """The page streams every delta itself (no native stream needed), has no channel to look up, and
    takes files through the API's uploads, not through the adapter."""

    platform = "web"
    # The browser renders Markdown itself and can take every delta: pace lightly, never split.
    limits = PlatformLimits(max_message_chars=1_000_000, min_edit_interval=0.05, supports_edit=True)
    file_limits = WEB_FILE_LIMITS

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        self.binding = binding
        self.binding_id = binding.id
        self._dispatcher: Dispatcher | None = None
        self._shown: dict[str, str] = {}  # message id -> text the browser has
        self._clock = context.clock

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

    async def upload(self, target: ReplyTarget, file: OutboundFile) -> str:
        """The bytes kept in the store under an unguessable id; not in the listing until shared."""
        dispatcher = self._require_dispatcher()
        file_id = unguessable_id()
        stored = web_files.StoredFile(target.channel, file.name, file.media_type, file.data)
        await dispatcher.set_state(self.binding_id, web_files.file_key(target.channel, file_id), stored.to_state())
        return file_id

    async def share(self, target: ReplyTarget, files: Sequence[tuple[OutboundFile, str]], caption: str) -> str:
        """An entry in the conversation's listing (an image shows, anything else is a download link),
        and an event so an open page shows it now."""
        dispatcher = self._require_dispatcher()
        share = web_files.Share(new_id(), self._clock.now().isoformat(), caption, [
            {"id": ref, "name": f.name, "media_type": f.media_type, "url": web_files.file_url(target.channel, ref)}
            for f, ref in files])
        key = web_files.index_key(target.channel)
        listed = web_files.shares(await dispatcher.get_state(self.binding_id, key))
        await dispatcher.set_state(self.binding_id, key, json.dumps([*listed, share.as_json()]))
        self._publish(target, {"type": "files", **share.as_json()})
        return share.id

    def _require_dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            raise PlatformError(f"web binding {self.binding_id} is not started")
        return self._dispatcher

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
