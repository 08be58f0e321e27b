"""planning: a checklist the model keeps while it works, belonging to the conversation.

The harness's `Planning` is the capability (its toolset, its cache-safe tail reminder: the plan
is appended after the last durable user content of each request, never put in the system
prompt). What is ours is the store and the run's boundaries, because the seed's rule is that
the plan belongs to the conversation, not to one run:

- `ConversationPlanStore` (gateway/store/plans.py) keeps it in the database keyed by the
  conversation, so it survives turns, restarts and replicas;
- at the start of a run a parked run's own copy is restored (it wins on resume) and a finished
  plan is put aside (kept, not re-seeded); when a run parks, its plan is copied for its resume.

The tools are handed this repository's text (`tool_text`), so they read like every other tool.
None acts on the world: nothing here is side-effecting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import DeferredToolRequests
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext
from pydantic_ai_harness.planning import Planning, PlanStore

from gateway.store.plans import ConversationPlanStore
from gateway.runs.turn import Turn

from .registry import BuildContext, CapabilityDecl, ToolDecl, register
from .tool_text import tool_text


class PlanningConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enable_subtasks: bool = Field(default=False, description="adds add_subtask, set_dependency, get_available_tasks "
                                                             "and the blocked status")
    cache_ttl: Literal["5m", "1h"] = Field(default="5m", description="how long the prompt prefix before the plan "
                                                                     "reminder may stay cached")


_PLAN = "The plan is this conversation's: it is still here in the next message and after a restart."
DESCRIPTIONS = {
    "write_plan": tool_text(
        "Create or replace the whole plan (a checklist of steps). Pass the complete ordered list every time, "
        "unchanged, completed and cancelled steps included; keep exactly one step in_progress.",
        "Use it first for work of three or more steps, then as you start and finish steps. To change one step, "
        f"use update_task_status or add_task instead. {_PLAN}",
        "'Plan updated: N step(s).' and the checklist, or 'Plan not updated: ...' saying what to fix "
        "(duplicate ids, a status or field that needs subtasks).",
    ),
    "read_plan": tool_text(
        "Read the current plan: every step with its id and status, and a progress summary.",
        "Use it before a granular edit (the ids come from here). The plan is also shown to you at the end of "
        "each request, so you rarely need it otherwise.",
        "The whole plan, one line per step, then 'Summary: ...'; 'No plan yet.' when there is none. "
        "Never truncated.",
    ),
    "add_task": tool_text(
        "Append one new pending step to the plan.",
        "Use it to add a single step without resending the plan; to lay out several, use write_plan.",
        "'Added step ... with id: ID'.",
    ),
    "update_task_status": tool_text(
        "Set one step's status by id: pending, in_progress, completed or cancelled.",
        "Mark a step in_progress when you start it and completed only when it is fully done. For several "
        "steps at once, use update_task_statuses.",
        "'Updated step ... status to ...', or 'Step with id ... not found.' (read_plan lists the ids).",
    ),
    "update_task_statuses": tool_text(
        "Set several steps' statuses in one call; the batch is checked first and applied whole or not at all.",
        "Use it to hand off from a finished step to the next (list the finished one first).",
        "'Updated N step(s):' and one line per step, or 'No changes applied. Errors:' and each error.",
    ),
    "remove_task": tool_text(
        "Delete a step from the plan by id.",
        "Use it for a step that is no longer relevant or was made by mistake; to record work done, use "
        "update_task_status instead.",
        "'Removed step ... (id: ...)', or 'Step with id ... not found.'.",
    ),
    "add_subtask": tool_text(
        "Add a pending subtask under an existing step.",
        "Use it to break a large step into a handful of smaller ones; finish them before the parent.",
        "'Added subtask ... with id: ID (parent: ID)', or 'Parent step with id ... not found.'.",
    ),
    "set_dependency": tool_text(
        "Record that one step must wait for another; the waiting step is blocked until the other is "
        "completed or cancelled.",
        "Use it when order matters. Cycles, duplicates and self-dependencies are refused.",
        "'Added dependency: ...' (saying when the step was blocked), or why it was refused.",
    ),
    "get_available_tasks": tool_text(
        "List the steps that can be worked on now: not done, not blocked, no unfinished dependency.",
        "Use it to choose the next step when dependencies are involved.",
        "A numbered list with ids, or 'No available steps...' when everything left is done or blocked.",
    ),
}
CORE = ("write_plan", "read_plan", "add_task", "update_task_status", "update_task_statuses", "remove_task")
SUBTASKS = ("add_subtask", "set_dependency", "get_available_tasks")


def plan_store(ctx: RunContext[Turn]) -> ConversationPlanStore:
    turn = ctx.deps
    # The conversation's plan; a delegate's own unless the parent lent planning (`Turn.scope`).
    return ConversationPlanStore(turn.state, turn.scope("planning", "conversation"), turn.clock)


@dataclass
class ConversationPlanning(Planning[Turn]):
    """The harness's Planning, seeded from the conversation's plan at the start of each run."""

    async def for_run(self, ctx: RunContext[Turn]) -> ConversationPlanning:
        clone = await super().for_run(ctx)
        store = clone.resolve_store(ctx)
        assert isinstance(store, ConversationPlanStore)
        await store.begin_run(ctx.deps.run_id)
        return clone  # type: ignore[return-value]

    def resolve_store(self, ctx: RunContext[Turn]) -> PlanStore:
        """The run's store: its own copy's (`for_run`), else resolved from `ctx` and not kept. The harness keeps
        the first one it resolves, which on the built capability, every run's (`shared`), would be one run's
        plan for all."""
        return self._resolved_store or self._resolve_store(ctx)

    async def after_run(self, ctx: RunContext[Turn], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        if isinstance(result.output, DeferredToolRequests):
            store = self.resolve_store(ctx)
            assert isinstance(store, ConversationPlanStore)
            await store.park(ctx.deps.run_id)
        return result


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    assert isinstance(ctx.config, PlanningConfig)
    offered = CORE + (SUBTASKS if ctx.config.enable_subtasks else ())
    return ConversationPlanning(store_resolver=plan_store, enable_subtasks=ctx.config.enable_subtasks,
                                cache_ttl=ctx.config.cache_ttl, descriptions={n: DESCRIPTIONS[n] for n in offered})


register(CapabilityDecl(
    id="planning",
    name="Planning",
    category="reasoning",
    # The subtask tools are declared even when not offered, so a binding can gate or rename them.
    tools=tuple(ToolDecl(name, summary=DESCRIPTIONS[name].split("</summary>")[0].removeprefix("<summary>")
                         .split("\n")[0]) for name in CORE + SUBTASKS),
    build=build,
    config_model=PlanningConfig,
    # The store is resolved from the run's deps, kept only in each run's own copy (`for_run`, `resolve_store`).
    shared=True,
    description=("A checklist the agent keeps for multi-step work. It belongs to the conversation (it survives "
                 "messages, restarts and replicas) and is shown to the agent at the end of each request, not in "
                 "the system prompt."),
))
