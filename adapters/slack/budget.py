"""Slack's published rate limits (api.slack.com/apis/rate-limits), as the adapter paces by them.

Each Web API method has a tier: calls a minute for the app in one workspace (Tier 2: 20,
Tier 3: 50, Tier 4: 100). `chat.postMessage` has its own: about one message a second in a
channel. The streaming methods' tiers are Slack's for `chat.startStream` / `chat.appendStream`
/ `chat.stopStream` as documented when they shipped (2, 4, 2).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.budget import Rule, Scope

TIERS = (
    Rule("chat.update", 50, 60.0),
    Rule("chat.delete", 50, 60.0),
    Rule("chat.postEphemeral", 100, 60.0),
    Rule("assistant.threads.setStatus", 50, 60.0),
    Rule("chat.startStream", 20, 60.0),
    Rule("chat.appendStream", 100, 60.0),
    Rule("chat.stopStream", 20, 60.0),
)
PER_CHANNEL = Rule("channel", 1, 1.0)
RULES = (*TIERS, PER_CHANNEL)


class SlackBudget:
    """The rules one binding paces by (`scaled` copies of `RULES` in tests and benches)."""

    def __init__(self, rules: Sequence[Rule] = RULES) -> None:
        self._rules = {r.name: r for r in rules}

    def scopes(self, method: str, channel: str) -> list[Scope]:
        scopes: list[Scope] = []
        if (tier := self._rules.get(method)) is not None:
            scopes.append((tier, ""))
        if method == "chat.postMessage":
            scopes.append((self._rules["channel"], channel))
        return scopes
