"""Which model a run talks to: a real provider when one is configured, else the offline demo.

The demo is a pydantic-ai FunctionModel. It says plainly what it is and how to configure a
real model, and it still exercises the machinery: name one of its tools in a message and it
calls that tool (so approvals, memory and channel tools can be tried with no key at all).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import httpx2
from genai_prices import data_snapshot, types as prices
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_KEEPALIVE_CONNECTIONS,
    Model,
    create_async_httpx2_client,
    infer_model,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel, StreamFunctionDef
from pydantic_ai.providers import Provider
from pydantic_ai.tools import ToolDefinition

from bindings.models import ProviderConfig
from bindings.secrets import SecretError

DEMO_INTRO = (
    "This is agent-gateway's offline demo model: no language model is configured, so I can only "
    "echo and try tools. To talk to a real model, set OPENAI_API_KEY or ANTHROPIC_API_KEY in the "
    "daemon's environment, or add a provider with a base_url (Ollama, vLLM, LM Studio) to "
    "gateway.yaml and name it in the agent's `model:`."
)

# What `model: auto` picks when a key is in the environment. AGENT_GATEWAY_MODEL overrides.
AUTO_CHOICES = (("ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"), ("OPENAI_API_KEY", "openai:gpt-4.1-mini"))


class ModelConfigError(Exception):
    """The agent names a model that cannot be built (unknown provider, missing key)."""


# Models registered in code by name (an embedding application's own, or a test's scripted
# FunctionModel); looked up before providers and pydantic-ai's own names.
REGISTERED: dict[str, Callable[[], Model]] = {}


def register_model(name: str, factory: Callable[[], Model]) -> None:
    REGISTERED[name] = factory


def concrete_name(name: str) -> str:
    """`auto` as the environment decides it (AGENT_GATEWAY_MODEL, else a key that is set, else the demo)."""
    if name != "auto":
        return name
    return os.environ.get("AGENT_GATEWAY_MODEL") or next(
        (choice for var, choice in AUTO_CHOICES if os.environ.get(var)), "demo"
    )


def in_process(name: str) -> Model | None:
    """The demo or a registered model: built per run (no connection to share; a test's may keep state)."""
    if not built_per_run(name):
        return None
    return demo_model() if name == "demo" else REGISTERED[name]()


def built_per_run(name: str) -> bool:
    return name == "demo" or name in REGISTERED


def resolve_model(
    name: str,
    providers: dict[str, ProviderConfig],
    provider_for: Callable[[str, ProviderConfig | None], Provider[Any]] | None = None,
) -> Model:
    """Build the model an agent's `model:` names. Raises ModelConfigError with a readable reason.

    `provider_for(provider name, its config or None)` supplies the provider (and so the HTTP client)
    the model talks through; `gateway.runs.models_cache.ModelCache` passes one that shares them. Without
    it every call builds a new provider, with a new HTTP client.
    """
    name = concrete_name(name)
    model = in_process(name)
    if model is not None:
        return model
    load_price_table()  # here, where pydantic-ai's `Model()` would load it: never a priced run's first lookup
    provider_name, _, model_name = name.partition(":")
    if provider_name in providers and model_name:
        cfg = providers[provider_name]
        try:
            provider = provider_for(provider_name, cfg) if provider_for else provider_from_config(provider_name, cfg)
        except SecretError as e:
            raise ModelConfigError(f"provider {provider_name!r}: api_key: {e}") from None
        return model_from_config(cfg, model_name, provider)
    try:
        if provider_for is None:
            return infer_model(name)
        return infer_model(name, provider_factory=lambda inferred: provider_for(inferred, None))
    except Exception as e:  # pydantic-ai raises UserError for unknown names and missing keys
        raise ModelConfigError(f"model {name!r} cannot be used: {e}") from None


# How long an idle connection to a model server is kept for the next run. httpx's 5 s default closed it
# between two messages of one conversation, so most messages paid a new TCP + TLS handshake to the provider.
# api.openai.com and api.anthropic.com sit behind Cloudflare, which keeps an idle HTTP/1.1 connection 400 s;
# an AWS NAT gateway forgets an idle flow after 350 s. Two minutes is under both with room, and covers a
# conversation's pacing. A server that closes first (uvicorn's 5 s, nginx's 75 s) is seen on checkout (the
# socket reads EOF: httpcore drops it); a close racing the request is a connection error the SDKs retry.
MODEL_KEEPALIVE_SECONDS = 120.0

# The provider names whose pydantic-ai class takes an `http_client` (an agent's `model: openai:...` with the
# key in the environment): they get the gateway's client too. Others keep pydantic-ai's own.
SHARED_CLIENT_PROVIDERS = ("openai", "openai-chat", "openai-responses", "anthropic")


def model_http_client(concurrent_runs: int = 0) -> httpx2.AsyncClient:
    """The HTTP client for one provider: pydantic-ai's factory (its timeouts and user agent), keeping idle as
    many connections as the gateway runs at once (a burst never closes one to open another), for two minutes.
    The audio and image clients use it too (default pool size): a voice note or a drawing after a pause
    reuses its connection rather than paying a new TCP + TLS handshake."""
    limits = httpx2.Limits(max_connections=max(DEFAULT_MAX_CONNECTIONS, concurrent_runs),
                           max_keepalive_connections=max(DEFAULT_MAX_KEEPALIVE_CONNECTIONS, concurrent_runs),
                           keepalive_expiry=MODEL_KEEPALIVE_SECONDS)
    return create_async_httpx2_client(limits=limits)


def provider_from_config(provider_name: str, cfg: ProviderConfig,
                         http_client: httpx2.AsyncClient | None = None) -> Provider[Any]:
    """The provider a `gateway.yaml` provider entry describes; raises SecretError for its api_key.

    Without `http_client` the provider creates and owns its own (pydantic-ai's defaults), which leaving it
    as an async context manager closes; a client passed in stays the caller's to close.
    """
    api_key = cfg.api_key.resolve().reveal() if cfg.api_key else None
    if cfg.kind == "anthropic":
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicProvider(api_key=api_key, base_url=cfg.base_url, http_client=http_client)
    from pydantic_ai.providers.openai import OpenAIProvider

    # Local servers accept any key but the client insists on one.
    return OpenAIProvider(base_url=cfg.base_url, api_key=api_key or "not-needed", http_client=http_client)


def takes_client(provider_name: str, cfg: ProviderConfig | None) -> bool:
    """Whether the provider is built on the gateway's client (`model_http_client`)."""
    return cfg is not None or provider_name in SHARED_CLIENT_PROVIDERS


def model_from_config(cfg: ProviderConfig, model_name: str, provider: Provider[Any]) -> Model:
    if cfg.kind == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel

        return AnthropicModel(model_name, provider=provider)
    if cfg.kind == "openai":
        from pydantic_ai.models.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(model_name, provider=provider)
    from pydantic_ai.models.openai import OpenAIChatModel

    return OpenAIChatModel(model_name, provider=provider)


# --- the offline demo ---------------------------------------------------------------------


def demo_model() -> FunctionModel:
    return offline_model(_demo_stream, "offline-demo")


# --- genai-prices' table, loaded when a model it could price is built ---------------------------
# Every pydantic-ai `Model()` loads genai-prices' bundled table (`genai_prices.data`: 4.7 MiB of RSS and
# ~40 ms of CPU, bench/README.md Round 15), the offline demo and the warm-up's rehearsal included, though
# the table knows neither: their lookups (a context window, a response's price) end in LookupError.
# So the gateway's own offline models are built with `_PriceTableOnFirstNeed` as the process's snapshot
# (genai-prices' public `set_custom_snapshot`): it answers their lookups as the table does, and the first
# lookup of any other model, or a model built by `resolve_model`, loads the table and puts genai-prices'
# own snapshot back. A deployment on the demo never loads it; anything priced (an agent's provider, an
# image or audio model's `cost()`) is priced from the same table as before.

OFFLINE_MODELS: set[str] = set()  # the model names of the gateway's own FunctionModels (`offline_model`)


def offline_model(stream: StreamFunctionDef, name: str) -> FunctionModel:
    """One of the gateway's offline models (the demo, the warm-up's rehearsal), built without loading
    genai-prices' table (see above)."""
    OFFLINE_MODELS.add(name.lower())
    # Only when the table is not loaded yet (nothing to save otherwise), and never over a snapshot someone
    # else set (genai-prices' UpdatePrices; a private name, read defensively: gone, nothing is set over).
    if "genai_prices.data" not in sys.modules and getattr(data_snapshot, "_custom_snapshot", None) is None:
        data_snapshot.set_custom_snapshot(_ON_FIRST_NEED)
    return FunctionModel(stream_function=stream, model_name=name)


def load_price_table() -> data_snapshot.DataSnapshot:
    """genai-prices' snapshot as pydantic-ai's `Model()` leaves it: the bundled table loaded, unless a
    snapshot of someone else's stands."""
    if data_snapshot.get_snapshot() is _ON_FIRST_NEED:
        data_snapshot.set_custom_snapshot(None)
    return data_snapshot.get_snapshot()


class _PriceTableOnFirstNeed(data_snapshot.DataSnapshot):
    """genai-prices' snapshot until a lookup needs its table: the offline models' are answered here."""

    def __init__(self) -> None:
        super().__init__(providers=[], from_auto_update=False)

    @staticmethod
    def _offline(model_ref: str, provider_id: str | None, provider_api_url: str | None) -> bool:
        # What pydantic-ai asks of a FunctionModel: its name, with its system ("function") or no provider.
        return provider_api_url is None and provider_id in (None, "function") and model_ref.lower() in OFFLINE_MODELS

    def find_provider_model(self, model_ref: str, provider: prices.Provider | None, provider_id: str | None,
                            provider_api_url: str | None) -> tuple[prices.Provider, prices.ModelInfo]:
        if provider is None and self._offline(model_ref, provider_id, provider_api_url):
            raise _unpriced(model_ref)
        return load_price_table().find_provider_model(model_ref, provider, provider_id, provider_api_url)

    def calc(self, usage: prices.AbstractUsage, model_ref: str, provider_id: str | None, provider_api_url: str | None,
             genai_request_timestamp: datetime | None,
             price_context: prices.PriceContext | None = None) -> prices.PriceCalculation:
        if self._offline(model_ref, provider_id, provider_api_url):
            raise _unpriced(model_ref)
        return load_price_table().calc(usage, model_ref, provider_id, provider_api_url, genai_request_timestamp,
                                       price_context)

    def find_provider(self, model_ref: str | None, provider_id: str | None,
                      provider_api_url: str | None) -> prices.Provider:
        return load_price_table().find_provider(model_ref, provider_id, provider_api_url)

    def extract_usage(self, response_data: Any, provider_id: str | None = None, provider_api_url: str | None = None,
                      api_flavor: str = "default") -> prices.ExtractedUsage:
        return load_price_table().extract_usage(response_data, provider_id, provider_api_url, api_flavor)


def _unpriced(model_ref: str) -> LookupError:
    return LookupError(f"Unable to find model with {model_ref=!r}: an offline model of agent-gateway's")


_ON_FIRST_NEED = _PriceTableOnFirstNeed()


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


async def _demo_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    results = [p for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))] if isinstance(last, ModelRequest) else []
    if results:
        lines = []
        for part in results:
            content = part.model_response() if isinstance(part, RetryPromptPart) else _text(part.content)
            lines.append(f"`{part.tool_name}` answered: {content}")
        for w in _words("\n\n".join(lines)):
            yield w
        return

    prompt = _latest_prompt(messages)
    tool = _named_tool(prompt, info.function_tools)
    if tool is not None:
        yield {0: DeltaToolCall(name=tool.name, json_args=json.dumps(_demo_args(tool, prompt)))}
        return
    tools = ", ".join(f"`{t.name}`" for t in info.function_tools)
    reply = f"{DEMO_INTRO}\n\nYou said: {prompt}"
    if tools:
        reply += f"\n\nName one of my tools in a message and I will call it: {tools}."
    for w in _words(reply):
        yield w


def _text(content: Any) -> str:
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    return text if len(text) <= 1500 else text[:1500] + " …(cut)"


def _latest_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def _named_tool(prompt: str, tools: list[ToolDefinition]) -> ToolDefinition | None:
    for tool in sorted(tools, key=lambda t: -len(t.name)):
        if re.search(rf"(?<![\w-]){re.escape(tool.name)}(?![\w-])", prompt):
            return tool
    return None


def _demo_args(tool: ToolDefinition, prompt: str) -> dict[str, Any]:
    """Arguments from `key=value` pairs in the prompt, else plausible values from the schema."""
    given = dict(re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", prompt))
    props: dict[str, Any] = tool.parameters_json_schema.get("properties", {})
    required = set(tool.parameters_json_schema.get("required", []))
    args: dict[str, Any] = {}
    for name, schema in props.items():
        if name in given:
            raw = given[name].strip('"')
            args[name] = int(raw) if schema.get("type") == "integer" and raw.lstrip("-").isdigit() else raw
        elif name in required:
            kind = schema.get("type")
            args[name] = 1 if kind in ("integer", "number") else False if kind == "boolean" else "demo"
    return args
