"""channel_tools: look around the chat channel the conversation is in, with the bot's own credentials.

Granted per binding (and per channel override), never in an agent file: whether an agent may
read a channel has a different answer on each server it is bound to. The tools are bound
server-side to the channel the admitting message arrived in (in a thread, that thread), so no
tool takes a channel; the bot's membership is the whole permission boundary. Only tools both
the binding grants and the platform's directory can answer are offered, and a run with no
directory (web chat, HTTP API) gets nothing: the capability is not attached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Annotated, Any, TypeVar

from pydantic import Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from bindings.models import ChannelToolsConfig
from gateway.runs.turn import Turn
from gateway.outbound.adapter import ChannelDirectory, ChannelInfo, NotVisible, PlatformError, ReplyTarget

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

CEILING = 200
MESSAGE_CHARS = 2_000  # one history message shown to the model, at most
T = TypeVar("T")
Limit = Annotated[int, Field(ge=1, le=CEILING)]


async def _ask(ctx: RunContext[Turn], what: str, call: Callable[[ChannelDirectory], Awaitable[T]]) -> T | str:
    """Run one directory call; trouble becomes bad news (cannot see) or a retry prompt (platform down)."""
    directory = ctx.deps.directory
    if directory is None:  # built only when there is one; a reload could still take it away
        return trouble(ctx, "refusal", "Channel lookup is not available in this conversation.")
    try:
        return await call(directory)
    except NotVisible:
        return (f"The bot cannot see this channel, so it cannot {what}. It only sees channels it is a member of; "
                "someone would have to add it.")
    except PlatformError as e:
        return trouble(ctx, "transient", f"the chat platform did not answer ({type(e).__name__}); try again shortly")


def _info_lines(info: ChannelInfo) -> list[str]:
    lines = [f"name: {info.name}"]
    if info.purpose:
        lines.append(f"purpose: {info.purpose}")
    if info.topic:
        lines.append(f"topic: {info.topic}")
    if info.member_count is not None:
        lines.append(f"members: {info.member_count}")
    if info.is_private is not None:
        lines.append(f"private: {'yes' if info.is_private else 'no'}")
    return lines


def _more(shown: int, cut: bool, noun: str) -> list[str]:
    if not cut:
        return []
    return [f"(only the first {shown} {noun} are shown; there are more. Call again with a larger limit, at most {CEILING}.)"]


async def history_target(turn: Turn) -> ReplyTarget:
    """The thread when the message arrived in one; the channel when it arrived at the top level.

    A top-level mention in a threaded channel anchors a new thread on itself (its id is the
    conversation's thread), and that thread holds only what the agent already has as history:
    what the person means by "what was said here" is the channel.
    """
    target = turn.target
    if target.thread is None:
        return target
    return replace(target, thread=None) if await turn.history.has_platform_message(target.thread) else target


# Docstrings are templates: each binding's default_limit is what the model is told.

_INFO_DOC = """Describe the channel this conversation is happening in: name, purpose, topic, size, privacy.

Use it to learn where you are. To see who is in it use list_channel_members; to find other
channels use search_channels. It always answers about this conversation's channel.

Returns:
    A few lines, one per fact (name, purpose, topic, members as a count, private as yes or no),
    each written as `field: value`; a line is left out when the platform does not say. If the
    bot cannot see the channel, a sentence saying so.
"""

_MEMBERS_DOC = """List the people in this channel.

Use it when the question is who is here, or who to ask. For the channel's name and purpose use
get_channel_info.

Args:
    limit: How many members to list; default {default}, at most 200.

Returns:
    One line per member, the display name, then (@name), then [bot] for bots. When the channel
    has more members than `limit`, a last line says the list is cut. If the bot cannot see the
    channel, a sentence saying so.
"""

_SEARCH_DOC = """Find other channels by name or purpose, without reading them.

Use it when someone asks where a topic is discussed or which channel to use. For this channel
use get_channel_info. Only channels the bot can see are found.

Args:
    query: Words to match against channel names and purposes; required.
    limit: How many channels to return; default {default}, at most 200.

Returns:
    One line per channel, #name with its purpose and its member count when known. When more
    channels match than `limit`, a last line says the list is cut; "No channel matches" when
    none do.
"""

_HISTORY_DOC = """Read the most recent messages in this channel (in a thread, in this thread), newest last.

Use it when the question depends on what was said before you were asked. For who is in the
channel use list_channel_members.

Args:
    limit: How many of the newest messages to read; default {default}, at most 200.

Returns:
    One line per message, oldest first, as `[time UTC] author` and the text, each message cut
    at 2,000 characters with "…". When older messages exist beyond `limit`, a first line says
    they were left out. If the bot cannot see the channel, a sentence saying so.
"""


def _noted(doc: str, note: str) -> str:
    """The platform's note as the last paragraph of what the tool does, before its arguments."""
    if not note:
        return doc
    cut = doc.find("\n\nArgs:") if "\n\nArgs:" in doc else doc.find("\n\nReturns:")
    return f"{doc[:cut]}\n\n{note}{doc[cut:]}"


def toolset(default_limit: int, notes: Mapping[str, str] | None = None) -> FunctionToolset[Turn]:
    """The four tools, with `limit` defaulting to this binding's default_limit and the
    platform's `notes` (by tool id) added to their descriptions."""
    notes = notes or {}

    async def get_channel_info(ctx: RunContext[Turn]) -> str:
        target = ctx.deps.conversation.target()
        info = await _ask(ctx, "describe it", lambda d: d.channel_info(target))
        return info if isinstance(info, str) else "\n".join(_info_lines(info))

    async def list_channel_members(ctx: RunContext[Turn], limit: Limit = default_limit) -> str:
        target = ctx.deps.conversation.target()
        got = await _ask(ctx, "list its members", lambda d: d.channel_members(target, limit))
        if isinstance(got, str):
            return got
        members, cut = got
        if not members:
            return "The platform lists nobody in this channel."
        lines = [f"{m.display_name or m.name} (@{m.name}){' [bot]' if m.is_bot else ''}" for m in members]
        return "\n".join(lines + _more(len(members), cut, "members"))

    async def search_channels(ctx: RunContext[Turn], query: str, limit: Limit = default_limit) -> str:
        if not query.strip():
            return trouble(ctx, "mistake", "query is empty: pass words to look for, e.g. search_channels(query=\"design\").")
        target = ctx.deps.conversation.target()
        got = await _ask(ctx, "search", lambda d: d.search_channels(target, query, limit))
        if isinstance(got, str):
            return got
        found, cut = got
        if not found:
            return f"No channel matches {query!r} among the channels the bot can see."
        lines = [
            f"#{c.name}" + (f" — {c.purpose}" if c.purpose else "")
            + (f" ({c.member_count} members)" if c.member_count is not None else "")
            for c in found
        ]
        return "\n".join(lines + _more(len(found), cut, "channels"))

    async def read_channel_history(ctx: RunContext[Turn], limit: Limit = default_limit) -> str:
        target = await history_target(ctx.deps)
        got = await _ask(ctx, "read its messages", lambda d: d.channel_history(target, limit))
        if isinstance(got, str):
            return got
        messages, cut = got
        if not messages:
            return "There are no messages here that the bot can read."
        lines = [f"(older messages left out: only the newest {len(messages)} are shown; a larger limit reads "
                 f"more, at most {CEILING}.)"] if cut else []
        for m in messages:
            text = m.text if len(m.text) <= MESSAGE_CHARS else m.text[:MESSAGE_CHARS] + "…"
            when = f"[{m.ts:%Y-%m-%d %H:%M}] " if m.ts is not None else ""
            lines.append(f"{when}{m.author}: {text}")
        return "\n".join(lines)

    docs = {get_channel_info: _INFO_DOC, list_channel_members: _MEMBERS_DOC, search_channels: _SEARCH_DOC,
            read_channel_history: _HISTORY_DOC}
    for tool, doc in docs.items():  # a tool's name is its id
        tool.__doc__ = _noted(doc.format(default=default_limit), notes.get(tool.__name__, ""))
    return FunctionToolset(list(docs))


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, ChannelToolsConfig)
    directory = ctx.turn.directory
    if directory is None:
        return None  # web chat, HTTP API: no channel to look at
    offered = frozenset(ctx.config.tools) & directory.supported
    if not offered:
        return None

    def allowed(_ctx: RunContext[Turn], tool: ToolDefinition) -> bool:
        return tool.name in offered

    return simple(toolsets=[toolset(ctx.config.default_limit, directory.notes).filtered(allowed)])


register(CapabilityDecl(
    id="channel_tools",
    name="Chat channel lookup",
    category="chat",
    tools=(
        ToolDecl("get_channel_info", summary="Describe the channel this conversation is happening in."),
        ToolDecl("list_channel_members", summary="List the people in this channel."),
        ToolDecl("search_channels", summary="Find other channels by name or purpose, without reading them."),
        ToolDecl("read_channel_history", summary="Read the most recent messages in this channel, newest last."),
    ),
    build=build,
    config_model=ChannelToolsConfig,
    binding_only=True,  # so never `shared` (registry._is_shared): which tools it offers is the channel's
    description=(
        "Granted per binding: look up the channel the message arrived in with the bot's own credentials. "
        "What the platform cannot answer is not offered; runs with no channel (web chat, API) get nothing."
    ),
))
