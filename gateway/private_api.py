"""The private attributes of dependencies this code relies on, checked once at start-up.

Each is used where the public API has no way to do the job (the module that uses it says why),
and each dependency is capped in pyproject.toml below its next release, which could drop one;
requirements.lock pins the versions tested. A version that slips past the cap anyway (an upgrade
by hand, a distribution's package) then fails at start, in one line naming the package, its
version and what is missing, instead of with an AttributeError in the middle of a message.

Only what gateway/ itself uses is checked here (no platform SDK is imported in gateway/);
python-telegram-bot, whose `telegram._utils` and `RetryAfter._retry_after` the Telegram adapter
uses, is pinned to one version instead.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module, metadata


@dataclass(frozen=True)
class Private:
    distribution: str  # the package to install at another version
    module: str
    owner: str  # the class holding the attributes
    attributes: tuple[str, ...]
    used_in: str

    @property
    def user(self) -> str:
        """The module of ours that uses them (`used_in`'s file)."""
        return self.used_in.partition(":")[0].removesuffix(".py").replace("/", ".")

    def missing(self) -> list[str]:
        cls = getattr(import_module(self.module), self.owner)
        return [a for a in self.attributes if not _has(cls, a)]


def _has(cls: type, attribute: str) -> bool:
    """On the class (a method, a property, a dataclass field), or assigned to `self` in its __init__."""
    if hasattr(cls, attribute):
        return True
    if dataclasses.is_dataclass(cls) and attribute in {f.name for f in dataclasses.fields(cls)}:
        return True
    return any(attribute in getattr(getattr(base, "__init__", None), "__code__", _NO_CODE).co_names
               for base in cls.__mro__)


_NO_CODE = (lambda: None).__code__

USED: tuple[Private, ...] = (
    Private("aiosqlite", "aiosqlite", "Connection", ("_execute", "_conn", "_running", "_connection"),
            "gateway/store/sqlite.py: a whole transaction handed to the connection's thread as one call"),
    Private("aiohttp", "aiohttp.web", "Request", ("_match_info", "_cache"),
            "gateway/http/server.py: adapter routes swapped at reload"),
    Private("aiohttp", "aiohttp.streams", "StreamReader", ("_timer",),
            "gateway/http/slow_clients.py: a deadline on each read of a request's body"),
    Private("pydantic-ai-harness", "pydantic_ai_harness.system_reminders", "SystemReminders",
            ("_request_count", "_fire_counts", "_dynamic_snapshot"),
            "capabilities/system_reminders.py: the cadence counted per conversation"),
    Private("pydantic-ai-harness", "pydantic_ai_harness.system_reminders", "LLMReminder", ("_generate",),
            "capabilities/system_reminders.py: an LLM reminder on the run's own model"),
    Private("pydantic-ai-harness", "pydantic_ai_harness.tool_output_limits", "ToolOutputLimits", ("_store",),
            "capabilities/tool_output_limits.py: each run's copy of the shared capability spills to the run's store"),
    # A module's function: its module is the "owner" (the package holds its submodule as an attribute).
    Private("pydantic-ai-harness", "pydantic_ai_harness.tool_output_limits", "_capability", ("_read_slice",),
            "capabilities/tool_output_limits.py: read_tool_result over the calling run's spills"),
)


def problems(used: tuple[Private, ...] = USED, version: Callable[[str], str] = metadata.version, *,
             in_use: bool = False) -> list[str]:
    """One line per dependency that lacks what we use, with what to install. `in_use`: only what the modules
    of ours this process has imported use (the daemon's own, and the capabilities its config binds: loading a
    config imports them), so that a deployment binding none of them imports no capability's library to check
    it (pydantic-ai-harness' reminders, tool output limits and compaction: 26 modules, ~1 MiB, ~20 ms of
    every start; bench/README.md Round 15). The daemon asks so at start and at every reload."""
    lines = []
    for private in used:
        if in_use and private.user not in sys.modules:
            continue
        try:
            missing = private.missing()
        except (ImportError, AttributeError) as e:
            missing = [f"{private.module}.{private.owner} ({e})"]
        if missing:
            names = ", ".join(f"{private.owner}.{m}" for m in missing)
            lines.append(f"{private.distribution} {version(private.distribution)} lacks {names}, used by "
                         f"{private.used_in}: install the version in requirements.lock "
                         "(`pip install --require-hashes -r requirements.lock`) or one pyproject.toml allows")
    return lines
