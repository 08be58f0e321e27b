"""The audio capability's clients: one OpenAI-compatible audio client per provider, for the daemon's life.

Transcription (`/v1/audio/transcriptions`) and speech (`/v1/audio/speech`) go through the providers
gateway.yaml already configures, as models do (`gateway/runs/models_cache.py`): the provider a
capability entry names, or by default the provider of the agent's own model, so `- id: audio` with
no config works wherever the agent runs on an OpenAI-compatible server. A local server (faster-whisper
or a TTS server behind an OpenAI-compatible API) is a provider with a `base_url`. The client is the
openai SDK's `AsyncOpenAI` that pydantic-ai's `OpenAIProvider` builds on the gateway's HTTP client (pooled,
idle connections kept two minutes as the models' are: `llm.model_http_client`), built once
per provider config and secret, shared by every run, closed when the gateway stops or once a reload no
longer configures that provider so and no request goes through it (`LoopClients`).

Kept apart from `capabilities/audio.py` so the daemon can hold the clients (and check configs that
name `audio`) without importing the capability, which is imported only once a config names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING

from bindings.models import ProviderConfig
from bindings.secrets import SecretError
from gateway.runs import llm
from gateway.runs.models_cache import config_key, secret_digest

from .loop_clients import LoopClients

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from bindings.loader import LoadedConfig

CAPABILITY = "audio"
# pydantic-ai's own names for OpenAI, configured by OPENAI_API_KEY (not a gateway.yaml provider).
OPENAI_NAMES = ("openai", "openai-chat", "openai-responses")


class AudioUnavailable(Exception):
    """No audio API to talk to: `str()` says why and what to set (for the log, the model and `check`)."""


def provider_name(configured: str | None, agent_model: str, providers: Mapping[str, ProviderConfig]) -> str:
    """The provider audio requests go to: the entry's `provider`, else the agent's model's; AudioUnavailable
    when that is not an OpenAI-compatible one."""
    name = configured
    if name is None:
        model = llm.concrete_name(agent_model)
        name, _, model_name = model.partition(":")
        if not model_name:
            raise AudioUnavailable(f"the agent's model {model!r} is not on a provider with an audio API: set the "
                                   "audio capability's `provider` to an OpenAI-compatible provider in gateway.yaml")
    if name in providers:
        if providers[name].kind == "anthropic":
            raise AudioUnavailable(f"provider {name!r} is an Anthropic one, which has no audio API: set the audio "
                                   "capability's `provider` to an OpenAI-compatible provider in gateway.yaml")
        return name
    if name in OPENAI_NAMES:
        return "openai"
    raise AudioUnavailable(f"no provider {name!r} with an audio API: name an OpenAI-compatible provider of "
                           f"gateway.yaml ({', '.join(sorted(providers)) or 'none configured'}) or openai")


class AudioClients:
    """The clients by provider; `stop()` (the gateway's) closes them."""

    def __init__(self, providers: Callable[[], Mapping[str, ProviderConfig]]) -> None:
        self._providers = providers  # gateway.yaml's now (a reload swaps them)
        self._clients: LoopClients[AsyncOpenAI] = LoopClients(lambda client: client.close())

    def providers(self) -> Mapping[str, ProviderConfig]:
        return self._providers()

    @contextlib.asynccontextmanager
    async def client(self, name: str) -> AsyncIterator[AsyncOpenAI]:
        """The client of provider `name` (from `provider_name`), built on first use, while a request goes
        through it (not closed meanwhile)."""
        cfg = self._providers().get(name) if name != "openai" or "openai" in self._providers() else None
        config = config_key(name, cfg)
        async with self._clients.lease((*config, secret_digest(cfg)), lambda: _build(name, cfg), config) as client:
            yield client

    def reloaded(self, config: LoadedConfig) -> None:
        """A reload's config: the clients of providers it no longer configures so are closed."""
        providers = config.gateway.providers
        named = [config_key(name, cfg) for name, cfg in providers.items()]
        self._clients.keep(named if "openai" in providers else [*named, config_key("openai", None)])

    async def stop(self) -> None:
        await self._clients.stop()


def _build(name: str, cfg: ProviderConfig | None) -> AsyncOpenAI:
    """The openai SDK client pydantic-ai's provider builds for `name`, on the gateway's HTTP client (its idle
    connections kept two minutes: `llm.model_http_client`). Its `close()` closes that HTTP client (the SDK's
    rule for any client it holds), which is how `AudioClients` closes a retired or stopped one."""
    # No connection yet: a client whose provider fails to build holds nothing open and is simply dropped.
    http = llm.model_http_client()
    try:
        if cfg is not None:
            provider = llm.provider_from_config(name, cfg, http)
        else:
            from pydantic_ai.providers.openai import OpenAIProvider

            provider = OpenAIProvider(http_client=http)  # OPENAI_API_KEY, OPENAI_BASE_URL
    except SecretError as e:
        raise AudioUnavailable(f"provider {name!r}: api_key: {e}") from None
    except Exception as e:  # pydantic-ai's UserError: no OPENAI_API_KEY in the environment
        raise AudioUnavailable(f"provider {name!r} cannot be used: {e}") from None
    client: AsyncOpenAI = provider.client  # type: ignore[attr-defined]
    return client


def validate_config(config: LoadedConfig, report: Callable[[str, tuple[str | int, ...], str], None]) -> None:
    """Load-time check: every agent that names `audio` has an OpenAI-compatible provider for it."""
    for agent_id, agent in config.agents.items():
        for i, entry in enumerate(agent.capabilities):
            if entry.id != CAPABILITY or not entry.enabled:
                continue
            configured = entry.config.get("provider") if isinstance(entry.config, dict) else None
            try:
                provider_name(configured if isinstance(configured, str) else None, agent.model,
                              config.gateway.providers)
            except AudioUnavailable as e:
                where = ("capabilities", i, "config", "provider") if configured else ("capabilities", i, "id")
                report(f"agent:{agent_id}", where, str(e))
