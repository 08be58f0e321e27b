"""Scheduled runs: a task's occurrence becomes a run in its conversation with no message to answer.

A gateway extension, like background runs: it sweeps on its own loop (and at start), finds the
tasks that are due, and has the store claim each occurrence and queue its run in one transaction
(`gateway.store.schedules`). From there it is the conversation's ordinary queue: the run waits
behind a turn in flight, never starts while an approval there is open (a parked run holds the
conversation), runs as the person who made the task (the runner prepares it like any run), and
an approval it needs parks with a card in that conversation's thread like any other.

Before an occurrence of a person's task fires, their access is asked again, by the same rule the
binding applies to a message from them (`gateway.inbound.admission.admit`): a person who lost it
has the task paused and is told why, privately, where the task posts.

Admin schedules (a binding file's `schedules:`) are kept in the store too, so replicas share
their claims; each sweep applies the loaded config's list when it changed (a reload).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from bindings.cron import local_text
from bindings.loader import LoadedConfig

from gateway.clock import Clock
from gateway.periodic import every
from gateway.inbound.admission import admit
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.store import repo
from gateway.store.models import ScheduledTask
from gateway.store.pairing import PairingStore
from gateway.store.schedules import ADMIN, FIRED, MISSED, NewTask, ScheduleStore
from gateway.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gateway.daemon import Gateway

log = logging.getLogger("gateway.runs.scheduled")

FAILED = "failed"  # an occurrence that could not fire (its task paused): the metric's third outcome

__all__ = ["Schedules", "scheduled_prompt", "task_json", "task_line"]


class Tell(Protocol):
    def __call__(self, target: Any, markdown: str, *, private_to: str | None = None) -> Any: ...


class Schedules:
    """The scheduled tasks this deployment fires, on whichever replica's sweep gets there first."""

    def __init__(self, store: repo.Store, config: Callable[[], LoadedConfig], wake: Callable[[str], None],
                 tell: Tell, count: Callable[[str, int], None], *, sweep_every: float) -> None:
        self.store = store
        self.db = ScheduleStore(store)
        self._config, self._wake, self._tell, self._count = config, wake, tell, count
        self._pairing = PairingStore(store.sessions, store.clock)
        self._sweep_every = sweep_every
        self._synced: LoadedConfig | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, gateway: Gateway) -> Schedules:
        """Wired to a gateway: its store, config, queue, outbound path and metrics."""
        counter = gateway.metrics.schedule_occurrences
        return cls(gateway.store, lambda: gateway.config, gateway.scheduler.wake, gateway.outbound.send,
                   lambda outcome, n: counter.labels(outcome).inc(n),
                   sweep_every=min(20.0, gateway.store.lease_seconds / 3))

    @property
    def clock(self) -> Clock:
        return self.store.clock

    # --- lifecycle (a gateway extension) --------------------------------------------------

    async def start(self) -> None:
        """Queue what came due while no gateway ran (the gateway's start-up sweep wakes those
        conversations once the adapters are up), then keep sweeping."""
        await self.sweep(wake=False)
        self._sweeper = asyncio.create_task(every(self._sweep_every, self.sweep, "schedules sweep", log),
                                            name="schedules:sweep")

    async def stop(self) -> None:
        await cancel_and_wait(self._sweeper)

    # --- firing ---------------------------------------------------------------------------

    async def sweep(self, *, wake: bool = True) -> int:
        """Apply the admin schedules if the config changed, then fire what is due; returns how many runs
        were queued."""
        config = self._config()
        if config is not self._synced:
            await self.sync_admin(config)
            self._synced = config
        due = await self.db.due(self.clock.now())
        ready = [t.id for t in due if await self._still_allowed(t, config)]
        fired = await self.db.fire(ready, agent_for=lambda b: _agent_for(config, b), card=occurrence_card)
        queued = 0
        for f in fired:
            if f.missed:
                self._count(MISSED, f.missed)
            if not f.run_id:
                log.info("scheduled task %s: the occurrence due %s was skipped (late, catch_up off)",
                         f.task.id, f.due_at.isoformat())
                continue
            queued += 1
            self._count(FIRED, 1)
            log.info("scheduled task %s fired%s: run %s", f.task.id, " late" if f.late else "", f.run_id,
                     extra={"conversation": f.task.conversation_id, "run": f.run_id})
            if wake:
                self._wake(f.task.conversation_id)
        return queued

    async def _still_allowed(self, task: ScheduledTask, config: LoadedConfig) -> bool:
        """Whether the task may fire now; if not it is paused, its owner told (once) and it counts as failed."""
        problem = await self.access_problem(task, config)
        if problem is None:
            return True
        if await self.db.pause_if_active(task.id, problem):
            self._count(FAILED, 1)
            log.warning("scheduled task %s paused: %s", task.id, problem, extra={"conversation": task.conversation_id})
            conv = await self.store.conversation(task.conversation_id)
            binding = config.bindings.get(task.binding_id)
            if conv is not None and binding is not None and binding.enabled and task.creator_account:
                self._tell(conv.target(), f"Your scheduled task {task.id[:8]} ({_clip(task.task, 80)}) is paused: "
                           f"{problem}.", private_to=task.creator_account)
        return False

    async def access_problem(self, task: ScheduledTask, config: LoadedConfig) -> str | None:
        """None when the task's creator may still be answered where it posts; otherwise why not."""
        binding = config.bindings.get(task.binding_id)
        if binding is None or not binding.enabled:
            return f"its binding {task.binding_id} is no longer configured"
        if binding.agent not in config.agents:
            return f"its binding's agent {binding.agent} is no longer configured"
        if task.origin == ADMIN:
            return None
        conv = await self.store.conversation(task.conversation_id)
        if conv is None:
            return "its conversation is gone"
        account = task.creator_account or ""
        # The message the creator would send there now, asked of the binding's one admission rule.
        probe = InboundMessage(platform=conv.platform, binding_id=conv.binding_id, workspace=conv.workspace,
                               channel=conv.channel, chat_kind=ChatKind(conv.chat_kind),
                               sender=Sender(account, task.creator_name), text=task.task, event_id="",
                               message_id="", thread=conv.thread, mentioned=True)
        paired = conv.chat_kind == ChatKind.DM and await self._pairing.paired(binding.id, account)
        decision = admit(binding, probe, in_conversation=True, sender_allowed=paired)
        if decision.admitted:
            return None
        return f"{task.creator_name or 'its creator'} may no longer use this agent here ({decision.reason})"

    # --- admin schedules ------------------------------------------------------------------

    async def sync_admin(self, config: LoadedConfig) -> None:
        wanted: dict[tuple[str, str], NewTask] = {}
        for binding in config.bindings.values():
            if not binding.enabled:
                continue
            for spec in binding.schedules:
                if not spec.enabled:
                    continue
                chat_kind = ChatKind.GROUP if binding.platform == "telegram" else ChatKind.CHANNEL
                key = f"schedule:{binding.id}:{spec.key}"
                conv = await self.store.conversation_by_key(key) or await self.store.create_conversation(
                    repo.ConversationRef("", key, binding.platform, binding.id, spec.workspace, spec.channel, None,
                                         chat_kind.value))
                wanted[(binding.id, spec.key)] = NewTask(
                    conversation_id=conv.id, binding_id=binding.id, task=spec.task, cron=spec.cron, at=None,
                    timezone=spec.timezone, creator_person_id=None, creator_account=None,
                    creator_name=f"the {binding.id} binding's schedule", catch_up=spec.catch_up, origin=ADMIN,
                    name=spec.key)
        added, changed, removed = await self.db.sync_admin(wanted)
        if added or changed or removed:
            log.info("admin schedules: %d added, %d changed, %d removed", added, changed, removed)


def _agent_for(config: LoadedConfig, binding_id: str) -> str | None:
    binding = config.bindings.get(binding_id)
    return binding.agent if binding is not None and binding.enabled else None


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def when_text(task: ScheduledTask) -> str:
    if task.cron is not None:
        return f"on cron `{task.cron}` ({task.timezone})"
    assert task.at is not None
    return f"once, at {local_text(task.at, task.timezone)} ({task.timezone})"


def occurrence_card(task: ScheduledTask, due: datetime, late: bool, missed: int) -> str:
    """The scheduled run's card, as people see it in the chat and the model reads it: whose task,
    when it was due and, when late, that it is; the task itself last."""
    head = f"⏰ Scheduled task {task.id[:8]} (set by {task.creator_name or 'someone'}, {when_text(task)})"
    lines = [head]
    if late:
        lines.append(f"Running late: it was due at {local_text(due, task.timezone)}, when the gateway could not run "
                     "it (it was stopped, or its database did not answer)." + (
                         f" {missed} earlier occurrence(s) were missed as well; this one run stands for them."
                         if missed else ""))
    lines.append(task.task)
    return "\n\n".join(lines)


def scheduled_prompt(text: str) -> str:
    """How the scheduled run's model reads its card: from the gateway, not from a person."""
    return ("[Not a message from a person: a task scheduled in this conversation is due now. Do it and post the "
            "result here, for the person who set it; nobody is waiting to answer questions. If it runs late, say "
            "so in your answer.]\n\n" + text)


def task_line(task: ScheduledTask) -> str:
    """One task as a list shows it: id, what, when next, who made it."""
    nxt = local_text(task.next_at, task.timezone) if task.next_at else "none"
    status = "" if task.status == "active" else f" [{task.status}{': ' + task.reason if task.reason else ''}]"
    return (f"{task.id[:8]} — {_clip(task.task, 120)} — {when_text(task)}, next {nxt} — by "
            f"{task.creator_name or 'someone'}{status}")


def where_text(conv: repo.ConversationRef | None) -> str:
    """Where a task posts, as people name it."""
    if conv is None:
        return "nowhere (its conversation is gone)"
    place = {"dm": "a direct message", "group": f"group {conv.channel}"}.get(conv.chat_kind, f"channel {conv.channel}")
    return f"in {place} on {conv.platform}" + (f", thread {conv.thread}" if conv.thread else "")


def task_json(task: ScheduledTask, where: str = "") -> dict[str, Any]:
    return {"id": task.id, "task": task.task, "cron": task.cron, "at": task.at.isoformat() if task.at else None,
            "timezone": task.timezone, "status": task.status, "reason": task.reason, "origin": task.origin,
            "binding": task.binding_id, "conversation": task.conversation_id, "where": where,
            "created_by": task.creator_name, "next_run": local_text(task.next_at, task.timezone) if task.next_at else None}

