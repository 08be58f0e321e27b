"""The capability registry: what an agent can do is code, declared here and reviewable.

Each capability declares its id, name, category, the tools it contributes (stable ids, and
which are side-effecting), the scopes it needs, whether it needs a key, and a pydantic config
model. `build` turns one agent's entry into a pydantic-ai capability for one run, or None when
bound with nothing usable (then it is not attached at all).

The registry also owns what an entry may change (`approval`, `tool_approval`,
`tool_overrides`): renames are applied with pydantic-ai's renamed toolset, and every offered
tool is entered into the run's visible-name → stable-id map that the approval gate reads.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bindings.models import CapabilityEntry
from bindings.secrets import Secret, SecretError
from gateway import extensions
from gateway.approvals.policy import TOOL_NAME, ToolInfo

if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability, Capability

    from bindings.loader import LoadedConfig
    from gateway.inbound.attachments import Listens
    from gateway.runs.shared_capabilities import SharedCapabilities
    from gateway.runs.turn import Turn

# Declarations and config checks import no pydantic-ai: `agent-gateway check` and the admin's commands
# load the config without it (bench/README.md). Building a run's capabilities imports it (`bound.py`).

P = TypeVar("P")



class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ToolDecl:
    id: str
    side_effecting: bool = False
    summary: str = ""


@dataclass(frozen=True)
class BuildContext:
    """What a capability is built from for one run: server-side facts, never the model's."""

    turn: Turn
    entry: CapabilityEntry
    config: BaseModel
    secret: Secret | None
    # Daemon-lifetime collaborators by capability id (the context library, the knowledge index),
    # handed to `build_for_turn` where the gateway wires it; never reached for through the daemon.
    parts: Mapping[str, Any] = field(default_factory=dict)

    def part(self, name: str, kind: type[P]) -> P:
        """The collaborator the gateway handed in under `name`; a wiring mistake if it is missing."""
        found = self.parts.get(name)
        if not isinstance(found, kind):
            raise RuntimeError(f"{self.entry.id} needs the gateway's {kind.__name__} (see gateway/extensions.py)")
        return found


Builder = Callable[[BuildContext], "AbstractCapability[Any] | None"]
# What hears a turn's voice messages before it runs (gateway.inbound.attachments.Listens), or None.
ListenerBuilder = Callable[[BuildContext], "Listens | None"]


@dataclass(frozen=True)
class CapabilityDecl:
    id: str
    name: str
    category: str
    tools: tuple[ToolDecl, ...]  # () says "no tools, by design"
    build: Builder
    config_model: type[BaseModel] = NoConfig
    scopes: tuple[str, ...] = ()
    needs_key: Literal["no", "required", "conditional"] = "no"
    description: str = ""
    binding_only: bool = False  # granted per binding (channel_tools), refused in an agent file
    # Whether lending it (share_with_delegates) lends its state too (`Turn.owner`): a plan or a workspace,
    # yes; a compaction snapshot is the conversation's history, which a delegate's run is never part of.
    lends_state: bool = True
    # What the capability holds for the daemon's lifetime (shared HTTP clients): objects with an async
    # `stop()`, awaited when the gateway stops if the capability was loaded (`LoadedCapabilities`), and
    # optionally `reloaded(config)`, told each reload's config (to close what it no longer names).
    holds: tuple[Any, ...] = ()
    # Extra publish-time checks: (config) -> list of (field path, message).
    check: Callable[[BaseModel], list[tuple[tuple[str | int, ...], str]]] | None = None
    # Checks that need the whole entry (approval, secret_id beside the config):
    # (entry, config) -> list of (path within the entry, message).
    check_entry: Callable[[CapabilityEntry, BaseModel], list[tuple[tuple[str | int, ...], str]]] | None = None
    # Hears the turn's voice messages before the run starts (audio's transcribe_voice_messages).
    listens: ListenerBuilder | None = None
    # The module `build` imports with the first run (the capability's pydantic-ai code), where the
    # declaration keeps it out of a config check: imported in the daemon's warm-up, so no run pays.
    runtime: str | None = None
    # Built once per agent and binding and kept in the runner's shared Agent (`SharedBuilds`), not per run:
    # only for a capability whose build keeps nothing of `BuildContext.turn` and whose tools and
    # instructions read the run (person, memory scope, conversation, clock) from `ctx.deps` at call time.
    shared: bool = False

    @property
    def tool_ids(self) -> frozenset[str]:
        return frozenset(t.id for t in self.tools)

    def catalog_entry(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "category": self.category,
            "description": self.description,
            "tools": [{"id": t.id, "side_effecting": t.side_effecting, "summary": t.summary} for t in self.tools],
            "scopes": list(self.scopes),
            "key": self.needs_key,
            "binding_only": self.binding_only,
            "config_schema": self.config_model.model_json_schema(),
        }


# The capabilities loaded so far, by id. Each module registers its own declaration when imported;
# which module declares an id is said by the entry points of group `agent_gateway.capabilities`
# (pyproject.toml), so a module is imported only once a config names its capability.
REGISTRY: dict[str, CapabilityDecl] = {}


def register(decl: CapabilityDecl) -> CapabilityDecl:
    REGISTRY[decl.id] = decl
    return decl


def decl_for(capability_id: str) -> CapabilityDecl | None:
    """The capability `capability_id`: registered already, or imported now from its entry point.
    None when no installed distribution declares it (`validate_config` says so, with the file)."""
    if capability_id not in REGISTRY:
        ep = extensions.entry_point(extensions.CAPABILITIES, capability_id)
        if ep is not None:
            ep.load()  # the module registers its declaration
    return REGISTRY.get(capability_id)


class LoadedCapabilities:
    """A part of the gateway that stops what the loaded capabilities hold (`CapabilityDecl.holds`).

    Only what a config named is loaded, so this is asked at stop rather than handed each holding at
    start: a capability first named by a reload is stopped too, and one never named is never imported."""

    def reloaded(self, config: LoadedConfig) -> None:
        for decl in list(REGISTRY.values()):
            for held in decl.holds:
                if hasattr(held, "reloaded"):
                    held.reloaded(config)

    async def stop(self) -> None:
        for decl in list(REGISTRY.values()):
            for held in decl.holds:
                await held.stop()


def load_all() -> dict[str, CapabilityDecl]:
    """Every capability the installed distributions declare (for the catalog), and any registered in code."""
    for name in extensions.names(extensions.CAPABILITIES):
        decl_for(name)
    return REGISTRY


# --- building one run's capabilities ------------------------------------------------------


def entries_for(turn: Turn) -> list[CapabilityEntry]:
    """The agent's enabled entries, plus the binding's channel tools when the run has a channel."""
    entries = [e for e in turn.agent.capabilities if e.enabled]
    channel_tools = turn.binding.channel_tools
    override = turn.binding.override_for(turn.conversation.channel)
    if override and override.channel_tools is not None:
        channel_tools = override.channel_tools
    if channel_tools is not None and channel_tools.tools:
        entries.append(CapabilityEntry(id="channel_tools", config=channel_tools.model_dump()))
    # The binding's approval settings for channel tools live on the agent's entry, if any.
    return entries


def build_for_turn(turn: Turn, parts: Mapping[str, Any] | None = None,
                   shared: SharedBuilds | None = None) -> list[Any]:
    """The runner's capability builder: registry entries → pydantic-ai capabilities + the gate's map.

    With `shared`, the capabilities declared `shared` come back as one `SharedCapabilities`, built
    once for the run's agent and binding (the runner puts them in its shared Agent); the gate's map is
    filled for them on every run all the same, so their tools are gated exactly as a run's own."""
    built: list[Any] = []
    if shared is not None and turn.agent.capabilities:
        made = shared.get(turn, parts or {})
        turn.tools.update(made.tools)
        turn.notices.extend(made.notices)
        if made.capabilities is not None:
            built.append(made.capabilities)
    overrides = {e.id: e for e in turn.agent.capabilities}
    for entry in entries_for(turn):
        decl = decl_for(entry.id)
        if decl is None:
            continue  # refused at load; a capability removed from code since is simply absent
        if shared is not None and _is_shared(decl):
            continue
        # channel_tools' approval and renames can be set on an agent entry of the same id.
        policy_entry = overrides.get(entry.id, entry) if decl.binding_only else entry
        capability = _bind(decl, entry, policy_entry, turn, parts or {}, turn.tools)
        if capability is not None:
            built.append(capability)
    return built


def read_key(entry: CapabilityEntry) -> Secret | None:
    """The entry's key as it reads now, or None when it names none or it cannot be read."""
    if entry.secret_id is None:
        return None
    try:
        return entry.secret_id.resolve()
    except SecretError:
        return None


def _is_shared(decl: CapabilityDecl) -> bool:
    return decl.shared and not decl.binding_only


def _bind(decl: CapabilityDecl, entry: CapabilityEntry, policy_entry: CapabilityEntry, turn: Turn,
          parts: Mapping[str, Any], tools: dict[str, ToolInfo]) -> AbstractCapability[Any] | None:
    """One entry built and bound: the entry's renames, descriptions and the binding's denied tools applied,
    its offered tools entered into `tools` (the gate's map). None when bound with nothing usable."""
    from .bound import Bound

    config = decl.config_model.model_validate(entry.config)
    capability = decl.build(BuildContext(turn, entry, config, read_key(policy_entry), parts))
    if capability is None:
        return None
    renames: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    denied = frozenset(turn.binding.deny_tools)
    hidden = frozenset(t.id for t in decl.tools if t.id in denied)
    for tool in decl.tools:
        if tool.id in hidden:
            continue  # not in the gate's map either: a call to it is an unknown tool
        override = policy_entry.tool_overrides.get(tool.id)
        visible = override.name if override and override.name else tool.id
        if visible != tool.id:
            renames[visible] = tool.id
        if override and override.description:
            descriptions[visible] = override.description
        tools[visible] = ToolInfo(
            stable_id=tool.id,
            capability=decl.id,
            side_effecting=tool.side_effecting,
            approval=policy_entry.approval,
            tool_approval=policy_entry.tool_approval.get(tool.id, "default"),
        )
    if renames or descriptions or hidden:
        return Bound(capability, renames=renames, descriptions=descriptions, hidden=hidden)
    return capability


V = TypeVar("V")


class ByIdentity(Generic[V]):
    """What was made from some config objects, kept while they are the config's: keyed by their identity
    (a reload parses new ones, so it makes anew) and an optional hashable `also`, each entry kept with
    its objects so their ids cannot be reused meanwhile; bounded, least recently used out first."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._made: dict[tuple[Any, ...], tuple[tuple[object, ...], V]] = {}

    def get(self, objects: tuple[object, ...], make: Callable[[], V], also: Hashable = None) -> V:
        key = (*map(id, objects), also)
        found = self._made.get(key)
        if found is None or any(a is not b for a, b in zip(found[0], objects, strict=True)):
            found = (objects, make())
            if len(self._made) >= self._size:
                del self._made[next(iter(self._made))]  # the least recently used: a config long replaced
        else:  # used again: last out, so one-off configs never push out the ones in use
            del self._made[key]
        self._made[key] = found
        return found[1]


@dataclass(frozen=True)
class SharedBuild:
    """What `SharedBuilds` made for an agent and binding: the capabilities (None when none is shared), their
    tools for the gate's map, and the notes their builds left for the person (`Turn.notices`), told to every
    run: what a shared build says is the config's, not the one run it was built in."""

    capabilities: SharedCapabilities | None
    tools: Mapping[str, ToolInfo]
    notices: tuple[str, ...] = ()


class SharedBuilds:
    """The `shared` capabilities of each agent and binding, built once and kept while both are the config's
    (`ByIdentity`). What a shared capability's build is given of the turn is the first run's: a capability
    declared `shared` keeps nothing of it (`CapabilityDecl.shared`)."""

    def __init__(self, size: int = 256) -> None:
        self._built: ByIdentity[SharedBuild] = ByIdentity(size)

    def get(self, turn: Turn, parts: Mapping[str, Any]) -> SharedBuild:
        return self._built.get((turn.agent, turn.binding), lambda: self._build(turn, parts))

    def _build(self, turn: Turn, parts: Mapping[str, Any]) -> SharedBuild:
        from gateway.runs.shared_capabilities import SharedCapabilities

        tools: dict[str, ToolInfo] = {}
        built: list[AbstractCapability[Any]] = []
        told = replace(turn, notices=[])  # what the builds tell the person is kept for every run
        for entry in entries_for(told):
            decl = decl_for(entry.id)
            if decl is not None and _is_shared(decl):
                capability = _bind(decl, entry, entry, told, parts, tools)
                if capability is not None:
                    built.append(capability)
        return SharedBuild(SharedCapabilities(tuple(built)) if built else None, tools, tuple(told.notices))


def listener_for(turn: Turn, parts: Mapping[str, Any] | None = None) -> Listens | None:
    """The runner's listener: the first capability bound to this turn that hears voice messages."""
    for entry in entries_for(turn):
        decl = decl_for(entry.id)
        if decl is None or decl.listens is None:
            continue
        listener = decl.listens(BuildContext(turn, entry, decl.config_model.model_validate(entry.config),
                                             read_key(entry), parts or {}))
        if listener is not None:
            return listener
    return None


def simple(instructions: Any = None, toolsets: list[Any] | None = None, tools: list[Any] | None = None) -> Capability[Any]:
    """A pydantic-ai Capability from parts, for capabilities that need no subclass."""
    from pydantic_ai.capabilities import Capability

    return Capability(instructions=instructions, toolsets=toolsets or (), tools=tools or ())


# --- publish-time validation --------------------------------------------------------------


def validate_config(config: LoadedConfig, report: Callable[[str, tuple[str | int, ...], str], None]) -> None:
    """Refuse what would silently misbehave at run time, with a sentence saying how to fix it."""
    granted = set(config.gateway.scopes.granted)
    for agent_id, agent in config.agents.items():
        key = f"agent:{agent_id}"
        seen_names: dict[str, str] = {}
        for i, entry in enumerate(agent.capabilities):
            loc: tuple[str | int, ...] = ("capabilities", i)
            decl = decl_for(entry.id)
            if decl is None:
                known = ", ".join(sorted(k for k, d in load_all().items() if not d.binding_only))
                declared = extensions.entry_point(extensions.CAPABILITIES, entry.id) is not None
                why = (f"its entry point in group {extensions.CAPABILITIES} declares no capability of that id"
                       if declared else f"no entry point {entry.id!r} in group {extensions.CAPABILITIES}")
                report(key, (*loc, "id"), f"unknown capability {entry.id!r}: {why}; available: {known}")
                continue
            missing = [scope for scope in decl.scopes if scope not in granted]
            if missing and entry.enabled:
                report(key, (*loc, "id"), f"{entry.id} needs the scope {missing[0]} and gateway.yaml's "
                       f"scopes.granted does not grant it: grant it there, or remove {entry.id} from this agent")
            if decl.binding_only and entry.config:
                report(key, (*loc, "config"), f"{entry.id} is granted per binding: move its config to the binding's "
                       f"`{entry.id}:` section (the agent entry may only set approval and tool overrides)")
            try:
                cfg = decl.config_model.model_validate(entry.config)
            except ValidationError as e:
                for err in e.errors():
                    report(key, (*loc, "config", *err["loc"]), err["msg"].removeprefix("Value error, "))
                cfg = None
            if cfg is not None and decl.check is not None:
                for sub, message in decl.check(cfg):
                    report(key, (*loc, "config", *sub), message)
            if cfg is not None and decl.check_entry is not None:
                for sub, message in decl.check_entry(entry, cfg):
                    report(key, (*loc, *sub), message)
            for field_name in ("tool_approval", "tool_overrides"):
                for tool_id in getattr(entry, field_name):
                    if tool_id not in decl.tool_ids:
                        offered = ", ".join(sorted(decl.tool_ids)) or "none (it has no tools)"
                        report(key, (*loc, field_name, tool_id),
                               f"{entry.id} has no tool {tool_id!r}; its tools are: {offered}")
            for tool_id, override in entry.tool_overrides.items():
                if override.name is not None and not TOOL_NAME.match(override.name):
                    report(key, (*loc, "tool_overrides", tool_id, "name"),
                           f"{override.name!r} is not a name a model can call: use 1-64 letters, digits, '_' or '-'")
            # Two tools the model would see under one name: the second would shadow the first.
            for tool in decl.tools:
                override = entry.tool_overrides.get(tool.id)
                name = override.name if override and override.name else tool.id
                if name in seen_names and entry.enabled:
                    report(key, (*loc, "tool_overrides", tool.id) if override and override.name else (*loc, "id"),
                           f"the model would see two tools named {name!r} (also {seen_names[name]}); rename one")
                seen_names.setdefault(name, f"{entry.id}.{tool.id}")
            if decl.needs_key == "required" and entry.secret_id is None:
                report(key, (*loc, "secret_id"), f"{entry.id} needs a key: set secret_id (e.g. env:NAME)")
        ids = [e.id for e in agent.capabilities]
        for i, entry_id in enumerate(ids):
            if entry_id in ids[:i]:
                report(key, ("capabilities", i, "id"), f"{entry_id} is listed twice; keep one entry")
    denying = {b_id: b for b_id, b in config.bindings.items() if b.deny_tools}
    # A tool of any installed capability may be denied: they are all loaded, only when one binding denies.
    tool_ids = {t.id for decl in load_all().values() for t in decl.tools} if denying else set()
    for binding_id, binding in denying.items():
        for i, tool_id in enumerate(binding.deny_tools):
            if tool_id not in tool_ids:
                report(f"binding:{binding_id}", ("deny_tools", i), f"no capability offers a tool {tool_id!r}; "
                       "name a tool by its stable id, as `agent-gateway capabilities` lists them")


def template_fields(value: str, name: str) -> set[str]:
    """The `{placeholders}` of a prompt template from config; a malformed one is a config error."""
    try:
        return {field for _, field, _, _ in string.Formatter().parse(value) if field is not None}
    except ValueError as e:
        raise ValueError(f"{name} is not a valid template ({e}); write a literal brace as {{{{ or }}}}") from None
