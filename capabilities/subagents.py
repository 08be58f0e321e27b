"""subagents (Delegation): an agent hands a self-contained piece of work to another agent and waits for its answer.

Two shapes of delegate: pinned ones are other agents of this config, named in the agent file's top-level
`subagents:`, so their own authors' decisions (model, instructions, capabilities, their own `max_depth`)
hold when somebody else calls them; inline specialists are written inside this capability's config and
must name a model. A delegate is built the way the runner builds any agent, from a Turn of its own
(same conversation, requester and memory scope; a fresh tool map) carrying only its own capabilities plus
the ids this agent shares. Sync: `task` runs the delegate to completion inside the parent's tool call,
under the parent's usage limits, stores the delegate run under the conversation (transcript, usage,
outcome) and returns its answer, clipped at `max_result_chars` with a marker saying so.

A gated tool inside a delegate parks the parent's whole run: `task` stores the delegate's messages
(outcome `parked`) and raises `ApprovalRequired` carrying the delegate's calls (`gateway.runs.delegated`), so the
card names the delegate. The run resumes this `task` call approved, with the decisions in its metadata;
`task` then resumes the delegate from its stored messages with those decisions, and the delegate's answer
comes back as this call's result — in this process or after a restart.

Async (`mode: async`, or `auto` and the model asks for it): `task` hands the delegate to the gateway's
background runs (`gateway.runs.background`) and returns a run id at once; the parent answers and its turn
ends; when the delegate ends, its report comes back into the conversation by itself. The mode is the
author's: a delegate may override it for itself (`mode:` on a specialist, `modes:` for pinned ones),
and its line in the instructions says so. Only a top-level run detaches: a delegate's own delegations
run in the foreground. A background delegate cannot ask a person: a gated tool inside one is refused.

Fan-out and nesting are ceilings, not errors: past `max_fanout` the model is told so in the tool result;
at the depth bound the delegate is built without this capability at all.

All ten tools the seed lists are declared here, so each can be gated or renamed; a run is offered only
those that can act: the lifecycle tools where a background delegation is reachable
(`capabilities.background_delegation`), create_agent and delegate under `allow_dynamic`
(`capabilities.dynamic_agents`, models from the config only). answer_subagent is declared (so policy can
name it) and offered to no model: under `allow_questions` a sync delegate asks the parent's person
(`ask_parent`, `capabilities.delegate_questions`), and a background delegate is not given ask_parent.
The three that act on paid-for work (steer, soft and hard cancel) ask for approval by default.

pydantic-ai-harness `SubAgents` is the library's delegation: one sync tool over live `Agent`s, in
memory. It is not used because a delegate here is built per run from its `AgentSpec` through the
runner's `build_agent` (the gate, the model cache, the config's models), parks the parent's run on
a gated call and resumes from stored messages after a restart, and may outlive the turn in the
background; its per-delegate budgets are ours as the delegate's own `limits`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import (ApprovalRequired, DeferredToolRequests, DeferredToolResults, RunCancelled,
                         RunContext, Tool, ToolApproved, ToolDenied, UsageLimitExceeded, capture_run_messages)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.usage import UsageLimits

from bindings.models import AgentSpec, BindingSpec, CapabilityEntry
from gateway.approvals.arguments import ARGUMENTS, DIGEST
from gateway.approvals.policy import ToolInfo
from gateway.runs.delegated import (APPROVED, DECISIONS, DELEGATED, DelegatedCall, approved_of, decisions_of,
                              delegated_calls)
from gateway.runs.agent_run import run_agent
from gateway.runs.background import BackgroundRuns, clip
from gateway.runs.turn import Turn

from .delegate_questions import ASK_PARENT, AsksParent, answerer
from .registry import BuildContext, ByIdentity, CapabilityDecl, ToolDecl, decl_for, register, simple

log = logging.getLogger("capabilities.subagents")

ID = "subagents"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class Specialist(BaseModel):
    """A delegate written inside this agent's config (reviewed with it, versioned with it)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME, description="What the model calls it by in task(agent=...)")
    description: str = Field(default="", description="One sentence the parent's model reads to choose it")
    instructions: str = ""
    model: str | None = Field(default=None, description="Required: auto | demo | <provider>:<model>, as in an agent file")
    mode: Literal["sync", "async", "auto"] | None = Field(default=None, description="This specialist's own mode, "
                                                         "overriding the capability's")


class SubagentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inline: list[Specialist] = Field(default_factory=list, description="Specialists defined inside this agent")
    mode: Literal["sync", "async", "auto"] = Field(
        default="sync", description="sync: task waits for the delegate's answer; async: the delegate runs in the "
        "background and reports back into the conversation; auto: the model chooses per call")
    modes: dict[str, Literal["sync", "async", "auto"]] = Field(
        default_factory=dict, description="A pinned delegate's own mode, by name, overriding mode")
    max_depth: int = Field(default=1, ge=1, le=3, description="Levels of delegation, this agent's own included")
    max_fanout: int = Field(default=3, ge=1, le=10, description="Delegations per reply; past it task answers "
                            "that the ceiling is reached")
    max_result_chars: int = Field(default=2000, ge=200, le=20000, description="A longer answer is clipped, "
                                  "keeping both ends, with a marker")
    share_with_delegates: list[str] = Field(default_factory=list, description="Capability ids this agent is "
                                            "itself bound to, lent to its delegates (never subagents)")
    allow_questions: bool = Field(default=False, description="A delegate that waits (mode sync) may ask the person "
                                  "who asked this agent a question (ask_parent), answered in the thread, never by "
                                  "a model")
    allow_dynamic: bool = Field(default=False, description="The model may write specialists of its own "
                                "(create_agent, then delegate), on a model this config already names")


@dataclass(frozen=True)
class Delegator:
    """What running a delegate needs from the gateway, handed in where it is wired (gateway/extensions.py)."""

    agents: Callable[[], dict[str, AgentSpec]]
    build_agent: Callable[[Turn], Any]  # the runner's: a pydantic-ai Agent for a Turn
    preparers: Sequence[Callable[[Turn], Awaitable[None]]]  # the runner's turn preparers (MCP connections)
    background: BackgroundRuns | None = None  # where async delegations run; None: sync only


# A delegate's agent and binding are made once per parent agent, binding and delegate, and kept while those are
# the config's: the runner's shared Agent and the shared capabilities (`SharedBuilds`) are keyed by their identity,
# so copies made anew for each delegation built both again (~0.3 ms and more a delegation; bench/README.md, Round 13).
_QUIET: ByIdentity[BindingSpec] = ByIdentity()
_SPECS: ByIdentity[tuple[AgentSpec, frozenset[str]]] = ByIdentity()


def _quiet(binding: BindingSpec) -> BindingSpec:
    """The binding as a delegate sees it: no binding prompt, no channel tools (those are the parent's)."""
    def make() -> BindingSpec:
        channels = {k: v.model_copy(update={"prompt": None, "channel_tools": None})
                    for k, v in binding.channels.items()}
        return binding.model_copy(update={"prompt": "", "channel_tools": None, "channels": channels})

    return _QUIET.get((binding,), make)


def _shared(parent: AgentSpec, ids: Sequence[str], own: Sequence[CapabilityEntry]) -> list[CapabilityEntry]:
    have = {e.id for e in own}
    return [e for e in parent.capabilities if e.id in ids and e.id != ID and e.enabled and e.id not in have]


def _lent(shared: Sequence[CapabilityEntry]) -> frozenset[str]:
    """The shared capabilities whose state comes with them (a capability the delegate binds itself is its own)."""
    return frozenset(e.id for e in shared if (decl := decl_for(e.id)) is None or decl.lends_state)


def _pinned(parent: AgentSpec, spec: AgentSpec, lending: Sequence[str]) -> tuple[AgentSpec, frozenset[str]]:
    """A configured delegate as `parent` calls it: its own capabilities plus those lent (and whose state is lent)."""
    own = list(spec.capabilities)
    shared = _shared(parent, lending, own)
    return spec.model_copy(update={"capabilities": own + shared}), _lent(shared)


def _specialist(parent: AgentSpec, sp: Specialist, lending: Sequence[str]) -> tuple[AgentSpec, frozenset[str]]:
    """A specialist written in `parent`'s config, with the capabilities lent to it."""
    shared = _shared(parent, lending, [])
    return AgentSpec(id=f"{parent.id}.{sp.name}", name=sp.name, description=sp.description, model=sp.model,
                     instructions=sp.instructions, limits=parent.limits, capabilities=shared), _lent(shared)


class _Delegation:
    """One run's `task` tool: its delegates, its fan-out count, its depth."""

    def __init__(self, turn: Turn, config: SubagentsConfig, delegator: Delegator, levels_left: int) -> None:
        self.config = config
        self.delegator = delegator
        self.levels_left = levels_left  # including this agent's own level
        self.made = 0
        agents = delegator.agents()
        self.delegates: dict[str, tuple[str, AgentSpec]] = {}
        self.lent: dict[str, frozenset[str]] = {}  # per delegate: the lent ids whose state is the parent's
        parent, lending = turn.agent, tuple(config.share_with_delegates)
        for name in parent.subagents:
            spec = agents.get(name)
            if spec is not None:
                made, self.lent[name] = _SPECS.get((parent, spec), lambda: _pinned(parent, spec, lending), also=lending)
                self.delegates[name] = ("pinned", made)
        for sp in config.inline:
            if sp.model is None:
                continue  # refused at load
            made, self.lent[sp.name] = _SPECS.get((parent,), lambda: _specialist(parent, sp, lending),
                                                  also=(sp.name, sp.description, sp.model, sp.instructions, lending))
            self.delegates[sp.name] = ("specialist", made)

    def child(self, parent: Turn, name: str, spec: AgentSpec, run_id: str, levels_left: int) -> Turn:
        """The delegate's Turn: the parent's conversation, requester and memory scope; its own run id, so its
        state (spills, snapshots, counters, plans) is its own except what the parent lent it."""
        return replace(parent, run_id=run_id, agent=spec, binding=_quiet(parent.binding), tools={}, notices=[],
                       levels_left=levels_left, parent=parent, borrowed=self.lent.get(name, frozenset()))

    def instructions(self) -> str:
        lines = [f"- {name}: {spec.description or spec.name}" for name, (_, spec) in self.delegates.items()]
        return ("You can hand a self-contained piece of work to one of these delegates with the `task` tool; "
                "it works on its own and its answer comes back as the tool's result:\n" + "\n".join(lines))

    async def task(self, ctx: RunContext[Turn], agent: str, prompt: str) -> str:
        """Hand a self-contained piece of work to one of your delegates and wait for its answer.

        The delegate sees only `prompt`, not this conversation, so say everything it needs. Small things
        are quicker done yourself.

        Args:
            agent: The delegate's name, one of those listed in your instructions.
            prompt: The whole task: what to do, what to give back, and every fact it needs.

        Returns:
            The delegate's answer (past this agent's max_result_chars, clipped in the middle with a marker
            saying how much was cut), or a sentence saying why nothing was delegated (max_fanout reached for
            this reply, an unknown name) or that the delegate failed.
        """
        found = self.delegates.get(agent)
        decisions = decisions_of(ctx.tool_call_metadata) if ctx.tool_call_approved else None
        if decisions is not None:  # the run resumed from a card this delegate's calls were on
            return await self._resume(ctx, agent, found, decisions)
        if found is None:
            return f"No delegate named {agent!r}. Yours are: {', '.join(self.delegates)}."
        if self.made >= self.config.max_fanout:
            return (f"Not delegated: this reply has already made {self.made} delegations, the most this agent may "
                    "(max_fanout). Use the answers you have, or do this part yourself.")
        if self.levels_left < 1:  # not offered at the bound; answered all the same if called
            return "Not delegated: delegation is not available at this depth (max_depth). Do this part yourself."
        self.made += 1
        kind, spec = found
        return await self.run_delegate(ctx, agent, kind, spec, prompt)

    async def run_delegate(self, ctx: RunContext[Turn], name: str, kind: str, spec: AgentSpec, prompt: str) -> str:
        """Run a delegate inside this tool call (also handoffs' wait: true); when the call is one a decided
        card resumed, continue the delegate that parked in it instead of starting it again."""
        decisions = decisions_of(ctx.tool_call_metadata) if ctx.tool_call_approved else None
        if decisions is not None:
            return await self._resume(ctx, name, (kind, spec), decisions)
        record: dict[str, Any] = {"run_id": ctx.deps.run_id, "tool_call_id": ctx.tool_call_id, "agent": name,
                                  "kind": kind, "prompt": prompt, "levels_left": self.levels_left - 1,
                                  "started_at": ctx.deps.clock.now().isoformat(), "usage": {}}
        key = f"{ctx.deps.run_id}/{uuid.uuid4().hex[:12]}"
        return await self._drive(ctx, spec, key, record, prompt=prompt)

    async def _resume(self, ctx: RunContext[Turn], name: str, found: tuple[str, AgentSpec] | None,
                      decisions: dict[str, bool | str]) -> str:
        """Continue the delegate parked inside this very `task` call, from its stored messages, with the
        card's decisions as its deferred results: the approved call runs there, once; a denied one is
        answered to the delegate's model as denied."""
        parent = ctx.deps
        stored = [(k, json.loads(v)) for k, v in (await parent.state.items(ID, parent.conversation.id)).items()]
        mine = [(k, r) for k, r in stored
                if r.get("run_id") == parent.run_id and r.get("tool_call_id") == ctx.tool_call_id]
        answered = [r["answer"] for _, r in mine if r.get("outcome") != "parked" and r.get("answer")]
        if answered:
            # It already ended, and its parent was stopped (a kill) before its own run did: the parent,
            # resumed again, gets the same answer back rather than the delegate run again or "nothing ran".
            return clip(answered[0], self.config.max_result_chars)
        parked = [(k, r) for k, r in mine if r.get("outcome") == "parked"]
        if not parked or found is None:
            return (f"The delegate {name}'s paused work was not found (its agent or its stored run is gone), so "
                    "nothing it asked for ran. Do this part yourself.")
        key, record = parked[0]
        approved = approved_of(ctx.tool_call_metadata)
        results = DeferredToolResults()
        for pending in record["pending"]:
            if pending["nested"]:  # its own delegate's calls: that `task` goes on with the same decisions
                results.approvals[pending["id"]] = ToolApproved()
                results.metadata[pending["id"]] = {DECISIONS: decisions, APPROVED: approved}
            else:
                decision = decisions.get(pending["id"], "Nobody approved this call in time.")
                results.approvals[pending["id"]] = True if decision is True else ToolDenied(str(decision))
                if decision is True and pending["id"] in approved:
                    # The delegate's gate starts it at most once and only on the approved arguments, as it
                    # does a call of the run itself (capabilities/approval_gate.py).
                    results.metadata[pending["id"]] = approved[pending["id"]]
        history = ModelMessagesTypeAdapter.validate_python(record["transcript"])
        return await self._drive(ctx, found[1], key, record, history=history, deferred=results)

    async def _drive(self, ctx: RunContext[Turn], spec: AgentSpec, key: str, record: dict[str, Any], *,
                   prompt: str | None = None, history: list[ModelMessage] | None = None,
                   deferred: DeferredToolResults | None = None) -> str:
        parent = ctx.deps
        name = record["agent"]
        # Its run id is its record's key: the same when a decided card resumes it, so it finds its own state.
        child = self.child(parent, name, spec, key, record["levels_left"])
        asking: list[Any] = []
        # allow_questions: this delegate waits, so it may ask the parent's person (a specialist the model wrote
        # never asks); where the platform cannot show a question, it is not given the tool at all.
        if self.config.allow_questions and record["kind"] != "dynamic" and parent.ask is not None:
            asking.append(AsksParent(answerer=answerer(parent.ask, name)))
            child.tools[ASK_PARENT] = ToolInfo(stable_id=ASK_PARENT, capability=ID)
        before = (ctx.usage.requests, ctx.usage.input_tokens or 0, ctx.usage.output_tokens or 0)
        answer = ""
        outcome, reason = "failed", ""
        parked: DeferredToolRequests | None = None
        with capture_run_messages() as messages:
            try:
                for prepare in self.delegator.preparers:
                    await prepare(child)
                agent = self.delegator.build_agent(child)
                # The runner's loop; under the parent's usage and request limit, inside its tool call.
                result = await run_agent(agent, prompt, deps=child, history=history, deferred=deferred,
                                         usage=ctx.usage, capabilities=asking,
                                         usage_limits=UsageLimits(request_limit=parent.agent.limits.model_requests))
                if isinstance(result.output, DeferredToolRequests):
                    parked = result.output
                    messages[:] = result.all_messages()
                else:
                    outcome, answer = "finished", str(result.output)
            except (UsageLimitExceeded, RunCancelled) as e:
                outcome, reason = ("budget_exceeded" if isinstance(e, UsageLimitExceeded) else "stopped"), str(e)
                await self._store(parent, key, record, messages, ctx, before, outcome, reason, "")
                await forget(child)
                raise  # the parent's limit or Stop ends the parent too
            except Exception as e:  # the parent's model decides what to do about a failed delegate
                outcome, reason = "failed", f"{type(e).__name__}: {e}"
                log.warning("delegate %s failed", name, exc_info=e, extra=parent.log_fields)
                answer = f"The delegate {name} failed ({type(e).__name__}). Do this part yourself or try another."
        if parked is not None:
            calls, pending = _gated(child, name, parked)
            if calls is None:  # a call to run elsewhere, which this gateway never asks for: not something to park on
                outcome, reason = "refused", "a tool deferred its call"
                answer = f"The delegate {name} stopped: one of its tools could not run here. Do that part yourself."
            else:
                # The whole run parks: this `task` call is the parent's deferred call, carrying the delegate's
                # calls for the card; the delegate's messages are stored to resume it from, here or after a restart.
                record["pending"] = pending
                await self._store(parent, key, record, messages, ctx, before, "parked", "waiting for approval", "")
                raise ApprovalRequired(metadata={DELEGATED: [c.model_dump(mode="json") for c in calls]})
        await self._store(parent, key, record, messages, ctx, before, outcome, reason, answer)
        await forget(child)
        return clip(answer, self.config.max_result_chars)

    async def _store(self, parent: Turn, key: str, record: dict[str, Any], messages: list[Any], ctx: RunContext[Turn],
                     before: tuple[int, int, int], outcome: str, reason: str, answer: str) -> None:
        u = ctx.usage
        so_far = record.get("usage") or {}  # a resumed delegate adds to what it used before it parked
        record.update(
            outcome=outcome, reason=reason, answer=answer, ended_at=parent.clock.now().isoformat(),
            usage={"requests": so_far.get("requests", 0) + u.requests - before[0],
                   "input_tokens": so_far.get("input_tokens", 0) + (u.input_tokens or 0) - before[1],
                   "output_tokens": so_far.get("output_tokens", 0) + (u.output_tokens or 0) - before[2]},
            transcript=ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
        )
        await parent.state.put(ID, parent.conversation.id, key, json.dumps(record))


async def forget(child: Turn) -> None:
    """A delegate that has ended keeps nothing: its own state (plan, reminder cadence, snapshot) goes with it,
    and what it was lent stays its lender's. (A parked one is not ended: its resume needs its state.)"""
    for entry in child.agent.capabilities:
        if entry.id not in child.borrowed:
            try:
                await child.state.delete(entry.id, child.scope(entry.id, "conversation"))
            except Exception as e:  # a row left behind is litter, not a failed delegation
                log.warning("could not delete the state of delegate run %s: %s", child.run_id, e)


def _gated(child: Turn, name: str, requests: DeferredToolRequests) -> tuple[list[DelegatedCall] | None, list[dict[str, Any]]]:
    """The delegate's pending approvals as the parent's card shows them (its own delegates' calls named
    through it), and what to resume it with; None when it deferred something other than an approval."""
    if requests.calls:
        return None, []
    calls: list[DelegatedCall] = []
    pending: list[dict[str, Any]] = []
    for call in requests.approvals:
        nested = delegated_calls(requests.metadata.get(call.tool_call_id))
        if nested is not None:
            calls.extend(c.model_copy(update={"delegate": f"{name} › {c.delegate}"}) for c in nested)
        else:
            info = child.tools.get(call.tool_name)
            gate = requests.metadata.get(call.tool_call_id) or {}
            calls.append(DelegatedCall(tool_call_id=call.tool_call_id, tool_name=call.tool_name,
                                       args=gate.get(ARGUMENTS, call.args), arguments_digest=gate.get(DIGEST),
                                       tool_id=info.stable_id if info else call.tool_name,
                                       capability=info.capability if info else "unknown", delegate=name))
        pending.append({"id": call.tool_call_id, "nested": nested is not None})
    return calls, pending


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, SubagentsConfig)
    delegator = ctx.parts.get(ID)
    if not isinstance(delegator, Delegator):
        return None
    left = ctx.config.max_depth if ctx.turn.levels_left is None else min(ctx.turn.levels_left, ctx.config.max_depth)
    if left < 1:
        return None  # at the bound: built without delegation rather than with a tool that only refuses
    if delegator.background is not None and ctx.turn.levels_left is None and (
            _detaches(ctx.config) or ctx.config.allow_dynamic):
        # A background delegation is reachable: the async path (its own module) adds the lifecycle tools.
        from .background_delegation import build_detaching

        return build_detaching(ctx.turn, ctx.config, delegator, left)
    delegation = _Delegation(ctx.turn, ctx.config, delegator, left)
    if not delegation.delegates:
        return None
    instructions = delegation.instructions()
    if ctx.turn.levels_left is not None and _detaches(ctx.config):
        # Detaching is top-level: said, not silently downgraded.
        instructions += ("\nYou are working as a delegate yourself, so your own delegations do not run in the "
                         "background: task waits, and each answer comes back as its result.")
    return simple(instructions=instructions, tools=[Tool(delegation.task, name="task")])


def _waits(config: SubagentsConfig, pinned: Sequence[str]) -> bool:
    """Whether any configured delegate may run inside the parent's call (sync, or auto choosing so)."""
    modes = [config.modes.get(name, config.mode) for name in pinned]
    modes += [sp.mode or config.mode for sp in config.inline]
    return any(m in ("sync", "auto") for m in modes)


def _detaches(config: SubagentsConfig) -> bool:
    """Whether any delegate may run in the background: async or auto, for all or for one of them."""
    modes = {config.mode, *config.modes.values(), *(sp.mode for sp in config.inline if sp.mode)}
    return bool(modes & {"async", "auto"})


async def delegate_runs(turn: Turn) -> list[dict[str, Any]]:
    """The delegate runs stored under this turn's conversation, oldest first."""
    items = await turn.state.items(ID, turn.conversation.id)
    return sorted((json.loads(v) for v in items.values()), key=lambda r: r["started_at"])


def validate_config(config: Any, report: Callable[..., None]) -> None:
    """Refuse, with file and line, delegation that would misbehave at run time."""
    for agent_id, agent in config.agents.items():
        key = f"agent:{agent_id}"
        entries = [(i, e) for i, e in enumerate(agent.capabilities) if e.id == ID]
        for j, name in enumerate(agent.subagents):
            if name not in config.agents:
                report(key, ("subagents", j), f"unknown delegate {name!r}: a pinned delegate is another agent of this "
                       f"config (agents are: {', '.join(sorted(config.agents))})")
        held = {e.id for e in agent.capabilities if e.enabled}
        for i, entry in entries:
            try:
                cfg = SubagentsConfig.model_validate(entry.config)
            except ValueError:
                continue  # reported by the registry's own check
            for j, sp in enumerate(cfg.inline):
                if sp.model is None:
                    report(key, ("capabilities", i, "config", "inline", j),
                           f"specialist {sp.name!r} names no model: set model: (e.g. {agent.model}) — a specialist "
                           "is not lent its parent's model")
                if sp.name in agent.subagents:
                    report(key, ("capabilities", i, "config", "inline", j, "name"),
                           f"{sp.name!r} is both a pinned delegate and a specialist; rename the specialist")
            for k, shared in enumerate(cfg.share_with_delegates):
                if shared == ID:
                    report(key, ("capabilities", i, "config", "share_with_delegates", k),
                           "subagents cannot be shared: a delegate delegates only with its own subagents entry, "
                           "within its own max_depth")
                elif shared not in held:
                    report(key, ("capabilities", i, "config", "share_with_delegates", k),
                           f"{shared!r} is not a capability this agent holds, so it cannot lend it (it holds: "
                           f"{', '.join(sorted(held - {ID})) or 'nothing else'})")
            for name in cfg.modes:
                if name not in agent.subagents:
                    report(key, ("capabilities", i, "config", "modes", name),
                           f"{name!r} is not a pinned delegate of this agent (they are: "
                           f"{', '.join(agent.subagents) or 'none'}); a specialist sets its own mode:")
            if cfg.allow_questions and not _waits(cfg, agent.subagents):
                report(key, ("capabilities", i, "config", "allow_questions"),
                       "allow_questions reaches only delegates that wait (mode sync), and every delegate here runs in "
                       "the background (mode async), where nobody is left to answer: set mode: sync (or one "
                       "delegate's own mode), or remove it")
            if not agent.subagents and not cfg.inline and not cfg.allow_dynamic:
                report(key, ("capabilities", i, "id"), "subagents has no delegates: name agents under subagents: at "
                       "the top of this file, or define specialists under inline:")


register(CapabilityDecl(
    id=ID,
    name="Delegation",
    category="reasoning",
    tools=(ToolDecl("task", summary="Hand a self-contained piece of work to a delegate: wait for its answer, or "
                    "(mode async) get a run id at once and its report later."),
           ToolDecl("check_task", summary="How a background delegation is going, or its whole answer."),
           ToolDecl("wait_tasks", summary="Wait (bounded) for background delegations to end; each one's state and "
                    "answer."),
           ToolDecl("list_active_tasks", summary="The background delegations still running in this conversation."),
           ToolDecl("answer_subagent", summary="Declared and offered to no model: a delegate's question goes to the "
                    "person (allow_questions: ask_parent, sync delegates only)."),
           ToolDecl("send_message_to_subagent", side_effecting=True,
                    summary="Steer a running background delegation: the message reaches its next model request."),
           ToolDecl("soft_cancel_task", side_effecting=True,
                    summary="Ask a background delegation to finish now with what it has (a partial answer)."),
           ToolDecl("hard_cancel_task", side_effecting=True, summary="Stop a background delegation at once."),
           ToolDecl("create_agent", summary="Write a specialist for this reply, on a model the config names "
                    "(allow_dynamic)."),
           ToolDecl("delegate", summary="Hand work to a specialist created in this reply (allow_dynamic).")),
    build=build,
    config_model=SubagentsConfig,
    scopes=("agents:delegate",),
    # Not `shared`: the build keeps the run's own state, its fan-out count (`_Delegation.made`, per reply) and its
    # levels left (the turn's delegation depth, which also decides whether the tool is offered at all), and the
    # background tools are bound to the turn. The delegates' specs are made once already (`_SPECS`, `_QUIET`).
    description=("Hand self-contained work to other agents of this config (named under subagents: in the agent "
                 "file) or to specialists defined here, each on its own model; sync: the answer comes back as "
                 "the tool's result; async: the delegate works in the background and its report comes back into "
                 "the conversation by itself, then the agent continues. Every delegate run is stored with its "
                 "conversation."),
))
