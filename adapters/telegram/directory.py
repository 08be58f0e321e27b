"""Channel tools on Telegram: what the Bot API lets a bot know about the chat it is in.

`getChat` + `getChatMemberCount` answer `get_channel_info`. `getChatAdministrators` is the
only member list a bot can get, so `list_channel_members` lists administrators and says so
in each entry. There is no way to search chats or read a chat's history through the Bot
API, so `search_channels` and `read_channel_history` are not offered. The model learns what
`list_channel_members` really lists from `notes`, which the core adds to that tool's text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from telegram import Bot, ChatMember, ChatMemberOwner, ChatMemberRestricted
from telegram.error import BadRequest, Forbidden

from gateway.outbound.adapter import ChannelInfo, ChannelMember, HistoryMessage, NotVisible, PlatformError, ReplyTarget

from .errors import translated

ADMINS_ONLY_NOTE = (
    "On Telegram this lists only the chat's owner and administrators, not every member: the Bot API "
    "gives a bot no other member list. In a private chat it lists the person and the bot."
)


class TelegramDirectory:
    supported = frozenset({"get_channel_info", "list_channel_members"})
    notes: Mapping[str, str] = MappingProxyType({"list_channel_members": ADMINS_ONLY_NOTE})

    def __init__(self, bot: Bot) -> None:
        self._bot = bot

    async def channel_info(self, target: ReplyTarget) -> ChannelInfo:
        chat_id = int(target.channel)
        with _visible("getChat"):
            chat = await self._bot.get_chat(chat_id)
        with _visible("getChatMemberCount"):
            count = await self._bot.get_chat_member_count(chat_id)
        name = chat.title or chat.full_name or (f"@{chat.username}" if chat.username else str(chat.id))
        return ChannelInfo(
            id=str(chat.id),
            name=name,
            purpose=chat.description or "",
            member_count=count,
            # A chat with a public @username can be found and joined by anyone.
            is_private=chat.username is None,
        )

    async def channel_members(self, target: ReplyTarget, limit: int) -> tuple[list[ChannelMember], bool]:
        chat_id = int(target.channel)
        if chat_id > 0:  # a private chat: the person and the bot, no administrators to ask for
            with _visible("getChat"):
                chat = await self._bot.get_chat(chat_id)
            me = self._bot.bot
            members = [ChannelMember(str(chat.id), chat.username or chat.full_name or str(chat.id),
                                     chat.full_name or ""),
                       ChannelMember(str(me.id), me.username or me.full_name, me.full_name, is_bot=True)]
            return members[:limit], len(members) > limit
        with _visible("getChatAdministrators"):
            admins = await self._bot.get_chat_administrators(chat_id)
        # The owner first, then administrators in Telegram's order.
        ordered = sorted(admins, key=lambda m: not isinstance(m, ChatMemberOwner))
        members = [
            ChannelMember(
                account_id=str(m.user.id),
                name=m.user.username or m.user.full_name,
                display_name=f"{m.user.full_name} ({'owner' if isinstance(m, ChatMemberOwner) else 'administrator'})",
                is_bot=m.user.is_bot,
            )
            for m in ordered
        ]
        return members[:limit], len(members) > limit

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        """getChatMember: an owner, administrator or member is in the chat; one who left or was
        banned is not, and a restricted member is while Telegram says `is_member`."""
        with _visible("getChatMember"):
            member = await self._bot.get_chat_member(int(target.channel), int(account_id))
        if isinstance(member, ChatMemberRestricted):
            return member.is_member
        return member.status in (ChatMember.OWNER, ChatMember.ADMINISTRATOR, ChatMember.MEMBER)

    async def search_channels(self, target: ReplyTarget, query: str, limit: int) -> tuple[list[ChannelInfo], bool]:
        raise PlatformError("the Telegram Bot API cannot search chats")

    async def channel_history(self, target: ReplyTarget, limit: int) -> tuple[list[HistoryMessage], bool]:
        raise PlatformError("the Telegram Bot API cannot read a chat's history")


@contextmanager
def _visible(method: str) -> Iterator[None]:
    """A chat the bot was removed from (or never in) is bad news for the model, not a fault."""
    try:
        with translated(method):
            yield
    except PlatformError as e:
        cause = e.__cause__
        if isinstance(cause, Forbidden) or (isinstance(cause, BadRequest) and "chat not found" in cause.message.lower()):
            raise NotVisible(str(e)) from cause
        raise
