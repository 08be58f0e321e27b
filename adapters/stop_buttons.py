"""Which replies carry a Stop control, and which reply's next edit is its final: kept alike by every
adapter whose control rides on the reply message itself (Slack's blocks, Telegram's inline keyboard,
Mattermost's props).

Such a control must be passed again with every edit (an edit without it drops it), and a finished
reply's final edit goes without it, which takes it away in the same call: the runner says so first
(`gateway.outbound.adapter.FinalEditTakesStop`), and its removal afterwards then has nothing left to do.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")  # how the adapter names a reply message (an id, or channel and id)


class StopButtons(Generic[K]):
    """The Stop controls this process put on replies, by reply; and the replies whose next edit is final."""

    def __init__(self) -> None:
        self._on: dict[K, str] = {}  # reply -> the run its control stops
        self._final: set[K] = set()

    def shown(self, key: K, run_id: str) -> None:
        """The control is on the reply now."""
        self._on[key] = run_id

    def ends_with_edit(self, key: K) -> bool:
        """The reply's next edit is its final and goes without the control (if it has one: True)."""
        if key in self._on:
            self._final.add(key)
            return True
        return False

    def for_edit(self, key: K) -> tuple[str | None, bool]:
        """For an edit of the reply: the run whose control it carries (None: none), and whether it is the final."""
        final = key in self._final
        return (None if final else self._on.get(key)), final

    def edited(self, key: K, *, final: bool) -> None:
        """An edit went out; a final one took the control away with it."""
        if final:
            self._final.discard(key)
            self._on.pop(key, None)

    def take_off(self, key: K) -> bool:
        """Before removing the control: whether there is one left to remove (it is forgotten here)."""
        self._final.discard(key)
        return self._on.pop(key, None) is not None

    def __contains__(self, key: object) -> bool:
        return key in self._on
