"""Runs one turn: builds the pydantic-ai agent the admitting binding grants, streams, records.

The binding that admitted the message decides what the run gets: the agent, the binding's
prompt appended to the instructions, the capabilities (built by the registry from the agent
spec, bound server-side to this conversation), and who will hear the answer. What tools may
use of that is the narrow `gateway.runs.turn.Turn`, their run context's deps; the adapter and the
config stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    FinalResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelHTTPError,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    RunCancelled,
    UsageLimitExceeded,
)
from pydantic_ai.agent import AbstractAgent, WrapperAgent
from pydantic_ai.capabilities import AbstractCapability, ToolSearch
from pydantic_ai.exceptions import RunTimedOut
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits
from pydantic_ai_harness.guardrails import GuardrailError, InputBlocked, OutputBlocked

from bindings.models import AgentSpec

from gateway.inbound import attachments
from gateway.runs.agent_run import run_agent
from gateway.runs.background import post_report, report_prompt
from gateway.runs.scheduled import scheduled_prompt
from gateway.outbound.delivery import ReplyStream
from gateway.outbound.files import share_files
from gateway.outbound.typing_indicator import show_typing
from gateway.runs.handoffs import is_handoff
from gateway.outbound.native_stream import NativeReplyStream
from gateway.runs.llm import ModelConfigError
from gateway.runs.in_flight import InFlight
from gateway.runs.memory import resolve_scope
from gateway.runs.shared_capabilities import SharedCapabilities
from gateway.runs.tool_calls import ToolCalls, ToolsetWrapper
from gateway.messages import Attachment, ChatKind
from gateway.store import repo, run_costs
from gateway.store.availability import StoreUnavailable
from gateway.store.background import REPORT
from gateway.store.schedules import SCHEDULED
from gateway.store.conversation_log import ConversationLog
from gateway.store.notes import NoteStore
from gateway.runs.stop import set_stop_control, stop_control_ends_with_final, stopped_notice
from gateway.outbound.adapter import (Adapter, AnswersDirectory, FetchesAttachments, ReplyTarget, ShowsStatus,
                                     StreamsNatively, offered)
from gateway.runs.turn import Memory, Requester, Turn
from gateway.tasks import Later

if TYPE_CHECKING:
    from gateway.daemon import Gateway

log = logging.getLogger("gateway.runs.runner")

TYPING_EVERY = 4.0  # renewed this often: within the shortest indicator (Telegram's 5 s)
TYPING_MARGIN = 5.0  # seconds before a longer-lived indicator would lapse that the first renewal comes


@dataclass(frozen=True)
class Prepared:
    """A run ready to drive: the tools' context and what only the runner uses (where replies go)."""

    turn: Turn
    adapter: Adapter


# Extensions (the capability registry, approvals) contribute to the agent a turn builds.
CapabilityBuilder = Callable[[Turn], Sequence[Any]]
# Awaited before the agent is built (e.g. MCP connections made ready); may add `turn.notices`.
TurnPreparer = Callable[[Turn], Awaitable[None]]
# What hears the run's voice messages before it starts, where a capability bound to the turn offers it.
ListenerFor = Callable[[Turn], "attachments.Listens | None"]
# (turn, messages, requests, stream, parked): `parked()` records the run as parked, once its card exists.
ParkHandler = Callable[[Turn, list[ModelMessage], DeferredToolRequests, ReplyStream, Callable[[], Awaitable[None]]],
                      Awaitable[None]]


# A ToolSearch as its class and constructor arguments: hashable, so it can key the shared Agent.
SearchConfig = tuple[type[ToolSearch[Turn]], tuple[tuple[str, Any], ...]]


def _configuration(search: ToolSearch[Turn]) -> SearchConfig:
    return type(search), tuple((f.name, getattr(search, f.name)) for f in fields(search) if f.init)


# pydantic-ai's default, the configuration of most agents: built once, not per run (31 calls).
_PLAIN_SEARCH = _configuration(ToolSearch())


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str = ""
    notice: str = ""  # what the person is told when the run did not finish normally


def explain_failure(e: BaseException, agent: AgentSpec) -> Outcome:
    """Map what went wrong to a run status and a sentence for the person in the chat."""
    if isinstance(e, ModelConfigError):
        return Outcome(repo.FAILED, str(e), f"I can't answer: {e}. An admin needs to configure the model.")
    if isinstance(e, UsageLimitExceeded):
        return Outcome(
            repo.BUDGET_EXCEEDED,
            str(e),
            f"I stopped: this agent may make at most {agent.limits.model_requests} model requests per reply.",
        )
    if isinstance(e, GuardrailError):  # the guardrails capability: a blocked term ends the run, its own outcome
        what = "your message" if isinstance(e, InputBlocked) else "my answer" if isinstance(e, OutputBlocked) \
            else "what a tool returned"
        return Outcome(repo.GUARDRAIL_BLOCKED, str(e), f"I stopped: {what} contains a term this agent's guardrails block.")
    if isinstance(e, RunTimedOut):
        return Outcome(
            repo.FAILED,
            "time limit",
            f"I stopped: this reply took longer than the {agent.limits.wall_clock_seconds:g} s this agent allows.",
        )
    if isinstance(e, RunCancelled):
        return Outcome(repo.STOPPED, "stopped", "I was stopped before I finished (the gateway is restarting).")
    if isinstance(e, ModelHTTPError):
        return Outcome(
            repo.FAILED,
            f"model HTTP {e.status_code}",
            f"The model service answered with an error (HTTP {e.status_code}). Try again in a moment.",
        )
    if _is_connection_error(e):
        return Outcome(repo.FAILED, "model unreachable", "The model service could not be reached. Try again in a moment.")
    return Outcome(
        repo.FAILED,
        f"{type(e).__name__}: {e}",
        f"Something went wrong while answering ({type(e).__name__}). The operator's log has details.",
    )


def _is_connection_error(e: BaseException) -> bool:
    names = {cls.__name__ for cls in type(e).__mro__}
    return bool(names & {"ConnectError", "APIConnectionError", "ConnectionError", "ClientConnectorError",
                         "ModelConnectionError"})


def history_messages(rows: Sequence[repo.Line], chat_kind: ChatKind) -> list[ModelMessage]:
    """Stored user and assistant text as model messages; in shared chats each line names its speaker."""
    out: list[ModelMessage] = []
    for row in rows:
        if row.role in ("user", REPORT, SCHEDULED):
            out.append(ModelRequest(parts=[UserPromptPart(content=speaker_line(row, chat_kind))]))
        elif row.role == "assistant":
            out.append(ModelResponse(parts=[TextPart(content=row.text)]))
    return out


def speaker_line(row: repo.Line, chat_kind: ChatKind) -> str:
    if row.role == REPORT:  # the gateway's, not a person's: framed so the model reads it as such
        return report_prompt(row.text)
    if row.role == SCHEDULED:
        return scheduled_prompt(row.text)
    if chat_kind is ChatKind.DM or not row.sender_name:
        return row.text
    return f"{row.sender_name}: {row.text}"


class Runner:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        # Around every call of every run, the first outermost (the approval gate, which `capabilities.extension`
        # puts here): applied by the shared Agents' `ToolCalls`. Filled at install, before any Agent is built.
        self.tool_wrappers: list[ToolsetWrapper] = []
        self.capability_builders: list[CapabilityBuilder] = []
        self.turn_preparers: list[TurnPreparer] = []
        self.listeners: list[ListenerFor] = []
        self.park_handler: ParkHandler | None = None
        self.resume_results: Callable[[str], Awaitable[DeferredToolResults]] | None = None
        self._in_flight = InFlight()
        # This runner's shared Agents (its clock and metrics are in them), kept no longer than it is.
        self._shared_agent = functools.lru_cache(maxsize=256)(self._agent_for)
        self._streams: dict[str, ReplyStream] = {}

    # --- building -----------------------------------------------------------------------

    async def prepare(self, claimed: repo.Claimed) -> Prepared | None:
        """The run's context, decided server-side from the binding that admitted it and who hears the answer.
        What it needs of the store came with the claim: no round trip here."""
        gw = self.gateway
        run, conversation = claimed.run, claimed.conversation
        binding = gw.config.bindings.get(run.binding_id)
        adapter = gw.adapters.get(run.binding_id)
        if binding is None or adapter is None:
            await gw.store.end_run(run.id, repo.FAILED, reason="binding no longer configured")
            return None
        agent = gw.config.agents[binding.agent]
        target = conversation.target()
        if is_handoff(conversation.key):
            # A conversation a handoff started is answered by the agent it was handed to, under its own name.
            handed = gw.config.agents.get(run.agent_id)
            if handed is None:
                await gw.store.end_run(run.id, repo.FAILED, reason=f"agent {run.agent_id} no longer configured")
                return None
            agent = handed
            target = replace(target, speaker=agent.name)
        chat_kind = ChatKind(conversation.chat_kind)
        scope = resolve_scope(agent_id=agent.id, chat_kind=chat_kind, platform=conversation.platform,
                              workspace=conversation.workspace, channel=conversation.channel,
                              person_id=run.requester_person_id, allow_personal=binding.memory.allow_personal)
        approvals = gw.approvals
        turn = Turn(
            run_id=run.id,
            conversation=conversation,
            binding=binding,
            agent=agent,
            target=target,
            requester=Requester(run.requester_person_id, run.requester_account, run.requester_name),
            clock=gw.clock,
            memory=Memory(NoteStore(gw.store), scope),
            directory=d.directory() if (d := offered(adapter, AnswersDirectory)) is not None else None,
            state=gw.store.capability_state,
            history=ConversationLog(gw.store.sessions, conversation.id),
            read_modes=lambda: approvals.modes(conversation.id),
            skills=gw.config.skills,
            tell=lambda line: self.tell(run.id, line),
            status=lambda line: show_status(adapter, turn.target, line),
            fetch_attachment=self._fetcher(adapter),
            record_media=lambda spend: self._record_media(run.id, turn, spend),
            share_files=lambda files, caption, what="": share_files(
                adapter, turn.target, gw.store, run.id, files, caption, what=what,
                on_platform_error=lambda kind: gw.metrics.platform_errors.labels(turn.target.platform, kind).inc()),
        )
        if gw.questions is not None:
            turn.ask = gw.questions.asker_for(turn, adapter)
        return Prepared(turn, adapter)

    async def _record_media(self, run_id: str, turn: Turn, spend: run_costs.MediaSpend) -> None:
        """Media made for the run `run_id` (a delegate's count as its parent's: `turn` is the parent's)."""
        labels = (spend.kind, spend.model, turn.agent.id)
        self.gateway.metrics.media_requests.labels(*labels, "no" if spend.cost_usd is None else "yes").inc()
        self.gateway.metrics.media_amount.labels(*labels, run_costs.UNIT[spend.kind]).inc(spend.amount)
        if spend.cost_usd is not None:
            self.gateway.metrics.media_cost.labels(*labels).inc(spend.cost_usd)
        try:
            await run_costs.add_media(self.gateway.store.sessions, run_id, spend)
        except Exception as e:  # bookkeeping: the media is made and still goes out; the metrics have it
            log.warning("a %s's cost was not recorded with run %s: %s", spend.kind, run_id, type(e).__name__,
                        extra=turn.log_fields)

    def _fetcher(self, adapter: Adapter) -> Callable[[Attachment], Awaitable[bytes | None]] | None:
        """The adapter's own fetch of a shared file, under the gateway's cap; None where it has none."""
        fetches = offered(adapter, FetchesAttachments)
        if fetches is None:
            return None
        cap = self.gateway.config.gateway.limits.attachment_max_bytes
        return lambda attachment: fetches.fetch_attachment(attachment, cap)

    async def tell(self, run_id: str, line: str) -> None:
        """A capability's one-line note for the person, in the reply of the run streaming it (if any)."""
        stream = self._streams.get(run_id)
        if stream is not None:
            await stream.append(("\n\n" if stream.text and not stream.text.endswith("\n") else "") + f"_{line}_\n\n")

    def instructions(self, turn: Turn) -> str:
        parts = [turn.agent.instructions.strip(), turn.binding.prompt.strip()]
        override = turn.binding.override_for(turn.conversation.channel)
        if override and override.prompt:
            parts.append(override.prompt.strip())
        return "\n\n".join(p for p in parts if p)

    def build_agent(self, turn: Turn) -> AbstractAgent[Turn, Any]:
        model = self.gateway.models.get(turn.agent.model, self.gateway.config.gateway.providers)
        # The run's own capabilities, bound to the turn; the approval gate is not one of them but a tool wrapper
        # of the shared Agent's `ToolCalls`, so it wraps outside these and sees the names the model calls.
        capabilities: list[Any] = []
        for build in self.capability_builders:
            capabilities.extend(build(turn))
        slow_seconds = self.gateway.config.gateway.limits.slow_tool_seconds
        settings = dict(turn.agent.model_settings) or None
        # The run's tool search goes in the shared Agent's constructor, which holds one anyway: pydantic-ai
        # adds a plain ToolSearch to an Agent built without one, and refuses a run's of another class
        # under its id (UserError) rather than let it replace it. An agent has one tool-discovery
        # configuration, and it holds nothing of the run (capabilities/tool_search.py reads the turn
        # from the run's deps), so the Agent is keyed by that configuration.
        search = next((_configuration(c) for c in capabilities if isinstance(c, ToolSearch)), _PLAIN_SEARCH)
        # What a builder made once for the agent and binding (`SharedCapabilities`) goes in the shared Agent too.
        shared = tuple(c for c in capabilities if isinstance(c, SharedCapabilities))
        key = (turn.agent.id, self.instructions(turn), slow_seconds, search, shared)
        gated = self._shared_agent(*key, True)
        if capabilities:
            return TurnAgent(gated, model=model, model_settings=settings,  # type: ignore[arg-type]
                             capabilities=[c for c in capabilities if not isinstance(c, (ToolSearch, SharedCapabilities))])
        # A run with no capability of its own has no tool: `ToolCalls` would wrap nothing and still cost
        # pydantic-ai's dispatch of its hooks, ~760 calls a run (bench/README.md, Round 12). It goes through
        # the Agent without it unless its caller brings a capability, a toolset or deferred results (`TurnAgent`).
        return TurnAgent(self._shared_agent(*key, False), model=model, model_settings=settings,  # type: ignore[arg-type]
                         capabilities=(), gated=gated)

    def _agent_for(self, name: str, instructions: str, slow_seconds: float, search: SearchConfig,
                   shared: tuple[SharedCapabilities, ...], gated: bool) -> Agent[Turn, Any]:
        """The pydantic-ai Agent every run of the agent `name` with these `instructions` goes through,
        built once (`_shared_agent`; its constructor cost ~0.3 ms a message, building the output schema
        and its toolsets again). What it holds changes only with the config, so a reload meets new
        values under a new key: the instructions (the agent's, the binding's prompt, a channel's
        override), which pydantic-ai puts before the capabilities' own, `ToolCalls` (the extensions'
        `tool_wrappers`, the approval gate first, and the slow-call report, in one capability) and the tool
        search (`search`: pydantic-ai's default where the agent has none). Given to each run as capabilities
        instead, the instructions and the slow-call report cost ~0.4 and ~0.3 ms of pydantic-ai's binding
        them per run on the way to the model request (bench/README.md, Round 7), a run's tool search
        replacing the Agent's ~0.5 ms more (Round 7, tool search), and the gate as a run's made pydantic-ai
        compose the run's capability layers for every run, a tool-less one too (Round 8). The model,
        settings and the other capabilities bound to the turn are each run's (`TurnAgent`), but those a
        builder made once for the agent and binding (`shared`: they read the run from its deps), which sit
        here after `ToolCalls`, inside its wrappers as a run's own would. Bounded: delegates' dynamic agents
        are named by the model. Not `gated`: the same without `ToolCalls`, for runs that offer no tool
        (`build_agent`)."""
        cls, values = search
        capabilities: list[AbstractCapability[Turn]] = [c for held in shared for c in held.capabilities]
        capabilities.append(cls(**dict(values)))
        if gated:
            # The live list, not a copy: an Agent built before an extension installed its wrapper still gets it.
            capabilities.insert(0, ToolCalls(slow_seconds, self.gateway.clock, self._slow_call,
                                             wrappers=self.tool_wrappers))
        return Agent(None, deps_type=Turn, output_type=[str, DeferredToolRequests], name=name,
                     instructions=instructions or None, capabilities=capabilities)

    def _slow_call(self, turn: Turn, tool: str, seconds: float, failed: bool) -> None:
        log.warning("slow tool call: %s took %.1f s%s", tool, seconds, " and failed" if failed else "",
                    extra={**turn.log_fields, "agent": turn.agent.id, "tool": tool, "seconds": round(seconds, 1),
                           "failed": failed})
        self.gateway.metrics.slow_tool_calls.labels(tool=tool, failed=str(failed).lower()).inc()

    # --- running ------------------------------------------------------------------------

    async def execute(self, claimed: repo.Claimed) -> None:
        """Run a freshly claimed run from its queued user messages (or resume a decided one)."""
        run = claimed.run
        prepared = await self.prepare(claimed)
        if prepared is None:
            self._in_flight.done(run.id)  # a Stop kept for its start (`stop`): it ended instead
            return
        turn = prepared.turn
        if run.state is not None and self.resume_results is not None:
            # A parked run whose calls were all decided: continue from its stored messages,
            # answering below the card in a new message.
            stream = self.stream_for(prepared, segment=True)
            deferred = await self.resume_results(run.id)
            await self.drive(turn, prompt=None, history=load_messages(run.state), deferred=deferred, stream=stream)
            return
        if run.kind in (REPORT, SCHEDULED) and claimed.fresh:  # its card first, then the turn that continues
            for line in claimed.prompt:
                if line.role in (REPORT, SCHEDULED):
                    await post_report(prepared.adapter, turn.target, line.text, self.gateway.store, self.gateway.clock)
        prompt: str | list[UserContent] = "\n\n".join(speaker_line(r, turn.chat_kind) for r in claimed.prompt)
        files = attachments.Files()
        if claimed.files:
            files = await attachments.for_run(run.id, prepared.adapter, self.gateway.store.capability_state,
                                              max_bytes=self.gateway.config.gateway.limits.attachment_max_bytes,
                                              profile=self._profile(turn), uploads=self.gateway.uploads,
                                              listener=self._listener(turn),
                                              keep_transcript=self.gateway.store.keep_transcript)
        if files.parts:
            prompt = [prompt, *files.parts]
            turn.notices.extend(files.notices)
        history = history_messages(claimed.history, turn.chat_kind)
        # A run that never started has posted nothing: no delivery rows to look up.
        await self.drive(turn, prompt=prompt, history=history, stream=self.stream_for(prepared, fresh=claimed.fresh))

    def _listener(self, turn: Turn) -> attachments.Listens | None:
        """The first listener a capability of this turn offers (the `audio` capability's), else None."""
        for listener_for in self.listeners:
            listener = listener_for(turn)
            if listener is not None:
                return listener
        return None

    def _profile(self, turn: Turn) -> Mapping[str, Any]:
        """What the model takes (images, documents); a model that cannot be built fails later, in `drive`."""
        try:
            return self.gateway.models.get(turn.agent.model, self.gateway.config.gateway.providers).profile
        except Exception:
            return {}

    def stream_for(self, prepared: Prepared, *, segment: bool = False, fresh: bool = False) -> ReplyStream:
        gw = self.gateway
        turn = prepared.turn
        on_error = lambda kind: gw.metrics.platform_errors.labels(turn.target.platform, kind).inc()  # noqa: E731
        # A run's first reply only; a native stream cannot post under another agent's name.
        native = offered(prepared.adapter, StreamsNatively)
        live = native.native_stream(turn.target) if native is not None and fresh and not segment and not turn.target.speaker else None
        if live is not None:
            return NativeReplyStream(live, prepared.adapter, turn.target, gw.store, turn.run_id, gw.clock, fresh=True,
                                     on_platform_error=on_error)
        return ReplyStream(prepared.adapter, turn.target, gw.store, turn.run_id, gw.clock, segment=segment, fresh=fresh,
                           on_platform_error=on_error)

    async def drive(
        self,
        turn: Turn,
        *,
        prompt: str | Sequence[UserContent] | None,
        history: list[ModelMessage],
        deferred: DeferredToolResults | None = None,
        stream: ReplyStream,
    ) -> None:
        """Run the agent to an outcome: finished, parked, or an end the person is told about."""
        gw = self.gateway
        started = gw.clock.monotonic()
        token = self._in_flight.start(turn.run_id)
        self._streams[turn.run_id] = stream
        # The sign shown on the message's arrival counts as the first renewal while the platform still
        # shows it (in a backlog a run starts seconds later; Slack's status lasts two minutes): the next
        # is due when that one would need renewing, at most TYPING_EVERY away, so a run that waited
        # 1-4 s keeps Telegram's 5 s indicator without a gap, and a run that ends sooner (most) sends
        # none. A run that starts with none showing (none sent, it lapsed, or a reply cleared it) shows one now.
        lasts = stream.adapter.limits.typing_lasts
        working = gw.typing_indicator.run_started(turn.conversation.id)  # until the post that clears it
        since = working.since
        within = max(TYPING_EVERY, lasts - TYPING_MARGIN)
        due = min(TYPING_EVERY, within - since) if since is not None and since < within else 0.0
        typing = Later(gw.clock, due, lambda: self._typing_renewals(turn, stream), name=f"typing:{turn.run_id}")
        usage: tuple[int, int, int] | None = None
        status = repo.RUNNING
        tools_done: list[str] = []
        control = False  # the Stop control is on the reply

        async def put_stop_control() -> None:  # once the reply's first draft is posted, whenever that is
            # The stream runs this with no draft going out meanwhile, one at a time: on a draft, or
            # `between_drafts` after an event when a budget had no room for it at the first try.
            nonlocal control
            if not control:
                control = await set_stop_control(stream.adapter, turn.target, stream.first_message_id,
                                                 turn.run_id, True)

        stream.on_first_post = put_stop_control
        try:
            if not due:
                await asyncio.sleep(0)  # the indicator started now writes its request before the run's work
            if gw.models.warming is not None:  # the warm-up's thread imports what this run would import
                log.debug("run waits for the warm-up", extra=turn.log_fields)
                await gw.models.until_warm()
            for prepare in self.turn_preparers:
                await prepare(turn)
            agent = self.build_agent(turn)
            for notice in turn.notices:
                await stream.append(f"_{notice}_\n\n")
            separate = False
            answer = AnswerEnd()

            async def shown(event: Any) -> None:  # the reply streams as the model writes it
                nonlocal separate
                if answer.written(event):
                    # Shown now, not after the run's end (if the run goes on after all, its next event puts
                    # the Stop control on). Not where the Stop control is on already: the final edit takes
                    # it away in the same call, where an edit now would leave it on the answer.
                    if not control:
                        await stream.show_answer()
                    return
                text = _text_of(event)
                if text:
                    if separate and stream.text and not stream.text.endswith("\n"):
                        await stream.append("\n\n")
                    separate = False
                    await stream.append(text)
                elif isinstance(event, FunctionToolCallEvent):
                    await show_status(stream.adapter, turn.target, f"using {event.part.tool_name}…")
                elif isinstance(event, FunctionToolResultEvent):
                    separate = True
                    tools_done.append(event.part.tool_name)
                if not control and stream.posted and not isinstance(event, AgentRunResultEvent):
                    await stream.between_drafts(put_stop_control)  # a budget with no room for it then: again now

            result = await run_agent(agent, prompt, deps=turn, history=history, deferred=deferred,
                                     usage_limits=UsageLimits(request_limit=turn.agent.limits.model_requests),
                                     cancellation_token=token, timeout=turn.agent.limits.wall_clock_seconds,
                                     on_event=shown)
            await stream.settle()  # a draft being shown lands before anything looks at what is posted
            u = result.usage
            usage = (u.requests, u.input_tokens or 0, u.output_tokens or 0)
            gw.metrics.tokens.labels("input").inc(usage[1])
            gw.metrics.tokens.labels("output").inc(usage[2])
            typing.cancel()
            if isinstance(result.output, DeferredToolRequests):
                if self.park_handler is None:
                    raise RuntimeError("a tool asked for approval but approvals are not available")
                # What was said before the card stays above it; the answer after goes below.
                if stream.text.strip():
                    await stream.finish()
                status = repo.PARKED
                # The files' contents stay in this run's memory, never in its stored state.
                state = await asyncio.to_thread(lambda: _dump(attachments.without_contents(result.all_messages())))
                reply_so_far = stream.text.strip() or None

                async def parked() -> None:
                    await gw.store.end_run(turn.run_id, repo.PARKED, usage=usage, state=state, reply=reply_so_far)

                working.end()  # its card clears the indicator: a message meanwhile shows its own
                await self.park_handler(turn, result.all_messages(), result.output, stream, parked)
                return
            reply = (stream.text or str(result.output)).strip()
            rows: list[repo.FinalRow] = []  # the reply's final rows go with the run's end: one transaction
            if control:  # the final edit takes the Stop control away where the adapter can (one call, not two)
                stop_control_ends_with_final(stream.adapter, turn.target, stream.first_message_id)
            await stream.finish(reply, rows=rows)
            working.end()  # the final cleared the indicator; the run's end may still wait for the store
            status = repo.FINISHED
            await gw.store.end_run(turn.run_id, repo.FINISHED, usage=usage, reply=reply, deliveries=rows)
            gw.metrics.run_ended(turn, repo.FINISHED)
        except (asyncio.CancelledError, StoreUnavailable):
            raise  # a busy database is not the run's failure: the scheduler runs it again
        except Exception as e:
            typing.cancel()
            outcome = explain_failure(e, turn.agent)
            stopped_by = self._in_flight.stopped_by(turn.run_id)
            if isinstance(e, RunCancelled) and stopped_by is not None:
                outcome = Outcome(repo.STOPPED, f"stopped by {stopped_by}",
                                  stopped_notice(stopped_by, tools_done, bool(stream.text.strip())))
            if outcome.status == repo.FAILED and not isinstance(e, (ModelConfigError, RunTimedOut)):
                log.warning("run failed", exc_info=e, extra=turn.log_fields)
            else:
                log.info("run ended %s: %s", outcome.status, outcome.reason, extra=turn.log_fields)
            shown = (stream.text + "\n\n" if stream.text.strip() else "") + f"_{outcome.notice}_"
            try:
                await stream.finish(shown)
            except Exception as notice_error:  # the run still ends with its outcome; the reply may lack the line
                log.warning("the %s notice was not shown: %s: %s", outcome.status, type(notice_error).__name__,
                            notice_error, extra=turn.log_fields)
            working.end()
            status = outcome.status
            await gw.store.end_run(turn.run_id, outcome.status, reason=outcome.reason, usage=usage, reply=shown)
            gw.metrics.run_ended(turn, outcome.status)
        finally:
            working.end()  # first: the awaits below may be cancelled
            stream.close()
            await typing.close()
            self._in_flight.done(turn.run_id)
            self._streams.pop(turn.run_id, None)
            if control:  # the reply is final (or parked, or stopped): nothing left to stop
                await set_stop_control(stream.adapter, turn.target, stream.first_message_id, turn.run_id, False)
            gw.metrics.run_took(turn, gw.clock.monotonic() - started)
            log.debug("run %s", status, extra=turn.log_fields)
            gw.events.run_ended(turn.conversation.id, turn.run_id, status)

    def _typing_renewals(self, turn: Turn, stream: ReplyStream) -> Coroutine[Any, Any, None] | None:
        """`_keep_typing`, or None where the status line took over already (`ShowsStatus`, the reply
        posted): in a burst most runs outlast the first renewal's moment, and then no task is made."""
        if offered(stream.adapter, ShowsStatus) is not None and stream.posted:
            return None
        return self._keep_typing(turn, stream)

    async def _keep_typing(self, turn: Turn, stream: ReplyStream) -> None:
        """Show the platform's working indicator until the reply's final (the runner cancels this then).

        Where the platform has a status line (`ShowsStatus`: Slack's assistant threads, the web page),
        the indicator goes once the first text is out and the status says what the run does meanwhile
        ("using web_fetch…"). Elsewhere (Telegram, Mattermost) the indicator is the only sign of work:
        without it a long tool call after the first draft would look like a reply that stopped. Each
        renewal skips itself when the platform's budget has no room (`show_typing`), and on Telegram
        counts against the bot's budget only, never the chat's or the group's, so a final never waits for it.
        """
        until_final = offered(stream.adapter, ShowsStatus) is None
        while until_final or not stream.posted:
            await show_typing(stream.adapter, turn.target)
            await self.gateway.clock.sleep(TYPING_EVERY)  # the gateway's clock: a test moves it

    def cancel_all(self) -> int:
        """Ask every run in flight to stop (SIGTERM after the grace period); completed work is kept."""
        return self._in_flight.cancel_all()

    def stop(self, run_id: str, who: str) -> bool:
        """A person's Stop for a run in flight here, or claimed here and not started yet (a run's end claimed it
        for a worker still waiting for a slot, or it fetches its files): that one starts stopped, its model never
        asked. False when the run is neither (it ended, or another process holds it)."""
        return self._in_flight.stop(run_id, who, claimed=self.gateway.scheduler.holds(run_id))

    def uses(self, adapter: Adapter) -> bool:
        """Whether a run in flight here replies through `adapter`."""
        return any(stream.adapter is adapter for stream in self._streams.values())

    def live(self, run_id: str) -> tuple[str, str | None] | None:
        """What a run in flight in this process has said so far, and the id of the message it is
        writing it into (None before its first post); None if the run is not running here."""
        stream = self._streams.get(run_id)
        return (stream.text, stream.first_message_id) if stream is not None else None

    @property
    def running_ids(self) -> list[str]:
        return self._in_flight.ids()


# What a caller may give a run besides capabilities that can make it call a tool (`Agent.iter`'s names).
_MAY_CALL_TOOLS = ("toolsets", "deferred_tool_results", "spec", "workspace")


class TurnAgent(WrapperAgent[Turn, Any]):
    """One run's agent: the shared `Runner._agent_for` with this run's model, model settings and capabilities,
    which pydantic-ai takes per run (`Agent.iter`), so nothing is built per message but them.
    Capabilities a caller adds for its run (a background delegate's inbox) come after these.

    `gated`: where `wrapped` is the shared Agent without `ToolCalls` (a run with no tool of its own), the one
    with it. A run whose caller brings what can call a tool (a capability, a toolset, deferred calls'
    results) goes through that one, so the gate is around every call of every run."""

    def __init__(self, wrapped: Agent[Turn, Any], *, model: Model, model_settings: ModelSettings | None,
                 capabilities: Sequence[AbstractCapability[Turn]], gated: Agent[Turn, Any] | None = None) -> None:
        super().__init__(wrapped)
        self._model, self._settings = model, model_settings
        self._capabilities = list(capabilities)
        self._gated = gated

    @property
    def model(self) -> Model:
        return self._model

    def iter(self, user_prompt: Any = None, *, model: Any = None, instructions: Any = None,  # type: ignore[override]
             model_settings: Any = None, capabilities: Sequence[Any] | None = None,
             **kwargs: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        agent = self.wrapped
        if self._gated is not None and (capabilities or any(kwargs.get(k) for k in _MAY_CALL_TOOLS)):
            agent = self._gated
        # The shared Agent's own context manager, not one more `asynccontextmanager` layer around it.
        return agent.iter(
            user_prompt, model=model or self._model, instructions=instructions,
            model_settings=model_settings if model_settings is not None else self._settings,
            capabilities=[*self._capabilities, *(capabilities or ())], **kwargs,
        )


async def show_status(adapter: Adapter, target: ReplyTarget, text: str) -> None:
    """A status is a nicety: it never fails or holds up a run."""
    status = offered(adapter, ShowsStatus)
    if status is None:
        return
    try:
        await status.show_status(target, text)
    except Exception as e:
        log.debug("status not shown: %s", e)


class AnswerEnd:
    """Tells from a run's events when the model's answer is written: the text part that ends a
    response whose text is the run's output (pydantic-ai's FinalResultEvent) and which calls no tool."""

    def __init__(self) -> None:
        self._answer = False  # this response's text is the run's output
        self._calls = False  # this response calls a tool: the run goes on after it

    def written(self, event: Any) -> bool:
        if isinstance(event, FinalResultEvent):
            self._answer = event.tool_name is None
        elif isinstance(event, PartStartEvent) and isinstance(event.part, ToolCallPart):
            self._calls = True
        elif isinstance(event, FunctionToolResultEvent):
            self._calls = False  # the next response is the model's own again
        elif isinstance(event, PartEndEvent) and isinstance(event.part, TextPart) and event.next_part_kind is None:
            written, self._answer = self._answer and not self._calls, False
            return written
        return False


def _text_of(event: Any) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def _dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def load_messages(state: str) -> list[ModelMessage]:
    return list(ModelMessagesTypeAdapter.validate_json(state))
