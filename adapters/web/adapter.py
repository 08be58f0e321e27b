"""The web chat: the embedded default surface and the HTTP API, served by the daemon itself.

It is a one-to-one surface (one local person by default), so it behaves like a DM. Replies
reach the browser as server-sent events; the page and its script are static files with no
build step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.adapter_registry import AdapterContext
from bindings.models import BindingSpec
from gateway import memory
from gateway.clock import new_id
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.store import repo
from gateway.surface import (
    AdapterHealth,
    ApprovalCard,
    ChannelDirectory,
    Decision,
    PlatformLimits,
    ReplyTarget,
)

if TYPE_CHECKING:
    from gateway.daemon import Gateway

STATIC = Path(__file__).parent / "static"
MAX_TEXT = 32_000
WORKSPACE = "local"
KEEPALIVE = 15.0


class WebAdapter:
    platform = "web"
    # The browser renders Markdown itself and can take every delta: pace lightly, never split.
    limits = PlatformLimits(max_message_chars=1_000_000, min_edit_interval=0.05, supports_edit=True)

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        self.binding = binding
        self.binding_id = binding.id
        self.person = (binding.web.person if binding.web else None) or "local"
        self._gateway: Gateway | None = None
        self._shown: dict[str, str] = {}  # message id -> text the browser has

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self, dispatcher: Any) -> None:
        self._gateway = dispatcher

    async def stop(self) -> None:
        self._gateway = None

    def health(self) -> AdapterHealth:
        return AdapterHealth(connected=True, detail="serving")

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise web.HTTPServiceUnavailable(text="the gateway is not running")
        return self._gateway

    # --- outbound: everything becomes an event on the conversation's stream ---------------

    def render(self, markdown: str) -> str:
        return markdown

    def _publish(self, target: ReplyTarget, event: dict[str, Any]) -> None:
        if self._gateway is not None:
            self._gateway.events.publish(target.channel, event)

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

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        self._publish(target, {"type": "card", "card": card_json(card)})
        return card.card_id

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        self._publish(target, {"type": "card", "card": card_json(card)})

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        self._publish(target, {"type": "notice", "text": text})

    def directory(self) -> ChannelDirectory | None:
        return None  # a web chat has no channel to look up

    def forget(self, message_ids: Sequence[str]) -> None:
        for message_id in message_ids:
            self._shown.pop(message_id, None)

    # --- HTTP ---------------------------------------------------------------------------

    def http_routes(self) -> Sequence[web.AbstractRouteDef]:
        return [
            web.get("/", self._index),
            web.static("/static", STATIC),
            web.post("/api/v1/conversations", self._create_conversation),
            web.get("/api/v1/conversations/{id}/messages", self._list_messages),
            web.post("/api/v1/conversations/{id}/messages", self._post_message),
            web.get("/api/v1/conversations/{id}/events", self._events),
            web.post("/api/v1/conversations/{id}/modes", self._set_modes),
            web.post("/api/v1/approvals/{id}", self._decide),
            web.get("/api/v1/me/memory", self._my_memory),
            web.post("/api/v1/me/memory", self._change_my_memory),
        ]

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    def _key(self, conversation_id: str) -> str:
        return f"web:{WORKSPACE}:{conversation_id}"

    async def _conversation(self, request: web.Request) -> repo.ConversationRef:
        conversation_id = request.match_info["id"]
        conv = await self.gateway.store.conversation(conversation_id)
        if conv is None or conv.binding_id != self.binding_id:
            raise web.HTTPNotFound(
                text=json.dumps({"error": "not_found", "message": f"no conversation {conversation_id!r}"}),
                content_type="application/json",
            )
        return conv

    async def _create_conversation(self, request: web.Request) -> web.Response:
        conversation_id = new_id()
        await self.gateway.store.create_conversation(
            repo.ConversationRef(
                id=conversation_id,
                key=self._key(conversation_id),
                platform="web",
                binding_id=self.binding_id,
                workspace=WORKSPACE,
                channel=conversation_id,
                thread=None,
                chat_kind=ChatKind.DM.value,
            )
        )
        return web.json_response({"id": conversation_id}, status=201)

    async def _post_message(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        if not isinstance(body.get("text"), str):
            return _bad(400, "bad_request", "the body must be a JSON object with a string field 'text'")
        text: str = body["text"]
        if len(text) > MAX_TEXT:
            return _bad(413, "too_long", f"text is {len(text)} characters; the limit is {MAX_TEXT}")
        if not text.strip():
            return _bad(400, "empty", "text is empty")
        conv = await self._conversation(request)
        event_id = request.headers.get("Idempotency-Key") or new_id()
        message = InboundMessage(
            platform="web",
            binding_id=self.binding_id,
            workspace=WORKSPACE,
            channel=conv.channel,
            chat_kind=ChatKind.DM,
            sender=Sender(account_id=self.person, display_name=self.person),
            text=text,
            event_id=event_id,
            message_id=event_id,
        )
        result = await self.gateway.submit(message)
        if result.accepted:
            return web.json_response({"message_id": result.message_id, "run_id": result.run_id}, status=202)
        if result.duplicate:
            return _bad(409, "duplicate", "a message with this Idempotency-Key was already received")
        if result.reason == "command":  # answered by the gateway itself, on the event stream
            return web.json_response({"command": True}, status=200)
        if result.reason == "busy":
            return _bad(429, "busy", "this conversation has too many messages waiting; try again shortly")
        return _bad(403, "not_admitted", result.reason or "message not accepted")

    async def _decide(self, request: web.Request) -> web.Response:
        """An API client's decision: the same checks as a click, made as the local person."""
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            decision = Decision(body.get("decision"))
        except ValueError:
            return _bad(400, "bad_request", "decision must be one of: approve, deny, approve_all")
        outcome = await self.gateway.decide(
            request.match_info["id"], decision, Sender(self.person, self.person), binding_id=self.binding_id,
            surface="api",
        )
        status = 200 if outcome.accepted else (404 if "no longer exists" in outcome.message else 409)
        if not outcome.accepted and outcome.message.startswith("Only "):
            status = 403
        return web.json_response({"accepted": outcome.accepted, "message": outcome.message}, status=status)

    # --- the local person's own memory ----------------------------------------------------

    async def _me(self) -> str:
        identity = await self.gateway.store.identify("web", WORKSPACE, self.person, self.person)
        return identity.person_id

    async def _my_memory(self, request: web.Request) -> web.Response:
        """What agents wrote about the web's local person: which agent, which note, when; with the text."""
        notes = await memory.NoteStore(self.gateway.store).about(await self._me())
        return web.json_response({"notes": [_note_json(n) for n in notes]})

    async def _change_my_memory(self, request: web.Request) -> web.Response:
        """{"action": "stop" | "use" | "delete", "agent", "name"} or {"action": "erase"}."""
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        action, agent, name = body.get("action"), body.get("agent"), body.get("name")
        notes = memory.NoteStore(self.gateway.store)
        person = await self._me()
        if action == "erase":
            return web.json_response({"erased": await notes.erase(person)})
        if action not in ("stop", "use", "delete") or not isinstance(agent, str) or not isinstance(name, str):
            return _bad(400, "bad_request", 'send {"action": "stop"|"use"|"delete", "agent": ID, "name": NOTE} '
                                            'or {"action": "erase"}')
        if action == "delete":
            if not await notes.forget(person, agent, name):
                return _bad(404, "not_found", f"no note {agent}/{name} about you")
            return web.json_response({"deleted": True})
        note = await notes.set_suppressed(person, agent, name, action == "stop")
        if note is None:
            return _bad(404, "not_found", f"no note {agent}/{name} about you")
        return web.json_response(_note_json(note))

    async def _set_modes(self, request: web.Request) -> web.Response:
        conv = await self._conversation(request)
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        approvals = self.gateway.approvals
        if approvals is None:
            return _bad(503, "unavailable", "approvals are not available")
        values = {k: body[k] for k in ("approve_all", "ask_every_tool") if isinstance(body.get(k), bool)}
        if not values:
            return _bad(400, "bad_request", "send {\"approve_all\": true|false} or {\"ask_every_tool\": true|false}")
        modes = await approvals.set_mode(conv.id, who=self.person, **values)
        return web.json_response({"approve_all": modes.approve_all, "ask_every_tool": modes.ask_every_tool})

    async def _list_messages(self, request: web.Request) -> web.Response:
        conv = await self._conversation(request)
        store = self.gateway.store
        turns = [
            {
                "id": m.id,
                "role": m.role,
                "text": m.text,
                "status": m.status,
                "run_id": m.run_id,
                "time": m.created_at.isoformat(),
            }
            for m in await store.messages(conv.id)
        ]
        # A reply still streaming is not a message yet; show what has been delivered so far.
        answered = {t["run_id"] for t in turns if t["role"] == "assistant"}
        for run in await store.runs_in([repo.RUNNING]):
            if run.conversation_id == conv.id and run.id not in answered:
                live = self.gateway.runner.live_text(run.id)
                parts = [live] if live else [d.text for d in await store.deliveries(run.id)]
                if parts:
                    turns.append(
                        {
                            "id": None,
                            "role": "assistant",
                            "text": "\n\n".join(parts),
                            "status": "streaming",
                            "run_id": run.id,
                            "time": (run.started_at or run.created_at).isoformat(),
                        }
                    )
        extra = getattr(self.gateway, "conversation_extras", None)
        payload: dict[str, Any] = {"conversation_id": conv.id, "messages": turns}
        if extra is not None:
            payload.update(await extra(conv.id))
        return web.json_response(payload)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        conv = await self._conversation(request)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        async with self.gateway.events.listen(conv.id) as queue:
            await response.write(b": connected\n\n")
            idle = 0.0
            while True:
                # Wake every second to notice a browser that went away, not only at the keepalive.
                try:
                    # asyncio.timeout, unlike wait_for, wakes this task directly (no inner task),
                    # so an event goes out on the loop's next turn.
                    async with asyncio.timeout(1.0):
                        event = await queue.get()
                except TimeoutError:
                    event = None
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
                try:
                    if event is None:
                        idle += 1.0
                        if idle >= KEEPALIVE:
                            idle = 0.0
                            await response.write(b": keepalive\n\n")
                    else:
                        idle = 0.0
                        data = json.dumps(event, separators=(",", ":"))
                        await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
                except (ConnectionResetError, RuntimeError):
                    break
        with contextlib.suppress(Exception):
            await response.write_eof()
        return response


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _bad(400, "bad_json", "the body must be JSON")
    if not isinstance(body, dict):
        return _bad(400, "bad_request", "the body must be a JSON object")
    return body


def _bad(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


def _note_json(note: memory.Note) -> dict[str, Any]:
    return {
        "agent": note.agent_id,
        "name": note.name,
        "content": note.content,
        "in_use": not note.suppressed,
        "created_at": note.created_at.isoformat(),
        "updated_at": note.updated_at.isoformat(),
    }


def card_json(card: ApprovalCard) -> dict[str, Any]:
    return {
        "card_id": card.card_id,
        "run_id": card.run_id,
        "deciders": card.deciders,
        "note": card.note,
        "pending": card.pending,
        "items": [
            {
                "approval_id": i.approval_id,
                "tool": i.tool_name,
                "capability": i.capability,
                "arguments": i.arguments,
                "state": i.state.value,
                "decided_by": i.decided_by,
            }
            for i in card.items
        ],
    }


__all__ = ["WebAdapter", "card_json", "Decision"]
