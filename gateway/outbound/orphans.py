"""A reply's posts that a killed process made and never recorded, found again on the platform.

Without this a run interrupted by a crash (SIGKILL, power loss) between posting its first draft
and recording it posts a second answer when it runs again, leaving the half-written first one
in the thread. Platforms whose API can list a conversation's messages declare the adapter
feature `FindsOwnPosts` (Slack, Mattermost); on the others that window stays open: Telegram's Bot API
cannot read a chat's history, so a message sent just before a kill and never recorded stays
beside the answer the restarted run sends.
The same for an approval card posted just before the kill (`FindsOwnCards`).
"""

from __future__ import annotations

import logging
from gateway.store.orphans import recovery_marks
from gateway.store.repo import Store
from gateway.outbound.adapter import ApprovalCard, FindsOwnCards, FindsOwnPosts, PlatformError, ReplyTarget, offered

log = logging.getLogger(__name__)


async def unrecorded_card(adapter: object, target: ReplyTarget, card: ApprovalCard) -> str | None:
    """A card a killed process posted and never recorded: found again, so it is not posted twice."""
    finder = offered(adapter, FindsOwnCards)
    if finder is None:
        return None
    try:
        return await finder.own_card(target, card)
    except PlatformError as e:  # at worst the card is posted again
        log.warning("could not look for an interrupted process's approval card: %s", e)
        return None


async def _own_posts(adapter: object, target: ReplyTarget, store: Store,
                     run_id: str) -> tuple[list[tuple[str, str]], set[str]]:
    """The bot's posts after the run's message, as the platform shows them now, and the ids replies recorded."""
    finder = offered(adapter, FindsOwnPosts)
    if finder is None:
        return [], set()
    after, known = await recovery_marks(store, run_id)
    if after is None:
        return [], known
    try:
        return await finder.own_posts_after(target, after), known
    except PlatformError as e:  # not worth failing the answer for: at worst it is posted again
        log.warning("could not look for an interrupted reply's posts: %s", e)
        return [], known


async def shown_now(adapter: object, target: ReplyTarget, store: Store, run_id: str) -> dict[str, str]:
    """What the platform shows now of the bot's posts after the run's message, by id: a draft's edits after
    its first are not recorded, so a row may hold less than its message shows (empty where it cannot tell)."""
    return dict((await _own_posts(adapter, target, store, run_id))[0])


async def unrecorded_posts(adapter: object, target: ReplyTarget, store: Store, run_id: str) -> list[tuple[str, str]]:
    """Posts of an interrupted run that no delivery row names: the reply continues in them."""
    found, known = await _own_posts(adapter, target, store, run_id)
    orphans = [(mid, text) for mid, text in found if mid not in known]
    if orphans:
        log.info("run %s continues in %d post(s) an interrupted process made", run_id, len(orphans))
    return orphans
