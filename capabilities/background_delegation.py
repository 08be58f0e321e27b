"""subagents, the async path: a delegation detached from the turn, and the tools that follow, steer and
stop one (check_task, wait_tasks, list_active_tasks, send_message_to_subagent, soft_cancel_task,
hard_cancel_task). A background delegate is not given ask_parent: it has handed back a task id with
nobody left to answer (allow_questions is for sync delegates, `capabilities.delegate_questions`).

Built instead of the sync-only `task` when a background delegation is reachable (the mode, or one
delegate's own mode, is async or auto, and this run is a person's, not a delegate's). `task` then
resolves the mode before anything starts: the author's, per delegate; under auto, the model's
`mode` argument (sync when it says nothing). A sync call is the sync path unchanged. An async one
is handed to the gateway's background runs with the work to do, and returns the run id at once.

The work is the delegate's own agent loop, streamed as the runner drives every agent, saving its
transcript after each tool so a restart can end it as partial with what it did. It runs under the
delegate's own request and time limits (the parent's turn has ended; its limits ended with it).
A gated tool cannot be asked about (nobody is waiting to answer): the call is refused as the tool's
result and the delegate goes on without it.

What the parent says to a running delegate goes through the store (`capabilities.delegate_inbox`):
the parent's turn has usually ended, and the delegate may run on another replica. Stopping goes
through `BackgroundRuns.stop_run`, the same door as `/stop`.

Why not pydantic-ai-harness `SubAgents`: its `delegate_task` runs a child inside the tool call, in
memory. A background delegation here outlives the turn (a stored row, a lease, a report queued in the
transaction that ends it, a partial report after a restart), a sync delegate's gated call parks the
whole run on a card and resumes from stored messages, and steering crosses replicas; none
of that fits a call that returns when the child does. Steering itself is pydantic-ai's own
`RunContext.enqueue`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic_ai import (
    CancellationToken,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolResultEvent,
    RunCancelled,
    RunContext,
    Tool,
    ToolDenied,
    UsageLimitExceeded,
    capture_run_messages,
)
from pydantic import Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import RunTimedOut
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.usage import RunUsage, UsageLimits

from bindings.models import AgentSpec
from gateway.runs.agent_run import run_agent
from gateway.runs.background import BackgroundRuns, Ended, NewBackground, Progress, Usage, as_json, clip, last_text
from gateway.store.background import FAILED, FINISHED, PARTIAL, RUNNING, STOPPED
from gateway.store.models import BackgroundRun
from gateway.runs.turn import Turn

from .delegate_inbox import MAX_MESSAGE_CHARS, Inbox, Steering
from .failures import trouble
from .registry import simple
from .subagents import Delegator, SubagentsConfig, _Delegation, forget

MAX_WAIT_SECONDS = 300  # wait_tasks' ceiling: a reply that waits longer should end and let the report come

log = logging.getLogger("capabilities.subagents")

Mode = Literal["sync", "async", "auto"]


def refusal(tool: str) -> str:
    """The seed's message for a gated tool inside a background delegation."""
    return (f"Refused: {tool} needs a person's approval, and a background delegation cannot ask for one (nobody is "
            f"waiting to answer). Go on without it, and say in your answer that this part must be delegated with "
            f"mode=\"sync\", where a person can approve it.")


async def _silent(line: str) -> None:
    return None  # a background delegate's notes have no reply to go in


class _Detaching(_Delegation):
    """`task` with the modes resolved, and the lifecycle tools of the runs it detached."""

    def __init__(self, turn: Turn, config: SubagentsConfig, delegator: Delegator, levels_left: int) -> None:
        super().__init__(turn, config, delegator, levels_left)
        assert delegator.background is not None
        self.background: BackgroundRuns = delegator.background
        own = {sp.name: sp.mode for sp in config.inline if sp.mode}
        self.modes: dict[str, Mode] = {name: own.get(name) or config.modes.get(name) or config.mode
                                       for name in self.delegates}

    @property
    def choosing(self) -> bool:
        return "auto" in self.modes.values()

    def instructions(self) -> str:
        marks = {
            "sync": " (waits: its answer comes back as the tool's result)",
            "async": " (runs in the background: task returns a run id at once; its report arrives in this "
                     "conversation later, and you continue then)",
            "auto": " (you choose: mode=\"sync\" waits for its answer, mode=\"async\" runs it in the background)",
        }
        lines = [f"- {name}: {spec.description or spec.name}"
                 + (marks[self.modes[name]] if self.modes[name] != self.config.mode else "")
                 for name, (_, spec) in self.delegates.items()]
        opening = {
            "sync": "it works on its own and its answer comes back as the tool's result",
            "async": "it works on its own in the background: task returns a run id at once, you answer the person "
                     "and end your reply, and its report arrives in this conversation later — then you continue",
            "auto": "with mode=\"sync\" you wait for its answer; with mode=\"async\" it works in the background, task "
                    "returns a run id at once, and its report arrives in this conversation later",
        }[self.config.mode]
        return (f"You can hand a self-contained piece of work to one of these delegates with the `task` tool; "
                f"{opening}. A delegate marked otherwise below keeps its own way:\n" + "\n".join(lines))

    # --- task -----------------------------------------------------------------------------

    async def task_detaching(self, ctx: RunContext[Turn], agent: str, prompt: str) -> str:
        """Hand a self-contained piece of work to one of your delegates.

        The delegate sees only `prompt`, not this conversation, so say everything it needs. Small things
        are quicker done yourself. Your instructions say which delegates run in the background.

        Args:
            agent: The delegate's name, one of those listed in your instructions.
            prompt: The whole task: what to do, what to give back, and every fact it needs.

        Returns:
            For a delegate that waits, its answer (clipped in the middle past max_result_chars); for one that
            runs in the background, its run id at once (its report arrives in this conversation later). Or a
            sentence saying why nothing was delegated (max_fanout, a background limit, an unknown name).
        """
        return await self._dispatch(ctx, agent, prompt, None)

    async def task_choosing(self, ctx: RunContext[Turn], agent: str, prompt: str,
                            mode: Literal["sync", "async"] = "sync") -> str:
        """Hand a self-contained piece of work to one of your delegates.

        The delegate sees only `prompt`, not this conversation, so say everything it needs. Small things
        are quicker done yourself.

        Args:
            agent: The delegate's name, one of those listed in your instructions.
            prompt: The whole task: what to do, what to give back, and every fact it needs.
            mode: "sync" waits for the answer; "async" runs it in the background (minutes of work) and returns a
                run id at once. Only delegates marked "you choose" take it; the others keep their own way.

        Returns:
            With mode "sync", the delegate's answer (clipped in the middle past max_result_chars); with "async",
            its run id at once, and its report arrives in this conversation later. Or a sentence saying why
            nothing was delegated (max_fanout, a background limit, an unknown name).
        """
        return await self._dispatch(ctx, agent, prompt, mode)

    async def _dispatch(self, ctx: RunContext[Turn], agent: str, prompt: str, asked: str | None,
                        found: tuple[str, AgentSpec] | None = None) -> str:
        found = found or self.delegates.get(agent)
        if found is None:
            return f"No delegate named {agent!r}. Yours are: {', '.join(self.delegates) or 'none configured'}."
        if self.made >= self.config.max_fanout:
            return (f"Not delegated: this reply has already made {self.made} delegations, the most this agent may "
                    "(max_fanout). Use the answers you have, or do this part yourself.")
        if self.levels_left < 1:
            return "Not delegated: delegation is not available at this depth (max_depth). Do this part yourself."
        # The author's mode wins; the model's argument counts only where the author handed it over.
        mode = self.modes.get(agent, self.config.mode)
        if mode == "auto":
            mode = "async" if asked == "async" else "sync"
        kind, spec = found
        self.made += 1
        if mode == "sync":
            return await self.run_delegate(ctx, agent, kind, spec, prompt)
        return await self._launch(ctx, agent, kind, spec, prompt)

    async def _launch(self, ctx: RunContext[Turn], name: str, kind: str, spec: AgentSpec, prompt: str) -> str:
        parent = ctx.deps
        # Its own delegations run in the foreground (levels_left is set): one report per detached run.
        # Its run id is its background run's (given to the work below), so its state is its own.
        # Nobody is asked anything from the background: its person's question channel is not lent (ask=None),
        # so a sync delegate of its own is not given ask_parent either.
        child = replace(self.child(parent, name, spec, parent.run_id, self.levels_left - 1), tell=_silent, ask=None)
        new = NewBackground(
            conversation_id=parent.conversation.id, parent_run_id=parent.run_id, binding_id=parent.binding.id,
            agent_id=parent.agent.id, delegate=name, kind=kind, prompt=prompt,
            requester_person_id=parent.requester.person_id, requester_account=parent.requester.account_id,
            requester_name=parent.requester.name,
        )
        launched = await self.background.launch(
            new, lambda token, progress: self._work(replace(child, run_id=progress.run_id), prompt, token, progress))
        if launched.refusal:
            self.made -= 1  # nothing started: the slot is not spent
            return launched.refusal
        return (f"Started in the background as run {launched.run_id}: {name} is working on it. Do not wait for it: "
                "answer the person now (say it is under way) and end your reply. Its report will arrive in this "
                f"conversation by itself when it ends, and you continue then; check_task(\"{launched.run_id}\") says "
                "how it is going meanwhile.")

    async def _work(self, child: Turn, prompt: str, token: CancellationToken, progress: Progress) -> Ended:
        """The delegate's agent loop, in the background; how it ended, for the report. Its own state goes
        with it when it ends (its inbox goes with its row's end)."""
        inbox = Inbox(child.state, child.run_id)
        steering = Steering(inbox)
        try:
            ended = await self._loop(child, prompt, token, progress, steering)
            who = await inbox.wrap_up()
            if who is not None and ended.status == FINISHED:
                ended = replace(ended, status=PARTIAL, reason=f"wrapped up early, as {who} asked")
            return ended
        finally:
            await asyncio.shield(forget(child))

    async def _loop(self, child: Turn, prompt: str, token: CancellationToken, progress: Progress,
                    steering: Steering) -> Ended:
        spec = child.agent
        usage = RunUsage()
        limit = self.config.max_result_chars
        messages: list[ModelMessage] = []
        next_prompt: str | None = prompt
        history: list[ModelMessage] | None = None
        deferred: DeferredToolResults | None = None
        try:
            for prepare in self.delegator.preparers:
                await prepare(child)
            agent = self.delegator.build_agent(child)

            async def saved(event: Any) -> None:  # after each tool, what it did so far (for a crash)
                if isinstance(event, FunctionToolResultEvent):
                    await progress.save(_dump(messages), _usage(usage))

            while True:
                with capture_run_messages() as messages:
                    result = await run_agent(agent, next_prompt, deps=child, history=history, deferred=deferred,
                                             usage=usage,
                                             usage_limits=UsageLimits(request_limit=spec.limits.model_requests),
                                             cancellation_token=token, timeout=spec.limits.wall_clock_seconds,
                                             on_event=saved, capabilities=[steering])
                if not isinstance(result.output, DeferredToolRequests):
                    answer = str(result.output)
                    return Ended(FINISHED, answer, clip(answer, limit), transcript=_dump(result.all_messages()),
                                 usage=_usage(usage))
                # Nobody can be asked: every call that wanted a person is refused, and the delegate goes on.
                requests = result.output
                deferred = DeferredToolResults(
                    approvals={c.tool_call_id: ToolDenied(refusal(c.tool_name)) for c in requests.approvals},
                    calls={c.tool_call_id: refusal(c.tool_name) for c in requests.calls},
                )
                history, next_prompt = result.all_messages(), None
        except (RunCancelled, UsageLimitExceeded) as e:
            done = e.all_messages() if isinstance(e, RunCancelled) else messages
            text = last_text(done)
            if isinstance(e, RunTimedOut):
                status, reason = PARTIAL, f"it ran out of its {spec.limits.wall_clock_seconds:g} s"
            elif isinstance(e, UsageLimitExceeded):
                status, reason = PARTIAL, f"it reached its {spec.limits.model_requests} model requests"
            else:
                status, reason = STOPPED, "stopped"  # by a person or by the gateway stopping: told apart there
            return Ended(status, text, clip(text, limit), reason=reason, transcript=_dump(done), usage=_usage(usage))
        except Exception as e:
            log.warning("background delegate %s failed", spec.name, exc_info=e, extra=child.log_fields)
            text = last_text(messages)
            return Ended(FAILED, text, clip(text, limit), reason=f"{type(e).__name__}", transcript=_dump(messages),
                         usage=_usage(usage))

    # --- following and steering a background run -------------------------------------------
    # Each takes a run id `task` returned; a run of another conversation is answered as unknown, so an id
    # seen elsewhere reveals nothing and reaches nothing.

    async def _own(self, ctx: RunContext[Turn], task_id: str) -> BackgroundRun | None:
        row = await self.background.db.get(task_id.strip())
        return row if row is not None and row.conversation_id == ctx.deps.conversation.id else None

    async def _running(self, ctx: RunContext[Turn], task_id: str, why_not: str) -> BackgroundRun | str:
        """This conversation's run `task_id` while it runs; else the answer: unknown, or ended (`why_not`)."""
        row = await self._own(ctx, task_id)
        if row is None:
            return _unknown(task_id)
        return row if row.status == RUNNING else _ended(row, why_not)

    def _who(self, ctx: RunContext[Turn]) -> str:
        return f"{ctx.deps.agent.name or ctx.deps.agent.id} (the agent that started it)"

    async def _state_line(self, ctx: RunContext[Turn], row: BackgroundRun) -> str:
        info = as_json(row)
        line = (f"Run {row.id} ({row.delegate}): {row.status}{f' ({row.reason})' if row.reason else ''}; started "
                f"{info['started_at']}; {row.requests} model requests so far.")
        if row.status != RUNNING:
            return line
        return line + " Still working: its report arrives in this conversation by itself when it ends."

    async def check_task(self, ctx: RunContext[Turn], task_id: str) -> str:
        """How one of your background delegations is going, or how it ended and its whole answer.

        Its report arrives in this conversation by itself when it ends; call this when someone asks how it
        is going, or for the whole answer wait_tasks cut. To wait for it, use wait_tasks instead.

        Args:
            task_id: The run id `task` returned when it started the delegation in the background.

        Returns:
            Its state (running, finished, failed, stopped or partial), the delegate, when it started, the
            model requests it has made, and a question it is waiting for you to answer; once ended, its whole
            answer, never cut. Or a sentence saying there is no such run in this conversation.
        """
        row = await self._own(ctx, task_id)
        if row is None:
            return _unknown(task_id)
        line = await self._state_line(ctx, row)
        return line + ("\n\n" + row.answer if row.status != RUNNING and row.answer else "")

    async def wait_tasks(self, ctx: RunContext[Turn],
                         task_ids: Annotated[list[str], Field(min_length=1, max_length=10)],
                         timeout_seconds: Annotated[int, Field(ge=0, le=MAX_WAIT_SECONDS)] = 60) -> str:
        """Wait for one or more of your background delegations to end, and get what each answered.

        Use it when the rest of your reply needs their answers now; otherwise end your reply and let each
        report arrive by itself. A run you waited for here does not report again.

        Args:
            task_ids: The run ids `task` returned, 1 to 10.
            timeout_seconds: How long to wait at most, 0 to 300 (default 60), and never more than half of
                your own time for this reply; 0 only looks.

        Returns:
            One block per run with its state, and once ended its answer, cut past max_result_chars with a marker
            (check_task gives the whole answer). Runs still going when the time is up say so; an id that is not
            a run of this conversation says that.
        """
        ids = list(dict.fromkeys(i.strip() for i in task_ids))

        async def settled() -> list[BackgroundRun] | None:
            rows = [await self._own(ctx, i) for i in ids]
            known = [r for r in rows if r is not None]
            return known if all(r.status != RUNNING for r in known) else None

        # Half the reply's own wall clock at most: a wait must leave the reply time to use what it waited for.
        waited = min(float(timeout_seconds), ctx.deps.agent.limits.wall_clock_seconds / 2)
        rows = await self.background.until(settled, waited)
        rows = rows if rows is not None else [r for i in ids if (r := await self._own(ctx, i)) is not None]
        found = {r.id: r for r in rows}
        blocks: list[str] = []
        for i in ids:
            row = found.get(i)
            if row is None:
                blocks.append(_unknown(i))
                continue
            line = await self._state_line(ctx, row)
            if row.status == RUNNING:
                blocks.append(line)
                continue
            # Its news is in this reply now: the report turn queued for it would tell the same thing again.
            await self.background.db.drop_queued(row.report_run_id, f"its answer went to run {ctx.deps.run_id} "
                                                 "through wait_tasks")
            answer = clip(row.answer, self.config.max_result_chars,
                          f"check_task(\"{row.id}\") gives the whole answer") if row.answer else ""
            blocks.append(line + ("\n" + answer if answer else ""))
        return "\n\n".join(blocks)

    async def list_active_tasks(self, ctx: RunContext[Turn]) -> str:
        """The background delegations still running in this conversation.

        Use it to find a run id you no longer have; check_task says more about one of them.

        Returns:
            One line per running background run (its run id, the delegate, when it started, its model
            requests so far), or a sentence saying none is running.
        """
        rows = await self.background.db.of_conversation(ctx.deps.conversation.id, running=True)
        if not rows:
            return "No background delegation is running in this conversation."
        return "\n".join(f"- {r.id}: {r.delegate}, started {r.created_at.isoformat()}, {r.requests} model requests"
                         for r in rows)

    async def send_message_to_subagent(self, ctx: RunContext[Turn], task_id: str, message: str) -> str:
        """Tell one of your running background delegations something while it works: a correction, a fact it
        lacks, a change of what you need.

        It reads the message before its next model request (or, if it was writing its answer, instead of
        ending there). To stop it, use soft_cancel_task (answer with what it has) or hard_cancel_task.

        Args:
            task_id: The run id `task` returned.
            message: What to tell it, self-contained; at most 4000 characters.

        Returns:
            That it was sent, or why not (no such run in this conversation, or it has already ended).
        """
        message = message.strip()
        if not message or len(message) > MAX_MESSAGE_CHARS:
            return trouble(ctx, "mistake", f"Send a message of 1 to {MAX_MESSAGE_CHARS} characters.")
        row = await self._running(ctx, task_id, "nothing reads messages for it any more")
        if isinstance(row, str):
            return row
        await Inbox(ctx.deps.state, row.id).send(message)
        return (f"Sent to {row.delegate} (run {row.id}): it reads it before its next model request. Its report "
                "still arrives by itself when it ends.")

    async def soft_cancel_task(self, ctx: RunContext[Turn], task_id: str) -> str:
        """Ask one of your running background delegations to finish now with what it has.

        Its next model request is its last: it is offered no more tools and told to answer with what it
        has, and that answer comes back as its report, marked partial. Use it when it has done enough or
        the need changed; hard_cancel_task stops it at once instead, without an answer.

        Args:
            task_id: The run id `task` returned.

        Returns:
            That it was asked to wrap up (its partial answer arrives as its report, or through wait_tasks), or
            why not: no such run in this conversation, it has ended, or it was asked already.
        """
        row = await self._running(ctx, task_id, "there is nothing to wrap up")
        if isinstance(row, str):
            return row
        inbox = Inbox(ctx.deps.state, row.id)
        if not await inbox.ask_wrap_up(self._who(ctx)):
            return f"Run {row.id} ({row.delegate}) was already asked to wrap up; its answer is on its way."
        return (f"Asked {row.delegate} (run {row.id}) to wrap up: its next answer is its last, and comes back as "
                f"its report, marked partial. wait_tasks([\"{row.id}\"]) waits for it here; hard_cancel_task "
                "stops it at once if it does not finish.")

    async def hard_cancel_task(self, ctx: RunContext[Turn], task_id: str) -> str:
        """Stop one of your running background delegations now, wherever it runs.

        What it was doing is cut off; its report still arrives, marked stopped, with what it had written so
        far. Prefer soft_cancel_task when its answer so far is worth having.

        Args:
            task_id: The run id `task` returned.

        Returns:
            That it was stopped, or why not (no such run in this conversation, or it has already ended).
        """
        row = await self._own(ctx, task_id)
        if row is None:
            return _unknown(task_id)
        if row.status != RUNNING or not await self.background.stop_run(row.id, self._who(ctx)):
            return _ended(row, "there is nothing to stop")
        return (f"Stopped run {row.id} ({row.delegate}). Its report arrives in this conversation, marked stopped, "
                "with what it had written so far.")


def _unknown(task_id: str) -> str:
    return (f"No background run {task_id.strip()!r} in this conversation. list_active_tasks lists the ones "
            "still running here.")


def _ended(row: BackgroundRun, what: str) -> str:
    return (f"Run {row.id} ({row.delegate}) has already ended ({row.status}), so {what}; check_task gives its "
            "answer.")


def build_detaching(turn: Turn, config: SubagentsConfig, delegator: Delegator, left: int) -> AbstractCapability[Any] | None:
    """`task` with the lifecycle tools, create_agent and delegate under allow_dynamic
    (`capabilities.dynamic_agents`). Tools left out are not offered at all (answer_subagent never is)."""
    from .dynamic_agents import Dynamic

    delegation: _Detaching = Dynamic(turn, config, delegator, left) if config.allow_dynamic else \
        _Detaching(turn, config, delegator, left)
    if not delegation.delegates and not config.allow_dynamic:
        return None
    task = delegation.task_choosing if delegation.choosing else delegation.task_detaching
    # With no configured delegates (allow_dynamic alone) task could only refuse: not offered.
    tools = [Tool(task, name="task")] if delegation.delegates else []
    tools += [
        Tool(delegation.check_task, name="check_task"),
        Tool(delegation.wait_tasks, name="wait_tasks"),
        Tool(delegation.list_active_tasks, name="list_active_tasks"),
        Tool(delegation.send_message_to_subagent, name="send_message_to_subagent"),
        Tool(delegation.soft_cancel_task, name="soft_cancel_task"),
        Tool(delegation.hard_cancel_task, name="hard_cancel_task"),
    ]
    if isinstance(delegation, Dynamic):
        tools += delegation.tools()
    return simple(instructions=delegation.instructions(), tools=tools)


def _dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def _usage(u: RunUsage) -> Usage:
    return Usage(u.requests, u.input_tokens or 0, u.output_tokens or 0)
