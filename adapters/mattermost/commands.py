"""The gateway's commands as Mattermost slash commands, registered through the API.

At start, for each of the bot's teams, each command of the core's table (`gateway.inbound.commands`)
becomes a custom slash command (`POST /api/v4/commands`, team-scoped) whose request URL is this
binding's callback under `http.public_url`; one already registered with that URL is reused, so a
restart adds nothing. The server POSTs a form to the URL with the token it issued for that command:
a request without one of our tokens gets 401 and runs nothing. A private answer goes back to the
command's `response_url` as an ephemeral (no system-admin bot needed); a public one is posted as
any reply is.

A trigger the server refuses (its own `/help`, another integration's word) stays `!`-only, and the
log says so; `!` commands keep working everywhere, with or without this.
"""

from __future__ import annotations

import hmac
import logging
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.inbound.commands import COMMANDS, CommandSpec
from gateway.outbound.adapter import PlatformError

from .client import MattermostAPIError, MattermostClient, SlashCommand

COMMAND_PATH = "/mattermost/commands/{binding_id}"
ANSWER_WINDOW = 60.0  # seconds after a command during which its private answers go to its response_url
ANSWER_USES = 5  # the server takes this many answers on one response_url
_MAX_PENDING = 1000


@dataclass(frozen=True, slots=True)
class Registered:
    team_id: str
    trigger: str
    command_id: str
    token: str


def _plain(text: str) -> str:
    return text.replace("`", "")


def _request(spec: CommandSpec, team_id: str, url: str) -> dict[str, object]:
    """The command as `POST /commands` takes it (display name ≤ 64, description ≤ 128 characters)."""
    hint = spec.usage.removeprefix(f"/{spec.name}").strip()
    return {"team_id": team_id, "trigger": spec.name, "method": "P", "url": url, "display_name": spec.name[:64],
            "description": _plain(spec.summary)[:128], "auto_complete": True,
            "auto_complete_desc": _plain(spec.summary)[:128], "auto_complete_hint": hint}


class NativeCommands:
    """One binding's slash commands: what it registered, and the answers owed to recent commands."""

    def __init__(self, callback_url: str | None, log: logging.Logger, clock: Clock) -> None:
        self.callback_url = callback_url
        self._log = log
        self._clock = clock  # the gateway's: how long an answer is owed
        self._registered: list[Registered] = []
        self.done = False  # registered (or found nothing to do) since start
        self._answers: dict[tuple[str, str], tuple[str, float, int]] = {}  # (channel, user) -> (url, until, uses)
        # Trigger ids standing in for a post a top-level command in a channel never made (the core threads
        # its answers under the message): what is posted "in that thread" goes to the channel itself.
        self._anchors: OrderedDict[str, None] = OrderedDict()

    async def register(self, client: MattermostClient, team_ids: list[str]) -> None:
        """Register (or find) every command on every team; a refusal is logged, never raised."""
        if self.done:
            return
        if self.callback_url is None:
            self._log.info("Mattermost slash commands not registered: http.public_url is not set, so the server "
                           "could not reach us; the `!` commands keep working")
            self.done = True
            return
        registered: list[Registered] = []
        for team_id in team_ids:
            try:
                registered += await self._register_team(client, team_id)
            except MattermostAPIError as e:
                if e.status == 403:
                    self._log.warning("Mattermost slash commands not registered on team %s: the bot account lacks the "
                                      "manage_slash_commands permission; the `!` commands keep working", team_id)
                    continue
                self._log.warning("Mattermost slash commands not registered on team %s: %s", team_id, e)
                continue
            except PlatformError as e:  # the server did not answer: try again on the next connect
                self._log.warning("Mattermost slash commands not registered yet on team %s: %s", team_id, e)
                return
        self._registered = registered
        self.done = True
        if registered:
            self._log.info("Mattermost slash commands ready: %s",
                           ", ".join(sorted({f"/{r.trigger}" for r in registered})))

    async def _register_team(self, client: MattermostClient, team_id: str) -> list[Registered]:
        assert self.callback_url is not None
        existing: list[SlashCommand] = await client.team_commands(team_id)
        out: list[Registered] = []
        for spec in COMMANDS:
            if spec.hidden:
                continue
            same = [c for c in existing if c.get("trigger") == spec.name and not c.get("delete_at")]
            ours = next((c for c in same if c.get("url") == self.callback_url), None)
            if ours is None and same:
                self._log.warning("/%s is another integration's on team %s: it stays `!%s` here", spec.name, team_id,
                                  spec.name)
                continue
            if ours is None:
                try:
                    ours = await client.create_command(_request(spec, team_id, self.callback_url))
                except MattermostAPIError as e:
                    if e.error_id != "api.command.duplicate_trigger.app_error":
                        raise
                    self._log.info("/%s is taken on team %s (one of Mattermost's own commands): it stays `!%s`",
                                   spec.name, team_id, spec.name)
                    continue
            out.append(Registered(team_id, spec.name, str(ours.get("id", "")), str(ours.get("token", ""))))
        return out

    def verify(self, token: str, command: str) -> Registered | None:
        """The registration `token` was issued for, if it is one of ours and names `command`."""
        found = None
        for r in self._registered:  # compared in constant time, every one of them
            if r.token and hmac.compare_digest(r.token.encode(), token.encode()):
                found = r
        if found is None or command.lower() != f"/{found.trigger}":
            return None
        return found

    def anchor(self, trigger_id: str) -> None:
        self._anchors[trigger_id] = None
        while len(self._anchors) > _MAX_PENDING:
            self._anchors.popitem(last=False)

    def root_id(self, thread: str | None) -> str:
        """The `root_id` for a post in `thread`: none for a top-level command's stand-in thread."""
        return "" if not thread or thread in self._anchors else thread

    def owe_answer(self, channel_id: str, user_id: str, response_url: str, server: str) -> None:
        """A command just came: private answers to this person here go to its `response_url`
        for a minute, when that URL is on the server we talk to (never anywhere else)."""
        mine, theirs = urllib.parse.urlsplit(server), urllib.parse.urlsplit(response_url)
        if (theirs.scheme, theirs.netloc) != (mine.scheme, mine.netloc):
            return
        now = self._clock.monotonic()
        if len(self._answers) > _MAX_PENDING:
            self._answers = {k: v for k, v in self._answers.items() if v[1] > now}
        self._answers[(channel_id, user_id)] = (response_url, now + ANSWER_WINDOW, 0)

    def answer_url(self, channel_id: str, user_id: str) -> str | None:
        """Where a private answer to this person here goes now, if a command of theirs is owed one."""
        owed = self._answers.get((channel_id, user_id))
        if owed is None:
            return None
        url, until, uses = owed
        if until < self._clock.monotonic() or uses >= ANSWER_USES:
            del self._answers[(channel_id, user_id)]
            return None
        self._answers[(channel_id, user_id)] = (url, until, uses + 1)
        return url
