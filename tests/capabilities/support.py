"""A small chat world for capability tests: a real gateway on fake platforms, people, places, a recording model.

Messages go through `Gateway.submit` (admission, identity, the durable queue) and the runner
builds each turn as it always does; only the platform edge is fake. The model is the offline
demo model (it calls a tool named in the message with `key=value` arguments), wrapped to
record what each run showed the model: its instructions and every tool result.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, AgentRunResultEvent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import ToolDefinition

from gateway.clock import Clock
from gateway.runs import llm
from gateway.daemon import Gateway
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.runs.shared_capabilities import SharedCapabilities
from gateway.runs.tool_calls import ToolCalls
from gateway.runs.turn import Turn
from gateway.store import repo

from ..conftest import running_gateway, wait_for, write_config
from ..fakes.chat import FakeChatAdapter, fake_platforms
from tests.support.patience import PATIENCE


@dataclass
class Seen:
    """What one run showed the model."""

    instructions: list[str] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    defs: dict[str, ToolDefinition] = field(default_factory=dict)
    output: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.instructions + self.tool_results + self.retries)


SEEN: list[Seen] = []


async def _recording_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    seen = SEEN[-1] if SEEN else Seen()
    seen.instructions.append(info.instructions or "")
    seen.tools = sorted(t.name for t in info.function_tools)
    seen.defs = {t.name: t for t in info.function_tools}
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                # pydantic-ai 2.68 sends a tool's retry prompt as a return part with outcome "retried".
                into = seen.retries if part.outcome == "retried" else seen.tool_results
                into.append(str(part.content))
            elif isinstance(part, RetryPromptPart):
                seen.retries.append(part.model_response())
    async for chunk in llm._demo_stream(messages, info):
        yield chunk


llm.register_model("recorder", lambda: FunctionModel(stream_function=_recording_stream, model_name="recorder"))


@dataclass(frozen=True)
class Place:
    binding: str
    platform: str
    workspace: str
    channel: str
    kind: ChatKind


@dataclass(frozen=True)
class Account:
    platform: str
    workspace: str
    account_id: str
    name: str


class World:
    """A started gateway and a way to say things in it, one finished run at a time."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self._ids = itertools.count(1)

    def adapter(self, binding: str) -> FakeChatAdapter:
        adapter = self.gw.adapters[binding]
        assert isinstance(adapter, FakeChatAdapter)
        return adapter

    def _arrive(self, who: Account, where: Place) -> None:
        """Whoever speaks in a channel is in it (until a test takes them out of `members`)."""
        adapter = self.gw.adapters.get(where.binding)
        if isinstance(adapter, FakeChatAdapter):
            adapter.members.setdefault(where.channel, set()).add(who.account_id)

    async def say(self, who: Account, where: Place, text: str, *, thread: str | None = None,
                  timeout: float = PATIENCE) -> Seen:
        """Send a message and wait (up to `timeout` s) for its run to end; what the model was shown comes back."""
        n = next(self._ids)
        seen = Seen()
        SEEN.append(seen)
        self._arrive(who, where)
        result = await self.gw.submit(InboundMessage(
            platform=where.platform, binding_id=where.binding, workspace=where.workspace, channel=where.channel,
            chat_kind=where.kind, sender=Sender(who.account_id, who.name), text=text, event_id=f"e{n}",
            message_id=f"{n}.000", thread=thread, mentioned=where.kind is not ChatKind.DM,
        ))
        assert result.accepted, result.reason
        run_id = result.run_id
        assert run_id is not None

        async def ended() -> bool:
            run = await self.gw.store.run(run_id)
            return run is not None and run.status in repo.ENDED | {repo.PARKED}

        await wait_for(ended, what=f"run of {text!r}", timeout=timeout)
        return seen

    async def turn(self, who: Account, where: Place, text: str) -> Turn:
        """The turn the runner builds for this message, without the scheduler running it.

        The message is recorded (ledger, conversation, queued run) and the run claimed as the
        scheduler would; `Runner.prepare` then builds the Turn. Used where many runs are needed
        fast: the reply is not streamed to the platform.
        """
        n = next(self._ids)
        self._arrive(who, where)
        store = self.gw.store
        identity = await store.identify(who.platform, who.workspace, who.account_id, who.name)
        msg = InboundMessage(
            platform=where.platform, binding_id=where.binding, workspace=where.workspace, channel=where.channel,
            chat_kind=where.kind, sender=Sender(who.account_id, who.name), text=text, event_id=f"d{n}",
            message_id=f"{n}.000", mentioned=True,
        )
        ref = repo.ConversationRef.of(msg)
        ingested = await store.ingest(binding_id=where.binding, event_ids=[f"{where.platform}:d{n}"], conversation=ref,
                                      identity=identity, account_id=who.account_id, text=text,
                                      agent_id=self.gw.config.bindings[where.binding].agent,
                                      platform_message_id=msg.message_id, queue_limit=1000)
        claimed = await store.claim_next_run(ingested.conversation.id)
        assert claimed is not None and claimed.run.id == ingested.run_id
        prepared = await self.gw.runner.prepare(claimed)
        assert prepared is not None
        return prepared.turn

    async def run(self, who: Account, where: Place, text: str, *, adjust: Callable[[Turn], Turn] | None = None) -> Seen:
        """One run built by the runner, driven to its end by pydantic-ai; what the model was shown.

        `adjust` changes the built Turn first (e.g. a surface with nobody to attribute notes to).
        """
        turn = await self.turn(who, where, text)
        if adjust is not None:
            turn = adjust(turn)
        seen = Seen()
        SEEN.append(seen)
        agent = self.gw.runner.build_agent(turn)
        async with agent.run_stream_events(text, deps=turn) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    seen.output = str(event.result.output)
        await self.gw.store.end_run(turn.run_id, repo.FINISHED, reply=seen.output)
        return seen

    async def command(self, who: Account, where: Place, text: str) -> str:
        """A chat command through `Gateway.submit`; returns what the sender was told privately."""
        adapter = self.adapter(where.binding)
        before = len(adapter.private)
        await self._command(who, where, text, lambda: len(adapter.private) > before)
        [(_, account, reply)] = adapter.private[before:]
        assert account == who.account_id
        return reply

    async def command_public(self, who: Account, where: Place, text: str) -> str:
        """A chat command answered in the conversation itself (`/new`); returns what was posted."""
        adapter = self.adapter(where.binding)
        before = len(adapter.posts)
        await self._command(who, where, text, lambda: len(adapter.posts) > before)
        return list(adapter.posts.values())[-1][1]

    async def _command(self, who: Account, where: Place, text: str, answered: Callable[[], bool]) -> None:
        n = next(self._ids)
        result = await self.gw.submit(InboundMessage(
            platform=where.platform, binding_id=where.binding, workspace=where.workspace, channel=where.channel,
            chat_kind=where.kind, sender=Sender(who.account_id, who.name), text=text, event_id=f"c{n}",
            message_id=f"{n}.000", mentioned=where.kind is not ChatKind.DM,
        ))
        assert not result.accepted and result.reason == "command", result
        # The answer goes out on the outbound path, after the command was acknowledged.
        await wait_for(answered, what=f"the answer to {text!r}")

    async def person(self, who: Account) -> str:
        return (await self.gw.store.identify(who.platform, who.workspace, who.account_id, who.name)).person_id


def built_for_its_run(gw: Gateway, turn: Turn) -> Agent[Turn, Any]:
    """The run's agent as pydantic-ai builds it with everything of the run in its constructor: what
    `Runner.build_agent` built for an agent with tool search until issue 37's Round 7 shared one; the
    reference a shared agent's runs are compared with (the model must be sent the same)."""
    runner = gw.runner
    capabilities: list[Any] = [ToolCalls(gw.config.gateway.limits.slow_tool_seconds, gw.clock, runner._slow_call,
                                         wrappers=tuple(runner.tool_wrappers))]
    for build in runner.capability_builders:  # what a builder made once for the shared Agent, here the run's too
        for c in build(turn):
            capabilities.extend(c.capabilities if isinstance(c, SharedCapabilities) else [c])
    return Agent(gw.models.get(turn.agent.model, gw.config.gateway.providers), deps_type=Turn,
                 output_type=[str, DeferredToolRequests], instructions=runner.instructions(turn),
                 capabilities=capabilities, name=turn.agent.id)


def slack_binding(agent: str = "assistant", **extra: Any) -> dict[str, Any]:
    return {"platform": "slack", "agent": agent, "slack": {"bot_token": "env:SLACK_BOT", "app_token": "env:SLACK_APP"},
            **extra}


def telegram_binding(agent: str = "assistant", **extra: Any) -> dict[str, Any]:
    return {"platform": "telegram", "agent": agent, "telegram": {"token": "env:TG_TOKEN"},
            "admission": {"dm": "open"}, **extra}


def agent(*capabilities: dict[str, Any], model: str = "recorder") -> dict[str, Any]:
    return {"name": "Agent", "model": model, "instructions": "You are a test agent.",
            "capabilities": list(capabilities)}


@contextlib.asynccontextmanager
async def world(directory: Path, *, agents: dict[str, dict[str, Any]] | None = None,
                bindings: dict[str, dict[str, Any]] | None = None,
                gateway: dict[str, Any] | None = None, clock: Clock | None = None) -> AsyncIterator[World]:
    cfg = write_config(
        directory,
        agents=agents or {"assistant": agent({"id": "memory_files"})},
        bindings=bindings or {"slack": slack_binding(), "telegram": telegram_binding(),
                              "web": {"platform": "web", "agent": "assistant"}},
        gateway=gateway,  # e.g. {"database": {"url": pg_url}} to run on PostgreSQL
    )
    with fake_platforms("slack", "telegram", "mattermost"):
        async with running_gateway(cfg, clock=clock) as gw:
            # A run waits for an MCP server still starting only briefly (gateway/mcp/pool.py FIRST_WAIT),
            # then answers without it: on a loaded machine a test server can take longer to start. These
            # tests are about what the agent does with its tools, so they begin once the servers' first
            # connections have ended (the bounded wait itself: tests/test_mcp_liveness.py).
            await wait_for(lambda: gw.mcp is None or all(s["state"] != "connecting"
                                                         for s in gw.mcp.readiness()["mcp"].values()),
                           what="the MCP servers' first connections")
            SEEN.clear()
            yield World(gw)


def open_connections_to(port: int) -> set[int]:
    """This machine's open TCP connections to 127.0.0.1:`port`, by their client port (/proc/net/tcp, state
    ESTABLISHED): a socket the gateway opened to that (fake) server and has not closed."""
    target = f"0100007F:{port:04X}"
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if remote == target and state == "01":
            ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports
