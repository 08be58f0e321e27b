"""Slack's published rate limits (docs.slack.dev/apis/web-api/rate-limits), as the adapter paces by them.

Each Web API method has a tier: calls a minute for the app in one workspace (Tier 2: 20,
Tier 3: 50, Tier 4: 100). Checked against each method's reference page: `chat.update` Tier 3,
`chat.postEphemeral` Tier 4, `chat.startStream` Tier 2, `chat.appendStream` Tier 4,
`chat.stopStream` Tier 2; the channel tools' reads `conversations.list` Tier 2,
`conversations.info`, `conversations.history` and `conversations.replies` Tier 3,
`conversations.members` and `users.info` Tier 4; the external upload's
`files.getUploadURLExternal` and `files.completeUploadExternal` Tier 4 (each page's Facts, "Rate limits: Tier 4":
api.slack.com/methods/files.getUploadURLExternal and api.slack.com/methods/files.completeUploadExternal, read
2026-12-01; the upload URL itself is a file host's and no tier counts it) (a commercially distributed app that is not in
the Marketplace gets 1 a minute for history and replies: Slack's rule, not paced here). Two methods have special limits, counted per channel rather than per
workspace: `chat.postMessage`, about one message a second in a channel, and
`assistant.threads.setStatus`, which Slack's reference marks "special" and its own SDKs treat
like `chat.postMessage`, per channel (the Java SDK's `SpecialTier_assistant_threads_setStatus`:
60 a minute per DM; a minute's window, so a few threads starting together in one channel each
get their status).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.outbound.budget import Rule, Scope

TIERS = (
    Rule("chat.update", 50, 60.0),
    Rule("chat.delete", 50, 60.0),
    Rule("chat.postEphemeral", 100, 60.0),
    Rule("chat.startStream", 20, 60.0),
    Rule("chat.appendStream", 100, 60.0),
    Rule("chat.stopStream", 20, 60.0),
    Rule("conversations.list", 20, 60.0),
    Rule("conversations.info", 50, 60.0),
    Rule("conversations.history", 50, 60.0),
    Rule("conversations.replies", 50, 60.0),
    Rule("conversations.members", 100, 60.0),
    Rule("users.info", 100, 60.0),
    Rule("files.getUploadURLExternal", 100, 60.0),  # Tier 4 (api.slack.com/methods/files.getUploadURLExternal)
    Rule("files.completeUploadExternal", 100, 60.0),  # Tier 4 (api.slack.com/methods/files.completeUploadExternal)
)
PER_CHANNEL = Rule("channel", 1, 1.0)  # chat.postMessage
STATUS_PER_CHANNEL = Rule("assistant.threads.setStatus", 60, 60.0)
RULES = (*TIERS, PER_CHANNEL, STATUS_PER_CHANNEL)


class SlackBudget:
    """The rules one binding paces by (`scaled` copies of `RULES` in tests and benches)."""

    def __init__(self, rules: Sequence[Rule] = RULES) -> None:
        self._rules = {r.name: r for r in rules}

    def scopes(self, method: str, channel: str) -> list[Scope]:
        scopes: list[Scope] = []
        if method == "chat.postMessage":
            scopes.append((self._rules["channel"], channel))
        elif method == STATUS_PER_CHANNEL.name:
            scopes.append((self._rules[method], channel))
        elif (tier := self._rules.get(method)) is not None:
            scopes.append((tier, ""))
        return scopes
