"""Pydantic models of the files an admin edits: gateway.yaml, agents/*.yaml, bindings/*.yaml.

Everything read from a file is parsed here once, with `extra='forbid'`, so a typo is an error
that names the field instead of a setting silently ignored.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .cron import cron_problem, zone_problem
from .secrets import SecretRef


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- gateway.yaml -------------------------------------------------------------------------


class DatabaseConfig(Strict):
    url: str = Field(
        default="sqlite+aiosqlite:///var/gateway.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///path or postgresql+asyncpg://...",
    )
    busy_timeout_seconds: float = Field(
        default=5.0, gt=0, le=300,
        description="How long a write waits for a lock held elsewhere (another process on SQLite, another"
        " replica on PostgreSQL) or for a connection; past it the API answers 503 with Retry-After and"
        " platform events are not acknowledged, so the platform redelivers them",
    )
    run_lease_seconds: float = Field(
        default=60.0, ge=3, le=3600,
        description="On PostgreSQL: how long a replica's claim on a run lasts unrenewed. A replica that"
        " died (killed, lost power) holds its runs this long before another replica, or its own restart,"
        " runs them again; a live one renews its claims three times as often",
    )

    migrate: Literal["auto", "check"] = Field(
        default="auto",
        description="auto: bring the schema up to date at start; check: refuse to start on a schema older than this"
        " version (run `agent-gateway db upgrade` first: for a rolling upgrade across replicas)",
    )

    @field_validator("url")
    @classmethod
    def _async_driver(cls, v: str) -> str:
        if not (v.startswith("sqlite+aiosqlite://") or v.startswith("postgresql+asyncpg://")):
            raise ValueError("use sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host/db")
        return v


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable from this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiTokenConfig(Strict):
    """One API client's token and who it acts as: its decisions are that person's, asked the same
    question as their click on the card's own platform (docs/security.md)."""

    token: SecretRef = Field(description="The bearer token, as a reference: env:NAME, file:/path, credential:NAME")
    person: str = Field(
        min_length=1, max_length=300,
        description="Who the token acts as: a person id (`agent-gateway people`), or a platform account "
        "`platform:account_id` or `platform:workspace:account_id`; on a card of another platform, that person's "
        "linked account there decides",
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=200, description="How a card names them (\"Approved by …\"); "
        "the account's or person's own name when unset")


class HttpConfig(Strict):
    listen: str = Field(default="127.0.0.1:8788", description="host:port of the HTTP server")
    public_url: str | None = Field(default=None, description="How platforms reach this server (webhooks, buttons)")
    api_token: SecretRef | None = Field(
        default=None, description="Bearer token for the HTTP API (the Authorization header only), acting as the"
        " web binding's local person; a token (this or `api_tokens`) is required to listen beyond loopback"
    )
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names requests may name besides the listen address, localhost and"
        " public_url's host (a reverse proxy's name, say); any other Host header is answered 421 (DNS rebinding)"
    )
    allowed_origins: list[str] = Field(
        default_factory=list, description="Origins (scheme://host[:port]) besides the gateway's own whose pages"
        " may send state-changing API requests; any other Origin is refused 403 (CSRF)"
    )
    header_timeout_seconds: float = Field(
        default=30.0, gt=0, le=300, description="A connection that has not sent a whole request head this long"
        " after it opened (or after its last answer) is closed: slow clients cannot hold the server's sockets"
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, le=300, description="A request body that sends nothing this long is answered 408"
        " and its connection closed"
    )
    api_tokens: list[ApiTokenConfig] = Field(
        default_factory=list, description="More API tokens, each acting as a named person (its decisions and "
        "\"Approved by …\" are theirs)")

    @field_validator("api_tokens")
    @classmethod
    def _distinct_tokens(cls, v: list[ApiTokenConfig]) -> list[ApiTokenConfig]:
        refs = [t.token for t in v]
        if len(set(map(str, refs))) != len(refs):
            raise ValueError("two api_tokens name the same secret: each token must be its own")
        return v

    @property
    def has_token(self) -> bool:
        return self.api_token is not None or bool(self.api_tokens)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("expected host:port, e.g. 127.0.0.1:8788")
        return v

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, v: list[str]) -> list[str]:
        for name in v:
            parts = urlsplit(f"//{name}")
            if not name or parts.hostname is None or parts.port is not None or parts.path or "@" in name:
                raise ValueError(f"{name!r} is not a host name such as chat.example.com (no scheme, port or path)")
        return [name.lower().strip("[]") for name in v]

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for origin in v:
            parts = urlsplit(origin)
            if (parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query
                    or parts.username is not None):
                raise ValueError(f"{origin!r} is not an origin such as https://chat.example.com (scheme, host,"
                                 " optional port, no path)")
            try:
                parts.port
            except ValueError:
                raise ValueError(f"{origin!r} has a malformed port") from None
        return v

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None) -> str | None:
        if v is not None and (urlsplit(v).scheme not in ("http", "https") or not urlsplit(v).hostname):
            raise ValueError(f"{v!r} is not an http(s) URL such as https://gateway.example.com")
        return v

    def exposure_problem(self, listen: str | None = None) -> str | None:
        """Why the HTTP server may not listen on `listen` (default: `self.listen`), or None.

        The one place of this rule: `check` and `run` both meet it when the config is loaded
        (bindings.loader), and a gateway started on another address (`Gateway(listen=…)`) here too.
        """
        listen = listen or self.listen
        if is_loopback(listen.rpartition(":")[0]) or self.has_token:
            return None
        return (f"{listen} listens beyond loopback but http.api_token is not set (nor http.api_tokens): set "
                "http.api_token (e.g. env:AGENT_GATEWAY_API_TOKEN) or listen on 127.0.0.1")

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


class ProviderConfig(Strict):
    kind: Literal["openai-chat", "openai", "anthropic"] = Field(
        default="openai-chat", description="openai-chat for OpenAI-compatible servers (Ollama, vLLM, LM Studio)"
    )
    base_url: str | None = None
    api_key: SecretRef | None = None


class LimitsConfig(Strict):
    concurrent_runs: int = Field(default=32, ge=1, le=10_000, description="Runs in flight across all conversations")
    queued_messages_per_conversation: int = Field(
        default=20, ge=1, le=10_000, description="Messages waiting behind a run before the sender hears 'busy'"
    )
    shutdown_grace_seconds: float = Field(
        default=30, ge=0, le=3600, description="On SIGTERM, how long runs in flight may take to finish"
    )
    platform_budget_scale: float = Field(
        default=1.0, ge=0, le=100, description="Multiplies the periods of the platforms' published rate budgets "
        "the adapters pace by; 0 turns pacing off. For a fake platform server or a bench, never a real platform"
    )
    attachment_max_bytes: int = Field(
        default=20 * 1024 * 1024, ge=0, le=1024 * 1024 * 1024,
        description="Largest file shared with a message that is fetched for the model (0: none are)",
    )
    uploads_max_bytes: int = Field(
        default=128 * 1024 * 1024, ge=0, le=16 * 1024**3,
        description="Bytes of files uploaded through the HTTP API held in memory at once, being received or"
        " waiting for their run; an upload past it is answered 503 with Retry-After"
    )
    background_runs_per_conversation: int = Field(
        default=3, ge=0, le=100, description="Background delegations (subagents mode async) in flight in one "
        "conversation; past it the delegation tool answers that the limit is reached"
    )
    slow_tool_seconds: float = Field(
        default=30, gt=0, le=3600, description="A tool call taking at least this long is logged (tool id, duration, "
        "whether it failed; never its arguments or output) and counted in /metrics"
    )
    background_runs_per_gateway: int = Field(
        default=50, ge=0, le=10_000, description="Background delegations in flight across every conversation "
        "and replica sharing the database"
    )


class LoggingConfig(Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["logfmt", "json"] = "logfmt"


class KnowledgeCollection(Strict):
    """A folder of documents an agent can search (knowledge capability), indexed by the gateway."""

    path: str = Field(description="A folder, relative to the config directory or absolute")
    glob: str = Field(default="**/*", description="Which files under it (Markdown, text, HTML and PDF are read)")
    refresh_minutes: int = Field(default=60, ge=0, le=10_080,
                                 description="Re-index this often (only what changed); 0: at start and reload only")


class KnowledgeConfig(Strict):
    collections: dict[str, KnowledgeCollection] = Field(
        default_factory=dict, description="Document collections by name; an agent's knowledge entry binds them by name")

    @field_validator("collections")
    @classmethod
    def _names(cls, v: dict[str, KnowledgeCollection]) -> dict[str, KnowledgeCollection]:
        for name in v:
            if not valid_id(name):
                raise ValueError(f"{name!r} is not a usable collection name: letters, digits, '_', '-', '.'")
        return v


class RetentionConfig(Strict):
    ledger_days: float = Field(
        default=14.0, ge=7,
        description="Days the inbound ledger keeps an event id, to drop a redelivery; at least 7, past every"
        " platform's redelivery window")
    deliveries_days: float = Field(default=30.0, ge=1, description="Days a finished reply's delivery rows are kept")
    runs_days: float = Field(default=90.0, ge=1, description="Days an ended run is kept (`agent-gateway runs list`)")
    batch: int = Field(default=500, ge=10, le=10_000, description="Rows deleted per short transaction")
    every_minutes: float = Field(default=60.0, ge=1, description="How often the daemon prunes")


# The scopes a capability may need (seed "Scopes"): the organization's levers, one edit each.
# The seed's eight, and `agents:handoff` for our handoffs (an agent passing a conversation on).
KNOWN_SCOPES: tuple[str, ...] = (
    "knowledge:read", "conversations:read", "web:read", "web:fetch", "web:browse",
    "code:execute", "sandbox:execute", "agents:delegate", "agents:handoff",
)


class ScopesConfig(Strict):
    granted: list[str] = Field(
        default_factory=lambda: list(KNOWN_SCOPES),
        description="Scopes this deployment grants (default: all). An agent whose capabilities need a scope not "
        "listed is refused at load, naming the scope: e.g. drop conversations:read to stop every agent searching "
        "past conversations, agents:delegate to turn delegation off everywhere.",
    )

    @field_validator("granted")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [s for s in v if s not in KNOWN_SCOPES]
        if unknown:
            raise ValueError(f"unknown scope {unknown[0]!r}; known: {', '.join(KNOWN_SCOPES)}")
        return v


class McpConfig(Strict):
    """How the gateway keeps its MCP servers connected (docs/mcp.md, "At run time")."""

    keepalive_seconds: float = Field(
        default=30, gt=0, le=3600,
        description="A server nothing was heard from for this long is asked whether it is still there "
        "(ping, or tools/list on a protocol revision without ping); one that does not answer is restarted",
    )
    connect_timeout_seconds: float = Field(
        default=15, gt=0, le=300, description="How long starting a server and its handshake may take"
    )


class RuntimeConfig(Strict):
    """How the daemon's process runs: what bench/platforms.py measured decides the defaults (bench/README.md)."""

    event_loop: Literal["asyncio", "uvloop"] = Field(
        default="asyncio", description="The event loop: uvloop (the optional extra, pip install "
        "'agent-gateway[uvloop]') took 1-3 ms off each message's latency but drops connections silently "
        "when descriptors run out (bench/README.md, 'Event loop and interpreter'); the daemon refuses to "
        "start without it rather than fall back silently"
    )
    eager_tasks: bool = Field(
        default=False, description="asyncio.eager_task_factory (Python 3.12+): a new task runs its first "
        "step at once, not a loop pass later; refused at start on Python 3.11"
    )


class GatewayConfig(Strict):
    database: DatabaseConfig = DatabaseConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    retention: RetentionConfig = RetentionConfig()
    http: HttpConfig = HttpConfig()
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    limits: LimitsConfig = LimitsConfig()
    logging: LoggingConfig = LoggingConfig()
    plugins: list[str] = Field(
        default_factory=list,
        description="Python modules imported at start-up; they register capabilities or models of your own",
    )
    knowledge: KnowledgeConfig = KnowledgeConfig()
    scopes: ScopesConfig = ScopesConfig()
    mcp: McpConfig = McpConfig()


# --- agents/<id>.yaml ---------------------------------------------------------------------

ApprovalSetting = Literal["default", "required", "never"]


class ToolOverride(Strict):
    name: str | None = Field(default=None, description="The name the model sees")
    description: str | None = Field(default=None, description="The description the model sees")


class CapabilityEntry(Strict):
    id: str
    config: dict[str, Any] = Field(default_factory=dict)
    approval: ApprovalSetting = "default"
    tool_approval: dict[str, ApprovalSetting] = Field(default_factory=dict)
    tool_overrides: dict[str, ToolOverride] = Field(default_factory=dict)
    secret_id: SecretRef | None = None
    enabled: bool = True


class RunLimits(Strict):
    model_requests: int = Field(default=25, ge=1, le=1000, description="Model requests per run")
    wall_clock_seconds: float = Field(default=300, gt=0, le=86_400, description="Wall-clock seconds per run")


McpPermission = Literal["allow", "ask", "deny"]
MAX_MCP_SERVERS = 20
MCP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
_REF_PREFIXES = ("env:", "file:", "credential:")
_CREDENTIAL_NAME = re.compile(r"(authorization|token|secret|passw|api[_-]?key|credential|cookie)", re.I)


def _text_or_ref(name: str, value: str) -> str:
    """A plain value, or a secret reference (env:NAME, file:/path, credential:NAME) resolved on use.

    A reference, or any value under a name that says credential, is kept as a `SecretRef`: its repr
    hides a literal, and `check` warns about a literal one like any other literal secret.
    """
    if value.startswith(_REF_PREFIXES):
        return SecretRef._validate(value)
    return SecretRef(value) if _CREDENTIAL_NAME.search(name) else value


class McpServerSpec(Strict):
    """One MCP server whose tools an agent may call. Every tool asks a person first unless `tools:` says allow."""

    name: str = Field(
        description="The prefix the model sees: tool `search` of server `wiki` is offered as `wiki_search`. "
        "Letters, digits, '_' and '-', at most 40 characters"
    )
    url: str | None = Field(default=None, description="Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp")
    command: str | None = Field(default=None, description="stdio: the program to start, e.g. npx or /usr/bin/python3")
    args: list[str] = Field(default_factory=list, description="stdio: the program's arguments")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: environment of the program (it inherits only PATH, HOME, USER, LOGNAME, SHELL, TERM); "
        "values may be secret references",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP: headers sent with every request; values may be secret references, "
        "e.g. Authorization: env:WIKI_MCP_AUTHORIZATION",
    )
    enabled: bool = True
    tools: dict[str, McpPermission] = Field(
        default_factory=dict, description="Permission per tool, by the server's own tool name: allow | ask | deny"
    )
    default: Literal["ask", "deny"] = Field(
        default="ask",
        description="Permission of a tool not named in `tools:`: ask, or deny to offer only the tools listed. "
        "There is no server-wide allow: trust is given per tool",
    )
    timeout_seconds: float = Field(default=60, gt=0, le=3600, description="How long one tool call may take")
    sampling: Literal["refuse", "allow", "ask"] = Field(
        default="refuse",
        description="A server's request for a model completion (MCP sampling, handshake-era protocol revisions "
        "only): refuse (the default), allow to answer it with this agent's own model, or ask to show each "
        "request to a decider in the thread first",
    )
    elicitation: Literal["refuse", "ask"] = Field(
        default="refuse",
        description="A server's request for input from the person (MCP elicitation): refuse (the default: not "
        "offered), or ask to put it to the person in the thread, answered by the binding's deciders",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not MCP_NAME.match(v):
            raise ValueError(
                f"{v!r} cannot prefix tool names every model provider accepts: use letters, digits, '_' or '-' "
                "(at most 40 characters, starting with a letter or digit)"
            )
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{v!r} is not an http(s) URL such as https://mcp.example.com/mcp")
        try:
            parts.port
        except ValueError:
            raise ValueError(f"{v!r} has a malformed port") from None
        return v

    @field_validator("env", "headers")
    @classmethod
    def _refs(cls, v: dict[str, str]) -> dict[str, str]:
        return {k: _text_or_ref(k, value) for k, value in v.items()}

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("set either url (streamable HTTP) or command (stdio), not both or neither")
        if self.url is not None and (self.args or self.env):
            raise ValueError("args and env are for a stdio server (command); an HTTP server takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for an HTTP server (url); a stdio server takes env")
        return self

    def permission(self, tool: str) -> McpPermission:
        return self.tools.get(tool, self.default)

    def describe(self) -> str:
        """Safe to log: where the server is, without credentials or query strings."""
        if self.url is not None:
            parts = urlsplit(self.url)
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{host}{port}{parts.path}"
        return f"stdio: {self.command}"  # arguments may carry tokens; they are not logged


class AgentSpec(Strict):
    """One agent: a model, instructions and capabilities. Bindings decide where it is reachable."""

    id: str = Field(default="", description="Taken from the file name when omitted")
    name: str
    description: str = ""
    model: str = Field(
        default="auto",
        description="auto | demo | <provider>:<model> (openai-chat:, openai:, anthropic:, or a named provider)",
    )
    model_settings: dict[str, Any] = Field(default_factory=dict)
    instructions: str = ""
    capabilities: list[CapabilityEntry] = Field(default_factory=list)
    limits: RunLimits = RunLimits()
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list, description=f"MCP servers whose tools the agent may call (at most {MAX_MCP_SERVERS})"
    )
    subagents: list[str] = Field(
        default_factory=list, description="Other agents of this config (agents/<id>.yaml) this one may delegate to "
        "with the subagents capability",
    )
    handoffs: bool | Literal["team"] | list[str] = Field(
        default=True, description="Who this agent may send work to with the handoffs capability's send_to_agent: "
        "true (any other agent of this config), team (the agents named under subagents:, its roster), a list of "
        "agent ids, or false (nobody)",
    )
    # Declared only so that its presence is refused with a pointer to the right file.
    channel_tools: Any = Field(default=None, exclude=True, json_schema_extra={"not": {}})

    @field_validator("mcp_servers")
    @classmethod
    def _few_servers(cls, v: list[McpServerSpec]) -> list[McpServerSpec]:
        if len(v) > MAX_MCP_SERVERS:
            raise ValueError(f"at most {MAX_MCP_SERVERS} MCP servers per agent (found {len(v)})")
        return v

    @field_validator("channel_tools")
    @classmethod
    def _no_channel_tools(cls, v: Any) -> None:
        if v is not None:
            raise ValueError("channel_tools belongs to a binding, not an agent: move it to bindings/<binding>.yaml")
        return None


# --- bindings/<id>.yaml -------------------------------------------------------------------


class ChannelToolsConfig(Strict):
    tools: list[Literal["get_channel_info", "list_channel_members", "search_channels", "read_channel_history"]] = (
        Field(default_factory=list)
    )
    default_limit: int = Field(default=20, ge=1, le=200)


class AdmissionConfig(Strict):
    respond_to: Literal["mentions", "all"] = Field(
        default="mentions", description="In channels and groups: answer only when mentioned, or every message"
    )
    dm: Literal["open", "pairing", "allowlist", "off"] | None = Field(
        default=None, description="Who may DM the bot; the platform's default when unset"
    )
    channels: list[str] = Field(default_factory=list, description="Channel allowlist (empty: any channel)")
    users: list[str] = Field(default_factory=list, description="Account allowlist for dm: allowlist")
    ignore_bots: bool = True
    ignore_edits: bool = True


class MemoryConfig(Strict):
    allow_personal: bool = True


class ApprovalsConfig(Strict):
    deciders: Literal["requester", "channel"] | list[str] = "requester"
    timeout: float = Field(default=86_400, gt=0, description="Seconds a parked run waits for a decision")
    question_timeout: float = Field(default=600, gt=0, le=86_400, description="Seconds a question put to a person "
                                    "in the thread (an MCP server's, a delegate's) waits for an answer; then it is "
                                    "cancelled and the asker told")


class ChannelOverride(Strict):
    prompt: str | None = None
    respond_to: Literal["mentions", "all"] | None = None
    channel_tools: ChannelToolsConfig | None = None


class WebSection(Strict):
    person: str = Field(default="local", description="The one local person the web chat speaks for")


class SlackSection(Strict):
    bot_token: SecretRef = Field(description="The bot token (xoxb-…), as a reference: env:NAME, file:/path, credential:NAME")
    app_token: SecretRef | None = Field(default=None, description="App-level token (xapp-…, connections:write); Socket Mode")
    signing_secret: SecretRef | None = Field(default=None, description="The app's signing secret; HTTP mode")
    mode: Literal["socket", "http"] = Field(
        default="socket", description="socket: dial out over Socket Mode; http: Slack POSTs to /slack/events/<binding id>"
    )
    api_url: str = Field(
        default="https://slack.com/api/", description="Web API base (GovSlack: https://slack-gov.com/api/, proxies, tests)"
    )

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://")):
            raise ValueError("expected an http(s) URL such as https://slack.com/api/")
        return v if v.endswith("/") else v + "/"

    @model_validator(mode="after")
    def _mode_needs_secret(self) -> SlackSection:
        if self.mode == "socket" and self.app_token is None:
            raise ValueError("mode: socket needs app_token (an xapp- token), or set mode: http")
        if self.mode == "http" and self.signing_secret is None:
            raise ValueError("mode: http needs signing_secret")
        return self


class TelegramSection(Strict):
    token: SecretRef = Field(description="The bot token from @BotFather, as a reference: env:NAME, file:/path, credential:NAME")
    mode: Literal["polling", "webhook"] = Field(
        default="polling",
        description="polling: long-poll getUpdates (no public URL needed); webhook: Telegram POSTs to "
        "<http.public_url>/telegram/webhook/<binding id>",
    )
    webhook_secret: SecretRef | None = Field(
        default=None, description="Webhook mode: the secret Telegram sends in X-Telegram-Bot-Api-Secret-Token "
        "(1-256 of A-Z a-z 0-9 _ -)"
    )
    drafts: bool = Field(
        default=True, description="Stream private replies as message drafts (sendMessageDraft), then post the "
        "final once; false: private replies are posted and edited in place under the chat budget, as in groups")
    api_url: str = Field(
        default="https://api.telegram.org/bot",
        description="Bot API base; the token is appended (a local Bot API server: http://host:8081/bot)",
    )

    @field_validator("api_url")
    @classmethod
    def _bot_api_url(cls, v: str) -> str:
        if not v.startswith(("https://", "http://")):
            raise ValueError("expected an http(s) URL such as https://api.telegram.org/bot")
        if "{token}" in v or v.endswith("/bot"):
            return v
        return v.rstrip("/") + "/bot"  # "http://host:8081" means the server's /bot<token>/ paths

    @model_validator(mode="after")
    def _webhook_needs_secret(self) -> TelegramSection:
        if self.mode == "webhook" and self.webhook_secret is None:
            raise ValueError("mode: webhook needs webhook_secret")
        return self


class MattermostSection(Strict):
    url: str = Field(description="The server's base URL, e.g. https://chat.example.com (no /api/v4)")
    token: SecretRef = Field(description="The bot account's access token, e.g. env:MATTERMOST_BOT_TOKEN")
    teams: list[str] = Field(
        default_factory=list, description="Only answer in these teams' channels (names or ids); DMs are not in a team"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected the server's http:// or https:// base URL, e.g. https://chat.example.com")
        return v.rstrip("/").removesuffix("/api/v4")


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class AdminSchedule(Strict):
    """A task an admin schedules in a binding file: it runs on its cron and posts to its channel."""

    name: str = Field(default="", description="Names it for operators and reloads (changing the task keeps it); "
                      "defaults to its channel, cron and task")
    cron: str = Field(description="Five fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * MON'")
    timezone: str = Field(default="UTC", description="The IANA time zone the cron is read in, e.g. Europe/Warsaw")
    task: str = Field(min_length=1, description="What the agent is asked to do each time, e.g. 'post the open incidents'")
    channel: str = Field(default="", description="The channel (Slack, Mattermost) or chat (Telegram) id it posts to")
    workspace: str = Field(default="", description="The Slack team or Mattermost team id, where the platform needs it")
    catch_up: bool = Field(default=True, description="After the gateway was down, run the latest missed occurrence "
                           "once (late); false skips it")
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        problem = cron_problem(v)
        if problem:
            raise ValueError(problem)
        return " ".join(v.split())

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        problem = zone_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _target(self) -> AdminSchedule:
        if not self.channel.strip():
            raise ValueError("a schedule needs a target: set channel to the channel or chat id it posts to")
        return self

    @property
    def key(self) -> str:
        return (self.name or f"{self.channel} {self.cron} {self.task}")[:200]


class BindingSpec(Strict):
    """Where an agent is reachable, and what runs admitted there get."""

    id: str = Field(default="", description="Taken from the file name when omitted")
    platform: Literal["web", "slack", "mattermost", "telegram"]
    agent: str
    enabled: bool = True
    prompt: str = Field(default="", description="Appended to the agent's instructions for runs this binding admits")
    admission: AdmissionConfig = AdmissionConfig()
    channel_tools: ChannelToolsConfig | None = None
    memory: MemoryConfig = MemoryConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    deny_tools: list[str] = Field(
        default_factory=list,
        description="Capability tools (by stable id, e.g. write_file, web_fetch) never offered to runs this binding "
        "admits, whatever the agent file grants: the model does not see them and a call to one runs nothing",
    )
    self_linking: bool = Field(default=True, description="People may link their accounts on other platforms "
                               "themselves (`/link`); when false only an admin can (`agent-gateway people link`)")
    channels: dict[str, ChannelOverride] = Field(default_factory=dict, description="Per-channel overrides by id")
    schedules: list[AdminSchedule] = Field(default_factory=list, description="Tasks the agent runs on a cron and "
                                           "posts to a channel (applied on reload)")
    web: WebSection | None = None
    slack: SlackSection | None = None
    telegram: TelegramSection | None = None
    mattermost: MattermostSection | None = None

    @field_validator("schedules")
    @classmethod
    def _schedules_named_once(cls, v: list[AdminSchedule]) -> list[AdminSchedule]:
        keys = [s.key for s in v]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:  # a reload matches schedules by name: two of one name would be one task
            raise ValueError(f"two schedules are named {twice[0]!r}: give each its own name")
        return v

    @model_validator(mode="after")
    def _section_matches_platform(self) -> BindingSpec:
        sections = {"web": self.web, "slack": self.slack, "telegram": self.telegram, "mattermost": self.mattermost}
        for name, value in sections.items():
            if value is not None and name != self.platform:
                raise ValueError(f"a {self.platform} binding cannot have a {name}: section")
        if self.platform != "web" and sections[self.platform] is None:
            raise ValueError(f"platform: {self.platform} needs a {self.platform}: section")
        return self

    @property
    def dm_policy(self) -> str:
        if self.admission.dm is not None:
            return self.admission.dm
        return "pairing" if self.platform == "telegram" else "open"

    def override_for(self, channel: str) -> ChannelOverride | None:
        return self.channels.get(channel)


def valid_id(value: str) -> bool:
    return bool(_ID.match(value))

