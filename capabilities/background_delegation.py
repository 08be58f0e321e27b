"""subagents, the async path: a delegation detached from the turn, and the two tools that follow one.

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
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Literal

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
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import RunTimedOut
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.usage import RunUsage, UsageLimits

from bindings.models import AgentSpec
from gateway.runs.agent_run import run_agent
from gateway.runs.background import BackgroundRuns, Ended, NewBackground, Progress, Usage, as_json, clip, last_text
from gateway.store.background import FAILED, FINISHED, PARTIAL, STOPPED
from gateway.runs.turn import Turn

from .registry import simple
from .subagents import Delegator, SubagentsConfig, _Delegation, forget

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

    async def _dispatch(self, ctx: RunContext[Turn], agent: str, prompt: str, asked: str | None) -> str:
        found = self.delegates.get(agent)
        if found is None:
            return f"No delegate named {agent!r}. Yours are: {', '.join(self.delegates)}."
        if self.made >= self.config.max_fanout:
            return (f"Not delegated: this reply has already made {self.made} delegations, the most this agent may "
                    "(max_fanout). Use the answers you have, or do this part yourself.")
        if self.levels_left < 1:
            return "Not delegated: delegation is not available at this depth (max_depth). Do this part yourself."
        # The author's mode wins; the model's argument counts only where the author handed it over.
        mode = self.modes[agent]
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
        child = replace(self.child(parent, name, spec, parent.run_id, self.levels_left - 1), tell=_silent)
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
        with it when it ends."""
        try:
            return await self._loop(child, prompt, token, progress)
        finally:
            await asyncio.shield(forget(child))

    async def _loop(self, child: Turn, prompt: str, token: CancellationToken, progress: Progress) -> Ended:
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
                                             on_event=saved)
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

    # --- following a background run ------------------------------------------------------

    async def check_task(self, ctx: RunContext[Turn], task_id: str) -> str:
        """How one of your background delegations is going, or how it ended and what it answered.

        Its report arrives in this conversation by itself when it ends; call this only when someone asks
        how it is going, not to wait for it.

        Args:
            task_id: The run id `task` returned when it started the delegation in the background.

        Returns:
            Its state (running, finished, failed, stopped or partial), the delegate, when it started, the
            model requests it has made; once ended, its answer (clipped like task's).
        """
        row = await self.background.db.get(task_id.strip())
        if row is None or row.conversation_id != ctx.deps.conversation.id:
            return f"No background run {task_id!r} in this conversation."
        info = as_json(row)
        line = (f"Run {row.id} ({row.delegate}): {row.status}{f' ({row.reason})' if row.reason else ''}; started "
                f"{info['started_at']}; {row.requests} model requests so far.")
        if row.status == "running":
            return line + " Its report will arrive in this conversation when it ends."
        return line + ("\n\n" + clip(row.answer, self.config.max_result_chars) if row.answer else "")

    async def list_active_tasks(self, ctx: RunContext[Turn]) -> str:
        """The background delegations still running in this conversation.

        Returns:
            One line per running background run (its run id, the delegate, when it started, its model
            requests so far), or a sentence saying none is running.
        """
        rows = await self.background.db.of_conversation(ctx.deps.conversation.id, running=True)
        if not rows:
            return "No background delegation is running in this conversation."
        return "\n".join(f"- {r.id}: {r.delegate}, started {r.created_at.isoformat()}, {r.requests} model requests"
                         for r in rows)


def build_detaching(turn: Turn, config: SubagentsConfig, delegator: Delegator, left: int) -> AbstractCapability[Any] | None:
    delegation = _Detaching(turn, config, delegator, left)
    if not delegation.delegates:
        return None
    task = delegation.task_choosing if delegation.choosing else delegation.task_detaching
    return simple(instructions=delegation.instructions(), tools=[
        Tool(task, name="task"),
        Tool(delegation.check_task, name="check_task"),
        Tool(delegation.list_active_tasks, name="list_active_tasks"),
    ])


def _dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def _usage(u: RunUsage) -> Usage:
    return Usage(u.requests, u.input_tokens or 0, u.output_tokens or 0)
