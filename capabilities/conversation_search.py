"""conversation_search: find what was said before in the person's own conversations, and open one.

Whose: the person the run is answering — the conversations they said something in, on any
platform (linked accounts are one person); a channel or group thread only while they are still a
member of that channel, confirmed against the platform (`gateway.membership`), so a person who left
a private channel no longer finds or opens its threads. Where: only where that person is the only listener;
in a group chat or a channel both tools refuse, saying why, because the corpus is personal.
How: full-text search in the database we run (gateway/store/conversation_search.py): words
matched whole and case-folded, not stemmed; "quoted phrases", `or` and a leading `-` work.

Our own rather than the harness's `conversation_search`: that one searches a step-persistence
store of agent runs keyed by conversation, not our messages table, and has no notion of who the
person is or who is listening, which is the whole of the seed's rule here.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset
from sqlalchemy.exc import OperationalError

from gateway.membership import unconfirmed_note
from gateway.store.conversation_search import ConversationSearch
from gateway.store.fulltext import QueryError
from gateway.runs.turn import Turn

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

LIMIT_CEILING = 20
WINDOW_CEILING = 200

GROUP_REFUSAL = (
    "Conversation search is not available here: this is a shared chat, and the conversations it searches belong "
    "to one person. Answering from them here would read their private conversations out to everyone in the room. "
    "Ask in a direct message with me instead."
)
NOBODY_REFUSAL = "Conversation search is not available: this message is not from a known person, so there are no " \
                 "conversations of theirs to search."
PLATFORMS = {"slack": "Slack", "telegram": "Telegram", "mattermost": "Mattermost", "web": "Web chat"}
KINDS = {"dm": "direct message", "group": "group chat", "channel": "channel"}


class ConversationSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_limit: int = Field(default=5, ge=1, le=LIMIT_CEILING,
                               description="conversations search_conversations returns when the model names no limit")
    window_messages: int = Field(default=40, ge=10, le=WINDOW_CEILING,
                                 description="messages read_conversation returns at a time")


def _refused(ctx: RunContext[Turn]) -> str | None:
    if not ctx.deps.one_to_one:
        return trouble(ctx, "refusal", GROUP_REFUSAL)
    if ctx.deps.requester.person_id is None:
        return trouble(ctx, "refusal", NOBODY_REFUSAL)
    return None


def _where(platform: str, kind: str) -> str:
    return f"{PLATFORMS.get(platform, platform)} {KINDS.get(kind, kind)}"


def _toolset(search: ConversationSearch, cfg: ConversationSearchConfig) -> FunctionToolset[Turn]:
    size = cfg.window_messages

    async def search_conversations(ctx: RunContext[Turn], query: str,
                                   limit: Annotated[int, Field(ge=1, le=LIMIT_CEILING)] | None = None) -> str:
        """Search the earlier conversations of the person you are talking to for what was said in them.

        Use it when they refer to something discussed before ("what did we decide about ...") that
        your notes do not cover; then open a result with read_conversation. Words are matched whole
        and case-folded but NOT stemmed: "meeting" does not find "meetings", so when nothing is found,
        try another form of the word or a synonym before concluding it was never said. Works only in
        a direct conversation with one person.

        Args:
            query: Words to find. "Quoted phrase" matches the words in that order; `or` between words
                finds either; a leading - excludes a word (e.g. pricing -draft). Required.
            limit: How many conversations to return, best first; default 5, at most 20.

        Returns:
            An entry per conversation, best match first, with its id (for read_conversation), where it
            happened, its title (the one the person gave it, else its first message), when it was last
            active, how many messages matched, and the strongest matching passage with the matched words
            in **bold**. A
            sentence saying nothing matched, or why the search is not available here.
        """
        if (refusal := _refused(ctx)) is not None:
            return refusal
        person = ctx.deps.requester.person_id
        assert person is not None
        try:
            results = await search.search(person, query, limit or cfg.default_limit, skip_run=ctx.deps.run_id)
        except QueryError as e:
            return trouble(ctx, "mistake", f"{e}. For example: search_conversations(query=\"pricing -draft\").")
        except OperationalError:
            return trouble(ctx, "transient", "the database did not answer; try again")
        found = results.found
        left_out = f"\n{unconfirmed_note(results.unconfirmed)}" if results.unconfirmed else ""
        if not found:
            return (f"Nothing in this person's conversations matched {query!r}. Words are matched whole and not "
                    f"stemmed: try another form of a word (meeting / meetings) or a synonym.{left_out}")
        lines = [f"{len(found)} conversation{'s' if len(found) != 1 else ''} matched {query!r}, best first:"]
        for i, f in enumerate(found, 1):
            lines.append(f"{i}. id {f.conversation_id} — {_where(f.platform, f.chat_kind)} — \"{f.title}\" — last "
                         f"active {f.last_active:%Y-%m-%d %H:%M} UTC — {f.matched} message"
                         f"{'s' if f.matched != 1 else ''} matched\n   > {f.passage}")
        return "\n".join(lines) + left_out

    async def read_conversation(ctx: RunContext[Turn], conversation_id: str,
                                window: Annotated[int, Field(ge=1)] = 1) -> str:
        """Open one of the person's earlier conversations, a window of messages at a time, oldest first.

        Use it after search_conversations to read what was said around a match. Works only in a
        direct conversation with one person, and only on conversations they took part in.

        Args:
            conversation_id: The id search_conversations gave. Required.
            window: Which window to read: 1 is the start; default 1. Each holds 40 messages by default.

        Returns:
            Markdown, with a line saying where it happened and which messages are shown, then each message
            as "USER:" or "AI:" in the order written (with the speaker's name where several people
            talked), a message over 4,000 characters cut. When more follows, a last line says how to
            ask for the next window. An unknown id is an error; a sentence says why reading is not
            available here.
        """
        if (refusal := _refused(ctx)) is not None:
            return refusal
        person = ctx.deps.requester.person_id
        assert person is not None
        try:
            theirs = await search.took_part(person, conversation_id)
            if theirs is None:
                return trouble(ctx, "transient", f"Conversation {conversation_id} happened in a channel, and the chat "
                                                 "platform could not confirm this person is still a member of it; "
                                                 "try again later")
            if not theirs:
                return trouble(ctx, "mistake", f"There is no conversation {conversation_id!r} among this person's. "
                                               "Use an id from search_conversations.")
            got = await search.read(conversation_id, (window - 1) * size, size)
        except OperationalError:
            return trouble(ctx, "transient", "the database did not answer; try again")
        assert got is not None
        if not got.lines:
            last = max(1, -(-got.total // size))
            return trouble(ctx, "mistake", f"Conversation {conversation_id} has {got.total} messages, so windows "
                                           f"1–{last}; window {window} is past its end.")
        first = (window - 1) * size + 1
        end = first + len(got.lines) - 1
        several = got.chat_kind != "dm"
        out = [f"Conversation {conversation_id} ({_where(got.platform, got.chat_kind)}), messages {first}–{end} "
               f"of {got.total}:", ""]
        for said in got.lines:
            who = "AI" if said.role == "assistant" else (f"USER ({said.sender_name})" if several and said.sender_name
                                                         else "USER")
            out.append(f"{who}: {said.text}")
            out.append("")
        if end < got.total:
            out.append(f"[call read_conversation(conversation_id=\"{conversation_id}\", window={window + 1}) for "
                       f"messages {end + 1}–{min(end + size, got.total)}]")
        return "\n".join(out).rstrip()

    return FunctionToolset([search_conversations, read_conversation])


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    assert isinstance(ctx.config, ConversationSearchConfig)
    search = ctx.part("conversation_search", ConversationSearch)
    return simple(toolsets=[_toolset(search, ctx.config)])


register(CapabilityDecl(
    id="conversation_search",
    name="Conversation search",
    category="knowledge",
    tools=(
        ToolDecl("search_conversations", summary="Find the person's earlier conversations by what was said."),
        ToolDecl("read_conversation", summary="Open one of them, a window of messages at a time."),
    ),
    build=build,
    config_model=ConversationSearchConfig,
    scopes=("conversations:read",),
    # Whose conversations, and whether anyone else is listening, are read from the run's deps on every call.
    shared=True,
    description=("Searches the earlier conversations of the person the run answers (any platform) and opens one. "
                 "Only in a direct conversation: in a group chat or channel both tools refuse."),
))
