"""Wire the optional machinery (approvals, the capability registry) into a gateway and the CLI.

Kept in one place so start-up reads in order and each piece stays importable and testable on
its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .daemon import Gateway


def install(gateway: Gateway) -> None:
    """Called once by `Gateway.start`, after the store exists and before adapters start."""


def register_checks() -> None:
    """Add config checks owned by other packages (the capability registry) to the loader."""


def add_commands(sub: argparse._SubParsersAction[Any], load: Callable[[argparse.Namespace], Any]) -> None:
    """Add sub-commands owned by other modules (approvals, memory, pairing)."""
