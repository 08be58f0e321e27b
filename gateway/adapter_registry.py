"""Adapters by platform name, found through the entry points of group `agent_gateway.adapters`
(pyproject.toml): starting the daemon imports an SDK only for the platforms a config actually
binds, and the core never imports `adapters/` itself (`gateway.extensions`)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bindings.models import BindingSpec, GatewayConfig

from gateway import extensions
from gateway.clock import Clock

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from gateway.outbound.adapter import Adapter

# Adapters registered in code ('module:Class' by platform), ahead of the entry points: tests put a
# fake platform in a real one's place with it.
_REGISTRY: dict[str, str] = {}


@dataclass(frozen=True)
class AdapterContext:
    """What an adapter is built with besides its own binding."""

    gateway: GatewayConfig
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("adapters"))
    clock: Clock = field(default_factory=Clock)  # the gateway's: read positions are saved by it
    # The gateway's spool (`gateway.spool`): what an adapter acked while the database refused it, kept
    # on disk across a restart (a directory per binding in it). None: held in memory only (`doctor`).
    spool: Path | None = None


def register(platform: str, path: str) -> None:
    """Register (or replace) the adapter class for `platform` as 'module:Class'."""
    _REGISTRY[platform] = path


def _known(platform: str) -> bool:
    return platform in _REGISTRY or extensions.entry_point(extensions.ADAPTERS, platform) is not None


def create_adapter(binding: BindingSpec, context: AdapterContext) -> Adapter:
    if binding.platform in _REGISTRY:
        module_name, _, class_name = _REGISTRY[binding.platform].partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
    else:
        try:
            cls = extensions.load(extensions.ADAPTERS, binding.platform, "adapter for platform")
        except extensions.NotInstalled as e:
            raise LookupError(f"binding {binding.id}: {e}") from None
    return cls(binding, context)  # type: ignore[no-any-return]


def check_adapters(config: LoadedConfig, report: Callable[[str, tuple[str | int, ...], str], None]) -> None:
    """A binding whose platform no installed adapter serves is a config error (in its own file), not a
    start-up crash."""
    for binding_id, binding in config.bindings.items():
        if binding.enabled and not _known(binding.platform):
            report(f"binding:{binding_id}", ("platform",), str(extensions.NotInstalled(
                extensions.ADAPTERS, binding.platform, "adapter for platform")))
