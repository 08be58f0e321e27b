"""Adapters by platform name, as import paths: starting the daemon imports an SDK only for the
platforms a config actually binds, and the core never imports `adapters/` itself."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field

from bindings.models import BindingSpec, GatewayConfig

from gateway.outbound.adapter import Adapter

_REGISTRY: dict[str, str] = {
    "web": "adapters.web.adapter:WebAdapter",
    "slack": "adapters.slack.adapter:SlackAdapter",
    "telegram": "adapters.telegram.adapter:TelegramAdapter",
    "mattermost": "adapters.mattermost.adapter:MattermostAdapter",
}


@dataclass(frozen=True)
class AdapterContext:
    """What an adapter is built with besides its own binding."""

    gateway: GatewayConfig
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("adapters"))


def register(platform: str, path: str) -> None:
    """Register (or replace) the adapter class for `platform` as 'module:Class'."""
    _REGISTRY[platform] = path


def create_adapter(binding: BindingSpec, context: AdapterContext) -> Adapter:
    try:
        path = _REGISTRY[binding.platform]
    except KeyError:
        raise LookupError(f"no adapter registered for platform {binding.platform!r}") from None
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(binding, context)
