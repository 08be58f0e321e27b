"""Telegram's published budgets (core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this).

About one message a second in one chat, twenty a minute in one group, thirty a second across
the bot. Sends and edits count alike; a chat action (typing) or a message draft counts against
the bot only.
Group and channel chats have negative ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.outbound.budget import Rule, Scope

PER_CHAT = Rule("chat", 1, 1.0)
PER_GROUP = Rule("group", 20, 60.0)
PER_BOT = Rule("bot", 30, 1.0)
RULES = (PER_CHAT, PER_GROUP, PER_BOT)


class TelegramBudget:
    """The rules one binding paces by (`scaled` copies of `RULES` in tests and benches)."""

    def __init__(self, rules: Sequence[Rule] = RULES) -> None:
        by_name = {r.name: r for r in rules}
        self.chat, self.group, self.bot = by_name["chat"], by_name["group"], by_name["bot"]

    def message(self, chat_id: int) -> list[Scope]:
        """A send or an edit in `chat_id`."""
        scopes: list[Scope] = [(self.chat, str(chat_id)), (self.bot, "")]
        if chat_id < 0:
            scopes.append((self.group, str(chat_id)))
        return scopes

    def draft(self) -> list[Scope]:
        """A message draft (a preview, not a message): the bot's budget only."""
        return [(self.bot, "")]

    def action(self) -> list[Scope]:
        """A chat action (typing)."""
        return [(self.bot, "")]
