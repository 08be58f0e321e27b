"""A conversation's plan, kept in capability state: the store behind the harness's `Planning` tools.

The plan belongs to the conversation, not to one run: a chat message is a run here, and a run that
parks on an approval resumes as a fresh run, so the plan lives in the database keyed by the
conversation id (capability "planning", key "current") and every replica and restart sees it.

Two more keys keep the seed's rules:
- "parked:<run id>": the plan as it stood when that run parked. On resume it is restored over
  "current", so the parked run's plan wins over anything written while it waited.
- "finished:<time>": a plan whose steps were all completed or cancelled, moved aside when the next
  run starts. It is kept, and never re-seeded into a later run.

It implements the harness's `PlanStore` protocol over `CapabilityState`; each operation is one
read and at most one write of the whole (short) list as JSON.
"""

from __future__ import annotations

import json

from pydantic_ai_harness.planning import PlanItem, TaskStatus

from gateway.clock import Clock
from gateway.store.capability_state import CapabilityState

CAPABILITY = "planning"
CURRENT = "current"
DONE = frozenset({TaskStatus.completed, TaskStatus.cancelled})


def _dump(items: list[PlanItem]) -> str:
    return json.dumps([item.model_dump(mode="json") for item in items])


def _load(raw: str | None) -> list[PlanItem]:
    return [PlanItem.model_validate(v) for v in json.loads(raw)] if raw else []


class ConversationPlanStore:
    """`PlanStore` for one conversation's plan."""

    def __init__(self, state: CapabilityState, conversation_id: str, clock: Clock) -> None:
        self._state, self._scope, self._clock = state, conversation_id, clock

    async def get_items(self) -> list[PlanItem]:
        return _load(await self._state.get(CAPABILITY, self._scope, CURRENT))

    async def set_items(self, items: list[PlanItem]) -> None:
        await self._state.put(CAPABILITY, self._scope, CURRENT, _dump(items))

    async def get_item(self, item_id: str) -> PlanItem | None:
        return next((i for i in await self.get_items() if i.id == item_id), None)

    async def add_item(self, item: PlanItem) -> PlanItem:
        items = await self.get_items()
        if any(i.id == item.id for i in items):
            raise ValueError(f"A step with id {item.id!r} is already in this plan.")
        await self.set_items([*items, item])
        return item.model_copy(deep=True)

    async def update_item(self, item_id: str, *, content: str | None = None, status: TaskStatus | None = None,
                          active_form: str | None = None, parent_id: str | None = None,
                          depends_on: list[str] | None = None) -> PlanItem | None:
        items = await self.get_items()
        item = next((i for i in items if i.id == item_id), None)
        if item is None:
            return None
        changes = {"content": content, "status": status, "active_form": active_form, "parent_id": parent_id,
                   "depends_on": list(depends_on) if depends_on is not None else None}
        for name, value in changes.items():
            if value is not None:
                setattr(item, name, value)
        await self.set_items(items)
        return item.model_copy(deep=True)

    async def remove_item(self, item_id: str) -> bool:
        items = await self.get_items()
        kept = [i for i in items if i.id != item_id]
        if len(kept) == len(items):
            return False
        await self.set_items(kept)
        return True

    # --- the run's boundaries -------------------------------------------------------------

    async def begin_run(self, run_id: str) -> None:
        """Seed the run: a parked run's own copy wins on resume; a finished plan is put aside."""
        parked = await self._state.get(CAPABILITY, self._scope, f"parked:{run_id}")
        if parked is not None:
            await self._state.put(CAPABILITY, self._scope, CURRENT, parked)
            await self._state.delete(CAPABILITY, self._scope, f"parked:{run_id}")
            return
        items = await self.get_items()
        if items and all(i.status in DONE for i in items):
            stamp = self._clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            await self._state.put(CAPABILITY, self._scope, f"finished:{stamp}", _dump(items))
            await self._state.delete(CAPABILITY, self._scope, CURRENT)

    async def park(self, run_id: str) -> None:
        """Keep the plan as this run leaves it, for its resume."""
        await self._state.put(CAPABILITY, self._scope, f"parked:{run_id}", _dump(await self.get_items()))

    async def finished(self) -> list[list[PlanItem]]:
        """Plans finished in this conversation, oldest first (kept, never re-seeded)."""
        keys = [k for k in await self._state.keys(CAPABILITY, self._scope) if k.startswith("finished:")]
        return [_load(await self._state.get(CAPABILITY, self._scope, k)) for k in keys]
