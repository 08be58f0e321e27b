"""The HTTP API (`/api/v1`): conversations, messages, the event stream, decisions, modes, memory.

It belongs to the core: an API client and the web page are one local person talking to the
web binding, through the same inbound path, the same approval checks and the same stores as a
chat platform. A decision is made as the request's principal (`gateway.http.principals`: the
token's person, or that local person), through their own account on the card's platform.
`adapters/web/` only serves the page and publishes replies onto the event bus.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from bindings.models import BindingSpec

from gateway.clock import new_id
from gateway.inbound.commands import PRIVATE
from gateway.runs import memory
from gateway.store.conversation_search import ConversationSearch
from gateway.store.fulltext import QueryError
from gateway.store.models import Message
from gateway.runs.handoffs import answers_beside
from gateway.inbound.memory_card import MemoryButton, MemoryCard, MemoryClick
from gateway.messages import Attachment, ChatKind, CommandAnswer, InboundMessage, Sender
from gateway.store import repo
from gateway.store.notes import Note, NoteStore
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision
from gateway.inbound.uploads import UploadRefused, read_form
from gateway.http.principals import Principal, principal_of
from gateway.http import web_files

if TYPE_CHECKING:
    from gateway.daemon import Gateway

MAX_TEXT = 32_000
WORKSPACE = "local"
KEEPALIVE = 15.0
_SURROGATE = re.compile("[\ud800-\udfff]")


PAGE = 30  # conversations per page of the listing, by default
MAX_PAGE = 100
TITLE_MAX = 200
MESSAGES_ROUTE = "/api/v1/conversations/{id}/messages"  # the one route that also takes multipart uploads
EVENTS_ROUTE = "/api/v1/conversations/{id}/events"  # the one route a stream token opens


def routes(gateway: Gateway) -> list[web.AbstractRouteDef]:
    api = _Api(gateway)
    return [
        web.post("/api/v1/conversations", api.create_conversation),
        web.get("/api/v1/conversations", api.list_conversations),
        web.patch("/api/v1/conversations/{id}", api.rename_conversation),
        web.delete("/api/v1/conversations/{id}", api.delete_conversation),
        web.get(MESSAGES_ROUTE, api.list_messages),
        web.post(MESSAGES_ROUTE, api.post_message),
        web.get(EVENTS_ROUTE, api.events),
        web.get(web_files.FILE_ROUTE, api.get_file),
        web.post("/api/v1/conversations/{id}/modes", api.set_modes),
        web.get("/api/v1/approvals/{id}", api.approval),
        web.post("/api/v1/approvals/{id}", api.decide),
        web.post("/api/v1/runs/{id}/stop", api.stop_run),
        web.get("/api/v1/me/memory", api.my_memory),
        web.post("/api/v1/me/memory", api.change_my_memory),
        web.post("/api/v1/memory/click", api.memory_click),
    ]


def web_key(conversation_id: str) -> str:
    return f"web:{WORKSPACE}:{conversation_id}"


class _Api:
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    def _binding(self) -> BindingSpec:
        """The web binding API clients talk to (looked up per request: a reload may change it)."""
        for binding in self.gw.config.bindings.values():
            if binding.platform == "web" and binding.enabled and binding.id in self.gw.adapters:
                return binding
        raise _error(404, "no_web_binding", "no web binding is configured on this gateway")

    def _person(self, binding: BindingSpec) -> str:
        return (binding.web.person if binding.web else None) or "local"

    async def _conversation(self, request: web.Request, binding: BindingSpec) -> repo.ConversationRef:
        conversation_id = _path_id(request)
        conv = await self.gw.store.conversation(conversation_id)
        if conv is None or conv.binding_id != binding.id:
            raise _error(404, "not_found", f"no conversation {conversation_id!r}")
        return conv

    async def create_conversation(self, request: web.Request) -> web.Response:
        binding = self._binding()
        conversation_id = new_id()
        await self.gw.store.create_conversation(repo.ConversationRef(
            id=conversation_id, key=web_key(conversation_id), platform="web", binding_id=binding.id,
            workspace=WORKSPACE, channel=conversation_id, thread=None, chat_kind=ChatKind.DM.value,
        ))
        return web.json_response({"id": conversation_id}, status=201)

    async def post_message(self, request: web.Request) -> web.Response:
        """JSON `{"text": ...}`, or multipart/form-data with a `text` field and `file` fields (held
        in memory for the run only: `gateway.inbound.uploads`)."""
        binding = self._binding()
        files: list[tuple[str, str, bytes]] = []
        if request.content_type == "multipart/form-data":
            try:
                form = await read_form(request, self.gw.config.gateway.limits.attachment_max_bytes, MAX_TEXT,
                                       self.gw.uploads)
            except UploadRefused as e:
                return e.response()
            text, files = form.text, form.files
        else:
            body = await _json_object(request)
            if not isinstance(body.get("text"), str):
                return _bad(400, "bad_request", "the body must be a JSON object with a string field 'text'")
            text = body["text"]
        if len(text) > MAX_TEXT:
            return _bad(413, "too_long", f"text is {len(text)} characters; the limit is {MAX_TEXT}")
        if not text.strip() and not files:
            return _bad(400, "empty", "text is empty")
        if _SURROGATE.search(text):
            return _bad(400, "bad_text", "text is not valid Unicode: it holds half of a surrogate pair")
        conv = await self._conversation(request, binding)
        event_id = request.headers.get("Idempotency-Key") or new_id()
        person = self._person(binding)
        refs = [self.gw.uploads.put(data) for _, _, data in files]
        accepted = False
        try:
            result = await self.gw.submit(InboundMessage(
                platform="web", binding_id=binding.id, workspace=WORKSPACE, channel=conv.channel,
                chat_kind=ChatKind.DM, sender=Sender(account_id=person, display_name=person), text=text,
                event_id=event_id, message_id=event_id,
                attachments=tuple(Attachment(name, media_type, len(data), ref=ref)
                                  for (name, media_type, data), ref in zip(files, refs, strict=True)),
            ))
            accepted = result.accepted
        finally:
            if not accepted:
                self.gw.uploads.drop(refs)
        if result.accepted:
            return web.json_response({"message_id": result.message_id, "run_id": result.run_id}, status=202)
        if result.duplicate:
            return _bad(409, "duplicate", "a message with this Idempotency-Key was already received")
        if result.reason == "command":  # answered by the gateway itself: here, and kept in the conversation
            holder = await self._memory_holder(conv, binding)
            return web.json_response({"command": True, "answers": [
                await self._answer_json(a, holder) for a in result.answers]}, status=200)
        if result.reason == "busy":
            return _bad(429, "busy", "this conversation has too many messages waiting; try again shortly")
        return _bad(403, "not_admitted", result.reason or "message not accepted")

    async def _principal(self, request: web.Request) -> Principal:
        """Who the request acts as: its token's person, or the web binding's local person."""
        principal = principal_of(request)
        if principal.ref is not None:
            return principal
        binding = self._binding()
        return Principal(await self._me(binding), principal.name or self._person(binding))

    async def decide(self, request: web.Request) -> web.Response:
        """An API client's decision, as its principal: the same question the card's binding asks a click
        by that principal's account on the card's platform (`Approvals.decide_for`)."""
        body = await _json_object(request)
        try:
            decision = Decision(body.get("decision"))
        except ValueError:
            return _bad(400, "bad_request", "decision must be one of: approve, deny, approve_all")
        outcome = await self.gw.approvals.decide_for(_path_id(request), decision, await self._principal(request))
        status = 200 if outcome.accepted else (404 if "no longer exists" in outcome.message else 409)
        if not outcome.accepted and outcome.message.startswith("Only "):
            status = 403
        return web.json_response({"accepted": outcome.accepted, "message": outcome.message}, status=status)

    async def approval(self, request: web.Request) -> web.Response:
        """One gated call with its full arguments, for someone who may decide it (404 for anyone else,
        the same answer as for an id that does not exist)."""
        item = await self.gw.approvals.readable_by(_path_id(request), await self._principal(request))
        if item is None:
            return _bad(404, "not_found", "no approval you may decide has this id")
        return web.json_response(item_json(item))

    async def stop_run(self, request: web.Request) -> web.Response:
        """The web Stop button: the same rule as a Stop click or `/stop` in a chat, as the local person."""
        binding = self._binding()
        person = self._person(binding)
        outcome = await self.gw.stops.stop(request.match_info["id"], Sender(person, person), binding_id=binding.id)
        return web.json_response({"stopped": outcome.stopped, "message": outcome.message}, status=outcome.status)

    async def set_modes(self, request: web.Request) -> web.Response:
        """The same rule as `/approvals` in a chat: only the binding's deciders may switch."""
        binding = self._binding()
        conv = await self._conversation(request, binding)
        body = await _json_object(request)
        values = {k: body[k] for k in ("approve_all", "ask_every_tool") if isinstance(body.get(k), bool)}
        if not values:
            return _bad(400, "bad_request", "send {\"approve_all\": true|false} or {\"ask_every_tool\": true|false}")
        person = self._person(binding)
        modes = await self.gw.approvals.switch(conv, Sender(person, person), surface="api", **values)
        if isinstance(modes, str):
            return _bad(403, "forbidden", modes)
        return web.json_response({"approve_all": modes.approve_all, "ask_every_tool": modes.ask_every_tool})

    # --- the local person's own memory ----------------------------------------------------

    async def _me(self, binding: BindingSpec) -> str:
        person = self._person(binding)
        return (await self.gw.store.identify("web", WORKSPACE, person, person)).person_id

    async def my_memory(self, request: web.Request) -> web.Response:
        """What agents wrote about the web's local person: which agent, which note, when; with the text."""
        notes = await NoteStore(self.gw.store).about(await self._me(self._binding()))
        return web.json_response({"notes": [_note_json(n) for n in notes]})

    async def change_my_memory(self, request: web.Request) -> web.Response:
        """{"action": "stop" | "use" | "delete", "agent", "name"} or {"action": "erase"}."""
        binding = self._binding()
        body = await _json_object(request)
        action, agent, name = body.get("action"), body.get("agent"), body.get("name")
        notes = NoteStore(self.gw.store)
        person = await self._me(binding)
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

    async def memory_click(self, request: web.Request) -> web.Response:
        """A `/memory` card's button in the page, `{"data": ...}`: the same as a click in a chat, as
        the local person in a one-to-one conversation (so only their own notes are reachable)."""
        binding = self._binding()
        body = await _json_object(request)
        if not isinstance(body.get("data"), str):
            return _bad(400, "bad_request", 'send {"data": "<the button\'s data>"}')
        person = self._person(binding)
        outcome = await self.gw.memory_click(MemoryClick(binding.id, WORKSPACE, person, ChatKind.DM,
                                                         Sender(person, person), body["data"]))
        return web.json_response({"card": memory_card_json(outcome.card) if outcome.card else None,
                                  "message": outcome.message})

    # --- reading a conversation -----------------------------------------------------------

    async def _memory_holder(self, conv: repo.ConversationRef, binding: BindingSpec) -> memory.Holder | None:
        """Whose notes this conversation's `/memory` cards show: the same rule as the command's."""
        holder = memory.holder_of(chat_kind=ChatKind(conv.chat_kind), platform=conv.platform,
                                  workspace=conv.workspace, channel=conv.channel,
                                  person_id=await self._me(binding), allow_personal=True)
        return None if isinstance(holder, memory.NoStore) else holder

    async def _answer_json(self, answer: CommandAnswer, holder: memory.Holder | None) -> dict[str, Any]:
        """A command's answer as the conversation's messages show it (a card is drawn as it is now)."""
        out: dict[str, Any] = {"id": answer.message_id, "role": answer.role, "text": answer.text}
        if answer.role == "memory" and holder is not None:
            out["card"] = memory_card_json(await self.gw.memory_cards.card(holder))
        return out

    async def get_file(self, request: web.Request) -> web.Response:
        """A file the agent posted in this conversation, under the API's auth: an image the page shows,
        anything else a download (never rendered by the browser: `nosniff`, an attachment)."""
        binding = self._binding()
        conv = await self._conversation(request, binding)
        file_id = request.match_info["file_id"]
        value = await self.gw.store.get_state(binding.id, web_files.file_key(conv.id, file_id))
        stored = web_files.StoredFile.from_state(value) if value else None
        if stored is None or stored.conversation_id != conv.id:
            raise _error(404, "not_found", f"no file {file_id!r} in this conversation")
        inline = stored.media_type in web_files.INLINE
        disposition = "inline" if inline else "attachment"
        return web.Response(body=stored.data, content_type=stored.media_type if inline else "application/octet-stream",
                            headers={"Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(stored.name)}",
                                     "X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-store"})

    async def list_messages(self, request: web.Request) -> web.Response:
        binding = self._binding()
        conv = await self._conversation(request, binding)
        store = self.gw.store
        holder = await self._memory_holder(conv, binding)
        me, account = await self._me(binding), self._person(binding)

        def mine(m: Message) -> bool:  # a private command or answer: its asker's alone
            return m.status != PRIVATE or m.person_id == me or m.account_id == account

        # The runs still going are looked up before the messages are read: a run that ends in between
        # then has its final among them (and is shown by it alone); looked up after, it would be in neither.
        running = [run for run in await store.runs_in([repo.RUNNING]) if run.conversation_id == conv.id]
        messages = [m for m in await store.messages(conv.id) if mine(m)]
        turns = [
            {**await self._answer_json(CommandAnswer(m.role, m.text, m.id), holder), "status": m.status,
             "run_id": m.run_id, "time": m.created_at.isoformat()}
            for m in messages
        ]
        # Handoffs answered in this conversation under another agent's name, in their own conversations.
        agents = self.gw.config.agents
        for m, agent_id in await answers_beside(store, conv.key):
            name = agents[agent_id].name if agent_id in agents else agent_id
            turns.append({"id": m.id, "role": m.role, "text": f"**{name}:**\n\n{m.text}", "status": m.status,
                          "run_id": m.run_id, "time": m.created_at.isoformat(), "agent": agent_id})
        # A reply still streaming is not a message yet; show what has been delivered so far.
        for run in running:
            if not _ended_among(run, messages):
                live = self.gw.runner.live(run.id)
                if live is not None and live[0]:
                    text, message_id = live
                else:  # running on another replica: what it has delivered (since its card, if it parked)
                    delivered = [d for d in await store.deliveries(run.id) if run.state is None or not d.final]
                    text = "\n\n".join(d.text for d in delivered)
                    message_id = delivered[-1].platform_message_id if delivered else None
                if text:  # dated as its final will be: before a handoff's answer that came while it ended
                    # The id of the message its next deltas edit, so a reloaded page goes on drawing them there.
                    turns.append({"id": None, "role": "assistant", "text": text, "status": "streaming",
                                  "run_id": run.id, "message_id": message_id,
                                  "time": (run.started_at or run.created_at).isoformat()})
        turns.sort(key=lambda t: t["time"])
        approvals = self.gw.approvals
        modes = await approvals.modes(conv.id)
        return web.json_response({
            "conversation_id": conv.id,
            "messages": turns,
            # Timed, so a page can show each card where it happened among the messages.
            "cards": [{**card_json(card), "time": created.isoformat()} for card, created in await approvals.cards(conv.id)],
            # Files the agent posted (a chart, a shared file), timed like the cards.
            "files": web_files.shares(await store.get_state(binding.id, web_files.index_key(conv.id))),
            "decisions": await approvals.decisions(conv.id),
            "modes": {"approve_all": modes.approve_all, "ask_every_tool": modes.ask_every_tool},
        })

    # --- the person's conversations (the page's sidebar) ---------------------------------------

    async def list_conversations(self, request: web.Request) -> web.Response:
        """The local person's web conversations, most recently active first: `?limit=` (at most
        MAX_PAGE) and `?cursor=` (the previous page's `next_cursor`); `?q=` searches them instead,
        through the same full-text index as the `conversation_search` tool, best match first."""
        binding = self._binding()
        try:
            limit = min(max(int(request.query.get("limit", PAGE)), 1), MAX_PAGE)
        except ValueError:
            return _bad(400, "bad_request", "limit must be a whole number")
        person = await self._me(binding)
        search = ConversationSearch(self.gw.store.sessions)
        if "q" in request.query:
            try:
                found = (await search.search(person, request.query["q"], limit, binding_id=binding.id)).found
            except QueryError as e:
                return _bad(400, "bad_query", str(e))
            return web.json_response({"conversations": [
                {"id": f.conversation_id, "title": f.title, "last_active": f.last_active.isoformat(),
                 "passage": f.passage} for f in found], "next_cursor": None})
        before = _cursor(request.query["cursor"]) if "cursor" in request.query else None
        listed = await search.listing(person, binding.id, limit + 1, before)
        page, more = listed[:limit], len(listed) > limit
        return web.json_response({
            "conversations": [{"id": c.conversation_id, "title": c.title, "last_active": c.last_active.isoformat()}
                              for c in page],
            "next_cursor": _cursor_of(page[-1].last_active, page[-1].conversation_id) if more else None,
        })

    async def rename_conversation(self, request: web.Request) -> web.Response:
        """`{"title": "..."}`; null or blank: back to its first message."""
        conv = await self._conversation(request, self._binding())
        body = await _json_object(request)
        title = body.get("title")
        if title is not None and not isinstance(title, str):
            return _bad(400, "bad_request", 'send {"title": "..."} (or null for the first message)')
        title = " ".join(title.split()) if title else None
        if title and (len(title) > TITLE_MAX or _SURROGATE.search(title)):
            return _bad(400, "bad_title", f"a title is valid text of at most {TITLE_MAX} characters")
        await self.gw.store.rename_conversation(conv.id, title or None)
        return web.json_response({"id": conv.id, "title": title})

    async def delete_conversation(self, request: web.Request) -> web.Response:
        """Erase the conversation and all kept under it (`repo.Store.delete_conversation`)."""
        conv = await self._conversation(request, self._binding())
        if not await self.gw.store.delete_conversation(conv):
            return _bad(409, "busy", "a reply is being written or waits for an approval here; stop it first")
        return web.json_response({"deleted": True})

    async def events(self, request: web.Request) -> web.StreamResponse:
        conv = await self._conversation(request, self._binding())
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        # Subscribed before the headers go: the page counts its stream open at the headers, then reads
        # the listing; an event published between the two must not reach no one.
        async with self.gw.events.listen(conv.id) as queue:
            await response.prepare(request)
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


def _ended_among(run: repo.Run, messages: Sequence[Message]) -> bool:
    """Whether the run's final answer is among `messages` (it ended after the runs were read).

    A run that parked with text said before its card has that text stored under its id, dated
    when the run started; its answer after the card, once it ends, is dated later (`Store.end_run`).
    So for a run that was parked (its state kept while it runs again) only a later one is its end.
    """
    said = [m.created_at for m in messages if m.run_id == run.id and m.role == "assistant"]
    if run.state is None or run.started_at is None:
        return bool(said)
    return any(t > run.started_at for t in said)


def _path_id(request: web.Request) -> str:
    """The id in the URL; one no id of ours can be (a NUL, a lone surrogate, too long) is not found."""
    value = request.match_info["id"]
    if len(value) > 64 or "\x00" in value or _SURROGATE.search(value):
        raise _error(404, "not_found", "no such id")
    return value


def _cursor_of(last_active: datetime, conversation_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([last_active.isoformat(), conversation_id]).encode()).decode()


def _cursor(value: str) -> tuple[datetime, str]:
    """A `next_cursor` back into where the page ended; anything else is a 400."""
    try:
        last, conversation_id = json.loads(base64.urlsafe_b64decode(value.encode()))
        when = datetime.fromisoformat(last)
        if when.tzinfo is None or not isinstance(conversation_id, str):
            raise ValueError
    except (ValueError, TypeError, binascii.Error, UnicodeError):
        raise _error(400, "bad_cursor", "cursor is not one this API gave out") from None
    return when, conversation_id


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _error(400, "bad_json", "the body must be JSON") from None
    if not isinstance(body, dict):
        raise _error(400, "bad_request", "the body must be a JSON object")
    return body


def _bad(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": code, "message": message}, status=status)


def _error(status: int, code: str, message: str) -> web.HTTPException:
    """An error response to raise (aiohttp's HTTP exceptions are responses)."""
    cls = {400: web.HTTPBadRequest, 404: web.HTTPNotFound}[status]
    return cls(text=json.dumps({"error": code, "message": message}), content_type="application/json")


def _note_json(note: Note) -> dict[str, Any]:
    return {
        "agent": note.agent_id,
        "name": note.name,
        "content": note.content,
        "in_use": not note.suppressed,
        "created_at": note.created_at.isoformat(),
        "updated_at": note.updated_at.isoformat(),
    }


def memory_card_json(card: MemoryCard) -> dict[str, Any]:
    """A `/memory` card as the page's event stream and the click's answer show it."""
    def buttons(row: tuple[MemoryButton, ...]) -> list[dict[str, str]]:
        return [{"label": b.label, "data": b.data, "style": b.style} for b in row]

    return {"title": card.title, "status": card.status, "footer": card.footer, "actions": buttons(card.actions),
            "notes": [{"label": n.label, "detail": n.detail, "in_use": n.in_use, "buttons": buttons(n.buttons)}
                      for n in card.lines]}


def card_json(card: ApprovalCard) -> dict[str, Any]:
    """A card as the API and the page's event stream show it."""
    return {
        "card_id": card.card_id,
        "run_id": card.run_id,
        "deciders": card.deciders,
        "note": card.note,
        "pending": card.pending,
        "items": [item_json(i) for i in card.items],
    }


def item_json(item: ApprovalItem) -> dict[str, Any]:
    """One call on a card, its arguments whole (`GET /api/v1/approvals/{id}` and the cards' JSON)."""
    return {"approval_id": item.approval_id, "tool": item.tool_name, "delegate": item.delegate,
            "headline": item.headline, "capability": item.capability, "arguments": item.arguments,
            "state": item.state.value, "decided_by": item.decided_by}
