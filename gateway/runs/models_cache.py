"""One model client per provider and model, for the daemon's life.

Building a pydantic-ai model the plain way (`infer_model`, or a provider per call) makes a new
provider each time, and with it a new HTTP client, a new SSL context and a new connection to the
model server, left open until garbage collection. The gateway builds each provider once per
config instead and shares it: its HTTP client keeps a pool of connections alive to the model
server, and every run of every agent on that provider uses it. Models are shared likewise, one
per model name and provider. The client is the gateway's (`llm.model_http_client`, passed to the
provider): as many idle connections as runs at once, kept 120 s rather than httpx's 5 s, so a burst
or a message after a pause reuses them; the gateway closes it where it retires the provider.

- A provider is kept for as long as its config is unchanged (compared by value, and its api_key
  by the secret it resolves to, so a rotated key file counts as a change). A reload that changes
  anything else (instructions, capabilities, bindings) keeps it.
- A provider whose config changed is retired on reload: it is closed once the runs that were in
  flight at the reload have ended (at most the shutdown grace later); runs after the reload get
  the new one.
- `close()` (the gateway's stop) closes every provider's HTTP client.
- `warm()` builds every agent's model at start and after a reload, not in the first run that
  needs it: the first build imports the provider's SDK (the OpenAI SDK: 0.3-0.9 s of CPU) and makes
  its HTTP client's SSL context, which on the event loop stalled every conversation's events. It builds
  them in a thread, into a cache of its own that the event loop then adopts: nothing here is shared
  with the thread while it builds, so no lock. Only the providers the config names are built, so only
  their SDKs are imported (a deployment on Anthropic never imports openai).

The demo model and models registered in code (`gateway.runs.llm.register_model`) hold no connection
and are built per run, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic_ai.models import Model
from pydantic_ai.providers import Provider, infer_provider, infer_provider_class

from bindings.loader import LoadedConfig
from bindings.models import ProviderConfig
from bindings.secrets import SecretError

from gateway.runs import llm
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.models")

RETIRE_POLL = 0.1  # seconds between looks at whether the runs that may use a retired provider ended
WARMING_WAIT = 30.0  # seconds a run waits at most for the warm-up's thread (`ModelCache.until_warm`)


def config_key(provider_name: str, cfg: ProviderConfig | None) -> tuple[Any, ...]:
    if cfg is None:  # one of pydantic-ai's own providers, configured by its environment variables
        return (provider_name,)
    return (provider_name, cfg.kind, cfg.base_url, cfg.api_key)


def _model_key(name: str, providers: dict[str, ProviderConfig]) -> tuple[Any, ...]:
    """A model's key in the cache: its concrete name and its provider's config."""
    provider_name, _, model_name = name.partition(":")
    return (name, *config_key(provider_name, providers.get(provider_name) if model_name else None))


def secret_digest(cfg: ProviderConfig | None) -> str:
    """What the api_key resolves to, as a digest (the key itself is never kept here)."""
    if cfg is None or cfg.api_key is None:
        return ""
    try:
        return hashlib.sha256(cfg.api_key.resolve().reveal().encode()).hexdigest()
    except SecretError:
        return "unresolvable"


@dataclass
class _Entry:
    provider: Provider[Any]
    cfg: ProviderConfig | None
    digest: str
    http: httpx2.AsyncClient | None  # the gateway's client the provider talks through; None: the provider's own

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.http is not None:
                await self.http.aclose()
            else:  # the provider's own client: closed when it is left with nobody else inside (pydantic-ai's rule)
                async with self.provider:
                    pass


class ModelCache:
    """Providers and models by config, shared by every run; owned by the gateway."""

    def __init__(self, in_flight: Callable[[], Collection[str]] = tuple, grace: float = 30.0,
                 concurrent_runs: int = 32) -> None:
        self._in_flight = in_flight  # the ids of the runs in flight now (the runner's)
        self.grace = grace
        self.concurrent_runs = concurrent_runs  # idle connections each provider's pool keeps (`llm.model_http_client`)
        self._providers: dict[tuple[Any, ...], _Entry] = {}
        self._models: dict[tuple[Any, ...], Model] = {}
        self._retired: list[_Entry] = []  # waiting for the runs that may still use them
        self._retiring: set[asyncio.Task[None]] = set()
        # Set while the start's warm-up (`gateway.runs.warm_up`) builds and imports in its thread what a
        # first run would: a run waits for it (`Runner`) rather than do the same on the loop meanwhile.
        self.warming: asyncio.Event | None = None

    def get(self, name: str, providers: dict[str, ProviderConfig]) -> Model:
        """The model `name` (an agent's `model:`) with `providers` (gateway.yaml's), built on first use.

        Raises `ModelConfigError` as `gateway.runs.llm.resolve_model` does; a failure is not remembered.
        """
        name = llm.concrete_name(name)
        model = llm.in_process(name)
        if model is not None:
            return model
        key = _model_key(name, providers)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = llm.resolve_model(name, providers, provider_for=self._provider)
        return model

    async def warm(self, config: LoadedConfig) -> list[str]:
        """Build every agent's model now, in a thread; returns the names built. One that cannot be built
        is left to its runs, which tell the person and the log why (a missing key may be fixed by the next
        reload). A run that needs a model meanwhile builds its own, which is kept (the thread's is closed)."""
        providers = config.gateway.providers
        names = [name for name in sorted({llm.concrete_name(agent.model) for agent in config.agents.values()})
                 if not llm.built_per_run(name)  # the demo and registered models: built per run (`get`)
                 and _model_key(name, providers) not in self._models]  # a reload keeps what did not change
        if not names:
            return []
        scratch = ModelCache(concurrent_runs=self.concurrent_runs)
        scratch._providers = dict(self._providers)  # a provider built already serves its new models too
        built = await asyncio.to_thread(scratch._build, names, providers)
        await self._adopt(scratch)
        return built

    async def until_warm(self) -> None:
        """Until the warm-up's thread part has ended (`warming`); at most WARMING_WAIT seconds, after which
        the run does the first-time work itself: a warm-up stuck in an extension's part holds no run for good."""
        warming = self.warming
        if warming is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WARMING_WAIT):
                    await warming.wait()

    def _build(self, names: list[str], providers: dict[str, ProviderConfig]) -> list[str]:
        """In the warm-up's thread, on a cache nobody else uses yet."""
        built = []
        for name in names:
            try:
                self.get(name, providers)
                built.append(name)
            except Exception as e:
                log.warning("model %s is not ready: %s", name, e)
        return built

    async def _adopt(self, scratch: ModelCache) -> None:
        """Take what `scratch` built, except what a run built here meanwhile (then `scratch`'s copy is closed)."""
        duplicates = []
        for key, entry in scratch._providers.items():
            mine = self._providers.get(key)
            if mine is None:
                self._providers[key] = entry
            elif mine.provider is not entry.provider:
                duplicates.append(entry.provider)
        for key, model in scratch._models.items():
            if key not in self._models and not any(model.provider is p for p in duplicates):
                self._models[key] = model
        for entry in scratch._providers.values():
            if any(entry.provider is p for p in duplicates):
                await entry.close()

    def _provider(self, provider_name: str, cfg: ProviderConfig | None) -> Provider[Any]:
        key = config_key(provider_name, cfg)
        entry = self._providers.get(key)
        if entry is None:
            # One client per provider, built with no connection yet (the warm-up builds it in its thread): its
            # pool binds to the loop of its first request, the daemon's. A client that never sent one holds
            # nothing open, so one whose provider failed to build is simply dropped.
            http = llm.model_http_client(self.concurrent_runs) if llm.takes_client(provider_name, cfg) else None
            if cfg is not None:
                provider = llm.provider_from_config(provider_name, cfg, http)
            elif http is not None:
                provider = infer_provider_class(provider_name)(http_client=http)  # type: ignore[call-arg]
            else:  # a provider whose class takes no client: pydantic-ai's own, as it builds it
                provider = infer_provider(provider_name)
            entry = self._providers[key] = _Entry(provider, cfg, secret_digest(cfg), http)
            log.debug("model provider %s: a new HTTP client for %s", provider_name, provider.base_url)
        return entry.provider

    def providers(self) -> list[Provider[Any]]:
        """The providers built so far (one HTTP client each)."""
        return [e.provider for e in self._providers.values()]

    async def apply(self, providers: dict[str, ProviderConfig]) -> list[str]:
        """After a reload: retire the providers whose config is gone or changed; returns their names.

        They close once the runs in flight now have ended (at most `grace` seconds later); those runs
        keep using them meanwhile, later runs get new ones.
        """
        stale = {
            key: entry for key, entry in self._providers.items()
            if entry.cfg is not None  # None: pydantic-ai's own, configured by the environment, not gateway.yaml
            and (providers.get(key[0]) != entry.cfg or secret_digest(entry.cfg) != entry.digest)
        }
        if not stale:
            return []
        log.info("model providers changed: %s; their clients close after the runs in flight",
                 ", ".join(sorted({key[0] for key in stale})))
        retired = list(stale.values())
        for key in stale:
            del self._providers[key]
        self._models = {k: m for k, m in self._models.items() if not any(m.provider is e.provider for e in retired)}
        self._retired.extend(retired)
        waiting = set(self._in_flight())
        task = asyncio.create_task(self._retire(retired, waiting), name="models:retire")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        if not waiting:
            await task
        return sorted({key[0] for key in stale})

    async def _retire(self, providers: list[_Entry], waiting: set[str]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        while waiting & set(self._in_flight()) and loop.time() < deadline:
            await asyncio.sleep(RETIRE_POLL)
        for entry in providers:
            await entry.close()
            self._retired.remove(entry)

    async def close(self) -> None:
        """Close every provider's HTTP client (the gateway's stop, after runs have drained)."""
        await cancel_and_wait(*self._retiring)
        closing = self._retired + list(self._providers.values())
        self._retired, self._providers, self._models = [], {}, {}
        for entry in closing:
            await entry.close()

