"""schedules: the agent sets tasks that run later on their own ("remind me at nine", "every Monday, ...").

A task belongs to the conversation it was made in and posts there (a Slack thread: that thread),
as a run of its own with no message to answer (`gateway.runs.scheduled`), as the person who made
it, their access asked again each time. The store claims each occurrence once, across restarts
and replicas (`gateway.store.schedules`).

Who sees what: a person lists and cancels their own tasks; the binding's named deciders also every
task of the conversation. Creating one is side-effecting (gated like any side effect); the limits
per person and per conversation come from this entry's config and are said as a refusal.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from bindings.cron import cron_problem, local_text, zone_problem
from gateway.runs.scheduled import Schedules, task_line, where_text
from gateway.runs.turn import Turn
from gateway.store.models import ScheduledTask
from gateway.store.schedules import CANCELLED, CHAT, NewTask

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

TASK_CHARS = 2000


class SchedulesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_person: int = Field(default=10, ge=1, le=1000, description="Live tasks (active or paused) one person may "
                                                                  "have, across conversations")
    per_conversation: int = Field(default=20, ge=1, le=1000, description="Live tasks one conversation may have")
    catch_up: bool = Field(default=True, description="After the gateway was down: a one-shot runs once, late, and a "
                           "recurring task runs its latest missed occurrence once; false skips what was missed")
    timezone: str | None = Field(default=None, description="The time zone a task is read in when the model names "
                                 "none; default the clock capability's, else UTC")


def default_zone(turn: Turn, cfg: SchedulesConfig) -> str:
    """This entry's zone, else the agent's clock capability's, else UTC."""
    if cfg.timezone:
        return cfg.timezone
    for entry in turn.agent.capabilities:
        if entry.id == "clock" and entry.enabled and isinstance(entry.config.get("timezone"), str):
            return str(entry.config["timezone"])
    return "UTC"


def decides_here(turn: Turn) -> bool:
    """The binding names this person among its deciders: they see and cancel the conversation's tasks."""
    deciders = turn.binding.approvals.deciders
    if not isinstance(deciders, list):
        return False
    who = turn.requester
    names = {who.account_id, f"{turn.conversation.platform}:{who.account_id}", who.person_id} - {None}
    return bool(names & set(deciders))


def visible(turn: Turn, task: ScheduledTask) -> bool:
    mine = task.creator_person_id is not None and task.creator_person_id == turn.requester.person_id
    return mine or (decides_here(turn) and task.conversation_id == turn.conversation.id)


def _parse_at(at: str, zone: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(at.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:  # a local time: read in the task's zone
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    return moment.astimezone(timezone.utc)


def _toolset(schedules: Schedules, cfg: SchedulesConfig) -> FunctionToolset[Turn]:
    async def schedule_task(ctx: RunContext[Turn], task: str, at: str | None = None, cron: str | None = None,
                            timezone: str | None = None) -> str:
        """Schedule work to run later on its own in this conversation: once at an instant, or repeatedly on a cron.

        Use it when someone asks for something later or regularly ("remind me at nine", "every Monday, post
        the open incidents"). When the time comes, you are run here with the task as your instruction and
        post the answer in this conversation (this thread), as the person asking now. For something to do
        now, just do it. Give exactly one of `at` or `cron`.

        Args:
            task: What to do then, written as an instruction to yourself with everything needed
                (nobody will be there to ask), e.g. "Remind Ala to send the invoice". At most 2000 characters.
            at: For a one-time task: an ISO 8601 date and time, e.g. "2026-03-02T09:00" (read in `timezone`)
                or with an offset "2026-03-02T09:00+01:00". Must be in the future.
            cron: For a repeating task: five fields, minute hour day-of-month month day-of-week, minute
                granularity, e.g. "0 9 * * MON" for 09:00 every Monday, "*/30 8-17 * * MON-FRI".
            timezone: The IANA time zone `at` or `cron` is read in, e.g. "Europe/Warsaw". Default: the agent's
                configured zone (often UTC). DST is followed: 09:00 stays 09:00 local.

        Returns:
            A sentence with the new task's id (what cancel_scheduled_task takes) and when it runs next, as an
            ISO date and time with offset; or a sentence saying why not (a limit reached, the time already past).
        """
        turn = ctx.deps
        if (at is None) == (cron is None):
            return trouble(ctx, "mistake", "give exactly one of `at` (an ISO 8601 date and time, for once) or "
                                           "`cron` (five fields, for a repeating task)")
        if not task.strip():
            return trouble(ctx, "mistake", "`task` is empty: say what to do when it runs")
        if len(task) > TASK_CHARS:
            return trouble(ctx, "mistake", f"`task` has {len(task)} characters; keep it within {TASK_CHARS}")
        zone = timezone or default_zone(turn, cfg)
        if (problem := zone_problem(zone)) is not None:
            return trouble(ctx, "mistake", problem)
        when: datetime | None = None
        if cron is not None:
            cron = " ".join(cron.split())
            if (problem := cron_problem(cron)) is not None:
                return trouble(ctx, "mistake", problem)
        else:
            assert at is not None
            when = _parse_at(at, zone)
            if when is None:
                return trouble(ctx, "mistake", f"{at!r} is not an ISO 8601 date and time, e.g. 2026-03-02T09:00")
            if when <= turn.clock.now():
                return (f"Not scheduled: {local_text(when, zone)} is already past (it is now "
                        f"{local_text(turn.clock.now(), zone)}). Pick a later time.")
        made = await schedules.db.create(NewTask(
            conversation_id=turn.conversation.id, binding_id=turn.binding.id, task=task.strip(), cron=cron, at=when,
            timezone=zone, creator_person_id=turn.requester.person_id, creator_account=turn.requester.account_id,
            creator_name=turn.requester.name, catch_up=cfg.catch_up, origin=CHAT,
        ), per_person=cfg.per_person, per_conversation=cfg.per_conversation)
        if isinstance(made, str):
            return f"Not scheduled: {made}."
        assert made.next_at is not None
        how = f"on cron {cron}" if cron else "once"
        return (f"Scheduled task ID: {made.id[:8]} — {how}, next run {local_text(made.next_at, zone)} ({zone}); it "
                "will post here.")

    async def list_scheduled_tasks(ctx: RunContext[Turn]) -> str:
        """List the scheduled tasks you may see: the asking person's own, anywhere; and, for someone the
        binding names as a decider, every task of this conversation.

        Use it before cancelling (the ids come from here) or when asked what is scheduled.

        Returns:
            One line per task with its id, what it does, when (cron or instant, with time zone), the next run as
            an ISO date and time with offset, who made it, and where it posts ("here" or another conversation);
            'No scheduled tasks.' when there are none. At most 50 lines, soonest first; a last line says how
            many more.
        """
        turn = ctx.deps
        tasks = [t for t in await schedules.db.listed() if visible(turn, t)]
        if not tasks:
            return "No scheduled tasks."
        lines = []
        for t in tasks[:50]:
            conv = await schedules.store.conversation(t.conversation_id)
            here = t.conversation_id == turn.conversation.id
            lines.append(f"{task_line(t)} — posts {'here' if here else where_text(conv)}")
        if len(tasks) > 50:
            lines.append(f"[{len(tasks) - 50} more not shown]")
        return "\n".join(lines)

    async def cancel_scheduled_task(ctx: RunContext[Turn], id: str) -> str:
        """Cancel a scheduled task for good, so it never runs again.

        Use it when someone asks to stop or remove a scheduled task; a person may cancel their own, and the
        binding's deciders also this conversation's.

        Args:
            id: The task's id as list_scheduled_tasks or schedule_task gave it (the first 8 characters are
                enough).

        Returns:
            A sentence naming the cancelled task, or one saying why not (no such task among the ones you may
            see, or it had ended already).
        """
        turn = ctx.deps
        found = [t for t in await schedules.db.find(id.strip()) if visible(turn, t)]
        if len(found) != 1:
            return trouble(ctx, "mistake", f"no scheduled task {id!r} among the ones this person may see; "
                                           "list_scheduled_tasks gives the ids")
        [task] = found
        who = turn.requester.name or turn.requester.account_id or "someone"
        if await schedules.db.set_status(task.id, CANCELLED, reason=f"cancelled by {who}") is None:
            return f"Task {task.id[:8]} had already ended ({task.status}); nothing to cancel."
        return f"Cancelled task ID: {task.id[:8]} ({task.task[:80]})."

    return FunctionToolset([schedule_task, list_scheduled_tasks, cancel_scheduled_task])


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    assert isinstance(ctx.config, SchedulesConfig)
    return simple(toolsets=[_toolset(ctx.part("schedules", Schedules), ctx.config)])


def _check(cfg: BaseModel) -> list[tuple[tuple[str | int, ...], str]]:
    assert isinstance(cfg, SchedulesConfig)
    if cfg.timezone and (problem := zone_problem(cfg.timezone)):
        return [(("timezone",), problem)]
    return []


register(CapabilityDecl(
    id="schedules",
    name="Scheduled tasks",
    category="utility",
    tools=(
        ToolDecl("schedule_task", side_effecting=True,
                 summary="Schedule work to run later on its own here: once at an instant, or on a cron."),
        ToolDecl("list_scheduled_tasks", summary="List the scheduled tasks the person may see, with their next run."),
        ToolDecl("cancel_scheduled_task", summary="Cancel a scheduled task by id."),
    ),
    build=build,
    config_model=SchedulesConfig,
    check=_check,
    # The person, the conversation, the binding and the clock are read from the run's deps on every call.
    shared=True,
    description=("Tasks the agent sets to run later on its own, once or on a cron, posting in the conversation "
                 "they were made in, as the person who asked; exactly once across restarts and replicas."),
))
