"""The bot token scopes the Slack adapter needs: docs/slack.md's app manifest, as `doctor` checks them.

Slack names a token's scopes in the `x-oauth-scopes` header of every Web API answer, so one
`auth.test` tells both whether the token works and what it may do. A test keeps this list and
the manifest the same.
"""

from __future__ import annotations

# scope -> what is missing without it
NEEDED = {
    "app_mentions:read": "mentions in channels are never heard",
    "chat:write": "no reply, card or notice can be posted",
    "channels:history": "messages in public channels are not heard, and read_channel_history fails there",
    "groups:history": "messages in private channels are not heard",
    "im:history": "DMs are not heard",
    "mpim:history": "group DMs are not heard",
    "channels:read": "get_channel_info, list_channel_members and search_channels fail",
    "groups:read": "the channel tools fail in private channels",
    "im:read": "the channel tools fail in DMs",
    "mpim:read": "the channel tools fail in group DMs",
    "users:read": "people show as ids, not names",
    "files:read": "files shared with a message are not read",
    "files:write": "charts and shared files are not posted into the conversation",
}
# In the manifest, but a binding works without them.
OPTIONAL = {
    "chat:write.customize": "a handoff's answer cannot carry the other agent's name",
    "commands": "slash commands are not offered",
}


def missing(granted_header: str | None) -> list[str]:
    """The needed scopes a token lacks, given its `x-oauth-scopes` header (None: Slack did not say)."""
    if granted_header is None:
        return []
    granted = {s.strip() for s in granted_header.split(",") if s.strip()}
    return [scope for scope in NEEDED if scope not in granted]
