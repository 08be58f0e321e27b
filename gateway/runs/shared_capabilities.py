"""Capabilities built once for a config, which the runner puts in the shared Agent instead of each run.

A capability builder (`Runner.capability_builders`) returns one of these among a run's capabilities
for what it built once for the run's agent and binding and keeps for every run of them: capabilities
whose tools and instructions are fixed by the config and read the run (its person, scope,
conversation, clock) from `ctx.deps` on every call, never from their constructor. Given to each run
instead, pydantic-ai combined them with the Agent's on every run (its capability sort and every
hook's dispatch across the layers: ~1,100 of the shipped agent's ~14,700 calls to the model
request, bench/README.md, Round 12), and each builder built them again. The runner keys its shared Agent by this object, by identity:
the builder returns the same one until the config changes, and a reload's new one is a new key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability


@dataclass(frozen=True, eq=False)  # eq=False: hashed and compared by identity, so it can key the shared Agent
class SharedCapabilities:
    """What a builder made once for an agent and binding: in the shared Agent's constructor, after the gate."""

    capabilities: Sequence[AbstractCapability[Any]]
