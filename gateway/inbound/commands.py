"""Commands a person types in the chat, answered by the gateway itself (no model run).

`COMMANDS` is the one table: `/help` is generated from it, the parser knows its names, and
adapters register what their platform supports natively from it (Telegram `setMyCommands`).
`!` works as well as `/` for platforms that swallow unknown slash commands (Slack,
Mattermost); an unknown `/word` gets a short "try /help" instead of a model run.

Commands reach this module only through `gateway.inbound.pipeline`, after admission, identity and the
ledger; every answer goes out through `gateway.outbound.delivery.Outbound`. The command as typed and
its answers are kept in the conversation (roles `command`, `notice`, `memory`; status `private`, with
the asker's person and account: a shared surface never shows them to anyone else), so the web chat
shows them again after a reload and answers an API client in the response itself. Who may switch approval
modes is asked of `gateway.approvals.service`, on every door.

`/link CODE` is throttled per account: LINK_TRIES wrong codes within LINK_TRIES_WINDOW and the
account is told when it may try again (codes have 40 random bits; the throttle keeps guessing
hopeless). The count lives in this process, on the store's clock.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gateway.runs import memory
from gateway.approvals.service import Approvals
from gateway.outbound.delivery import Outbound
from gateway.inbound.memory_card import MemoryCards
from gateway.messages import ChatKind, CommandAnswer, InboundMessage
from gateway.approvals.policy import Modes
from gateway.store import repo
from gateway.store.notes import NoteStore
from gateway.store.people import LINK_TTL, AccountRef, PeopleStore
from gateway.store.schedules import ScheduleStore
from gateway.runs.scheduled import task_line
from gateway.runs.stop import Stops
from gateway.outbound.adapter import target_for


LINK_TRIES = 5  # wrong `/link CODE`s per account within LINK_TRIES_WINDOW
LINK_TRIES_WINDOW = timedelta(minutes=10)


class LinkTries:
    """Wrong link codes per account, so a guesser is stopped; on an injected clock."""

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now
        self._wrong: dict[str, deque[datetime]] = {}

    def blocked_until(self, account: AccountRef) -> datetime | None:
        """When this account may try again; None when it may now."""
        now, key = self._now(), str(account)
        wrong = self._wrong.get(key)
        while wrong and wrong[0] <= now - LINK_TRIES_WINDOW:
            wrong.popleft()
        if not wrong:
            self._wrong.pop(key, None)
            return None
        return wrong[0] + LINK_TRIES_WINDOW if len(wrong) >= LINK_TRIES else None

    def failed(self, account: AccountRef) -> None:
        self._wrong.setdefault(str(account), deque()).append(self._now())

    def succeeded(self, account: AccountRef) -> None:
        self._wrong.pop(str(account), None)


@dataclass(frozen=True)
class CommandSpec:
    """One command as people see it in /help and platforms register it."""

    name: str
    usage: str
    summary: str
    where: Literal["dm", "any"] = "any"
    hidden: bool = False  # answered, but not listed (Telegram's /start)
    kept: bool = True  # kept in the conversation with its answers; `/link`'s code is a credential, never stored


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("help", "/help", "list these commands"),
    CommandSpec("new", "/new", "start a fresh conversation (I stop seeing what we said before here)", "dm"),
    CommandSpec("whoami", "/whoami", "which accounts I know as you"),
    CommandSpec("link", "/link [CODE]", "make your account on another platform you too: `/link` here gives a code, "
                "`/link CODE` in a direct message there uses it", "dm", kept=False),
    CommandSpec("unlink", "/unlink", "make this account a person of its own again", "dm"),
    CommandSpec("memory", "/memory [stop|use|delete NAME | erase]",
                "what agents wrote down: about you in a direct message, for this chat in a group"),
    CommandSpec("approvals", "/approvals [auto on|off | ask on|off]",
                "this conversation's approval mode (switching it is for the people who may decide)"),
    CommandSpec("stop", "/stop", "stop the reply being written here and what waits behind it (for whoever asked, or who "
                                    "decides approvals)"),
    CommandSpec("schedules", "/schedules", "the tasks scheduled to run in this conversation, with their next run"),
    CommandSpec("start", "/start", "say hello", hidden=True),
)
_BY_NAME = {c.name: c for c in COMMANDS}
_COMMAND = re.compile(r"^\s*(?P<prefix>[/!])(?P<name>[A-Za-z][\w-]*)(?:@\w+)?(?=\s|$)\s*(?P<args>.*)$", re.S)


@dataclass(frozen=True)
class Command:
    name: str  # "" for a `/word` nobody knows
    args: list[str]  # lower-cased, for keywords
    raw_args: tuple[str, ...] = ()  # as typed, for names (`/memory stop Diet.md`)
    typed: str = ""  # the word as typed, for "unknown command"


def parse_command(text: str) -> Command | None:
    """A known command with `/` or `!`; an unknown one only with `/` (`!` starts plenty of sentences)."""
    match = _COMMAND.match(text)
    if not match:
        return None
    name = match["name"].lower()
    if name not in _BY_NAME:
        return Command("", [], (), match["name"]) if match["prefix"] == "/" else None
    return Command(name, match["args"].lower().split(), tuple(match["args"].split()), match["name"])


def commands_for(chat_kind: ChatKind) -> list[CommandSpec]:
    """What /help lists (and a platform registers) for this kind of chat."""
    return [c for c in COMMANDS if not c.hidden and (c.where == "any" or chat_kind is ChatKind.DM)]


def help_text(chat_kind: ChatKind) -> str:
    lines = ["Commands (`!` works as well as `/`):"]
    lines += [f"- `{c.usage}`: {c.summary}" for c in commands_for(chat_kind)]
    if chat_kind is not ChatKind.DM:
        lines.append("More in a direct message with me: " + ", ".join(
            f"`/{c.name}`" for c in COMMANDS if c.where == "dm" and not c.hidden) + ".")
    return "\n".join(lines)


APPROVALS_HELP = (
    "Approval modes for this conversation: `/approvals auto on|off` (approve every gated tool here "
    "without asking) and `/approvals ask on|off` (ask before every tool, MCP tools included)."
)
PLATFORM_NAMES = {"slack": "Slack", "telegram": "Telegram", "mattermost": "Mattermost", "web": "the web chat"}


@dataclass(frozen=True)
class Asked:
    """One command as the inbound path hands it over: admitted, recorded, its sender identified."""

    command: Command
    message: InboundMessage
    person_id: str
    agent_id: str
    conversation: Callable[[], Awaitable[repo.ConversationRef]]  # the message's conversation, created if new
    existing: repo.ConversationRef | None  # the conversation as it was before this command
    self_linking: bool = True  # the binding lets people link accounts themselves
    answers: list[CommandAnswer] = field(default_factory=list)  # what answered it, in order


PRIVATE = "private"  # a message's status: for the person who asked alone


class Commands:
    def __init__(self, store: repo.Store, approvals: Approvals, outbound: Outbound, stops: Stops,
                 memory_cards: MemoryCards) -> None:
        self._store, self._approvals, self._outbound = store, approvals, outbound
        self._stops = stops
        self._memory_cards = memory_cards
        self._people = PeopleStore(store)
        self._link_tries = LinkTries(store.clock.now)

    async def run(self, asked: Asked) -> str | None:
        """Answer the command; returns the conversation it touched, if any."""
        name, message = asked.command.name, asked.message
        await self._keep(asked, "command", message.text.strip(), answer=False)
        spec = _BY_NAME.get(name)
        if spec is None:
            await self._tell(asked, f"I don't know the command `/{asked.command.typed}`. Try `/help`.")
            return None
        if spec.where == "dm" and message.chat_kind is not ChatKind.DM:
            await self._tell(asked, f"`/{name}` works in a direct message with me, not here.")
            return None
        if name == "approvals":
            return await self._approvals_command(asked)
        if name == "memory":
            await self._memory_command(asked)
        elif name in ("help", "start"):
            await self._tell(asked, help_text(message.chat_kind))
        elif name == "whoami":
            await self._whoami(asked)
        elif name in ("link", "unlink"):
            await (self._link(asked) if name == "link" else self._unlink(asked))
        elif name == "new":
            await self._new(asked)
        elif name == "stop":
            await self._stop(asked)
        elif name == "schedules":
            await self._schedules(asked)
        return None

    async def _schedules(self, asked: Asked) -> None:
        """`/schedules`: what will post here on its own (anyone here sees those posts), told privately."""
        tasks = await ScheduleStore(self._store).listed(conversation_id=asked.existing.id) if asked.existing else []
        if not tasks:
            await self._tell(asked, "No tasks are scheduled in this conversation.")
            return
        await self._tell(asked, "Scheduled here:\n" + "\n".join(f"- {task_line(t)}" for t in tasks))

    async def _stop(self, asked: Asked) -> None:
        """`/stop`: the run in flight here, if the sender may stop it; only a refusal is answered (privately)."""
        if self._stops is None or asked.existing is None:
            await self._tell(asked, "Nothing is running here.")
            return
        outcome = await self._stops.stop_current(asked.existing.id, asked.message.sender)
        if not outcome.stopped:
            await self._tell(asked, outcome.message)

    async def _tell(self, asked: Asked, text: str) -> None:
        """A private answer: kept (written before it is sent, so a page that rereads the
        conversation on its event finds it) and sent to the asker alone."""
        await self._keep(asked, "notice", text)
        self._outbound.send(target_for(asked.message), text, private_to=asked.message.sender.account_id)

    async def _keep(self, asked: Asked, role: str, text: str, *, answer: bool = True) -> None:
        """Into the conversation, for the asker alone. A command where no conversation is yet is not
        kept (what is said to the agent makes one, a command does not), nor one whose spec says so."""
        spec = _BY_NAME.get(asked.command.name)
        kept: int | None = None
        if asked.existing is not None and (spec is None or spec.kept):
            kept = await self._store.add_message(asked.existing.id, role, text, status=PRIVATE,
                                                 person_id=asked.person_id, account_id=asked.message.sender.account_id)
        if answer:
            asked.answers.append(CommandAnswer(role, text, kept))

    async def _approvals_command(self, asked: Asked) -> str:
        conv = await asked.conversation()
        args = asked.command.args
        switch = {"on": True, "off": False}.get(args[1]) if len(args) == 2 else None
        result: Modes | str | None = None
        if switch is not None and args[0] in ("auto", "all"):
            result = await self._approvals.switch(conv, asked.message.sender, surface="command", approve_all=switch,
                                                  answers=asked.answers)
        elif switch is not None and args[0] in ("ask", "every"):
            result = await self._approvals.switch(conv, asked.message.sender, surface="command",
                                                  ask_every_tool=switch, answers=asked.answers)
        else:
            modes = await self._approvals.modes(conv.id)
            state = (
                "approve all is on" if modes.approve_all else "ask for every tool is on" if modes.ask_every_tool
                else "the agent's normal policy applies"
            )
            text = f"Here, {state}. {APPROVALS_HELP}"
            asked.answers.append(CommandAnswer("notice", text, await self._approvals.notice(conv, text)))
        if isinstance(result, str):  # refused: only the sender hears why, and nothing changed
            await self._tell(asked, result)
        return conv.id

    async def _memory_command(self, asked: Asked) -> None:
        """`/memory`: the conversation's own notes (the sender's in a DM, the chat's in a group).

        Bare, it posts a card with buttons where the platform has them; otherwise, and for
        `/memory stop|use|delete NAME | erase`, it answers privately in text. Nothing enters the
        conversation the model sees."""
        message, args = asked.message, asked.command.raw_args
        # A person may always see and change their own notes, also where personal memory is off.
        holder = memory.holder_of(chat_kind=message.chat_kind, platform=message.platform,
                                  workspace=message.workspace, channel=message.channel,
                                  person_id=asked.person_id, allow_personal=True)
        assert not isinstance(holder, memory.NoStore)  # a command always has a person
        action = args[0].lower() if args else ""
        if action in ("", "list") and await self._memory_cards.post(target_for(message), holder):
            await self._keep(asked, "memory", "/memory")  # drawn again from the notes as they are then
            return
        if action in ("stop", "use", "delete"):
            refusal = await self._memory_cards.may_change(holder, target_for(message), message.sender)
            if refusal is not None:
                await self._tell(asked, refusal)
                return
        text = await memory.self_service(
            NoteStore(self._store), holder, action, args[1] if len(args) > 1 else None,
            default_agent=asked.agent_id,
        )
        await self._tell(asked, text)

    # --- people -----------------------------------------------------------------------------

    def _account(self, message: InboundMessage) -> AccountRef:
        return AccountRef(message.platform, message.workspace, message.sender.account_id,
                          message.sender.display_name)

    async def _whoami(self, asked: Asked) -> None:
        accounts = await self._people.accounts(asked.person_id)
        lines = [f"I know you as one person with {len(accounts)} account{'s' if len(accounts) != 1 else ''}:"]
        lines += [f"- {PLATFORM_NAMES.get(a.platform, a.platform)}: {a.display_name or a.account_id} "
                  f"(`{a}`)" for a in accounts]
        if len(accounts) == 1:
            lines.append("To make your account on another platform you too, send `/link` here in a direct message.")
        await self._tell(asked, "\n".join(lines))

    async def _link(self, asked: Asked) -> None:
        message = asked.message
        if not asked.self_linking:
            await self._tell(asked, "Linking accounts yourself is switched off here; an admin can link them "
                                "(`agent-gateway people link`).")
            return
        if not asked.command.raw_args:
            code = await self._people.issue_code(asked.person_id)
            minutes = int(LINK_TTL.total_seconds() // 60)
            await self._tell(asked, f"Your link code is `{code[:4]}-{code[4:]}`. Within {minutes} minutes, send "
                                f"`/link {code[:4]}-{code[4:]}` to me in a direct message on the other platform (or "
                                "in the web chat) to make that account you too. It works once; don't share it: "
                                "whoever sends it becomes you here, notes included.")
            return
        account = self._account(message)
        until = self._link_tries.blocked_until(account)
        if until is not None:
            minutes = max(1, -(-int((until - self._store.clock.now()).total_seconds()) // 60))
            await self._tell(asked, f"Too many wrong link codes from this account: try again after {until:%H:%M} UTC "
                                f"(in {minutes} minute{'s' if minutes != 1 else ''}). Nothing was linked.")
            return
        linked = await self._people.redeem(" ".join(asked.command.raw_args), account)
        if linked is None:
            self._link_tries.failed(account)
            await self._tell(asked, "That code doesn't work: it may be mistyped, used already or older than "
                                f"{int(LINK_TTL.total_seconds() // 60)} minutes. Send `/link` on your other account "
                                "for a new one.")
            return
        self._link_tries.succeeded(account)
        if linked.already:
            await self._tell(asked, "This account is already linked to that person.")
            return
        accounts = await self._people.accounts(linked.person_id)
        others = ", ".join(PLATFORM_NAMES.get(a.platform, a.platform) for a in accounts
                           if (a.platform, a.account_id) != (message.platform, message.sender.account_id))
        note = f" {linked.notes_moved} note(s) this account had came along." if linked.notes_moved else ""
        if linked.notes_kept_apart:
            note += f" {linked.notes_kept_apart} note(s) named like one you already had were kept apart."
        await self._tell(asked, f"Linked: this account is now the same person as your account on {others}.{note} "
                            "`/whoami` lists them; `/unlink` undoes it.")

    async def _unlink(self, asked: Asked) -> None:
        account = self._account(asked.message)
        if await self._people.unlink(account, actor="self") is None:
            await self._tell(asked, "This account isn't linked to any other.")
        else:
            await self._tell(asked, "Unlinked: this account is a person of its own again. Notes agents kept "
                                      "stay with your other accounts.")

    # --- conversations ----------------------------------------------------------------------

    async def _new(self, asked: Asked) -> None:
        message = asked.message
        if message.platform == "web":
            await self._tell(asked, "Press “New conversation” at the top of the page to start fresh.")
            return
        if asked.existing is not None:
            await self._store.retire_conversation(asked.existing)
        self._outbound.send(target_for(message), "_Starting fresh: from here on I don't see what we said before._")
