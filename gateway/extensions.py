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
    from .approvals import Approvals

    approvals = Approvals(gateway)
    gateway.approvals = approvals
    gateway.extensions.append(approvals)
    gateway.runner.park_handler = approvals.park
    gateway.runner.resume_results = approvals.results_for
    gateway.conversation_extras = approvals.extras

    from .pairing import for_gateway

    gateway.pairing = for_gateway(gateway)  # read by Gateway._paired / _pairing_reply

    from capabilities.registry import build_for_turn, load_builtin

    load_builtin()
    gateway.runner.capability_builders.append(build_for_turn)


def register_checks() -> None:
    """Add config checks owned by other packages (the capability registry) to the loader."""
    from bindings.loader import add_check
    from capabilities.registry import validate_config

    add_check(validate_config)


def add_commands(sub: argparse._SubParsersAction[Any], load: Callable[[argparse.Namespace], Any]) -> None:
    """Add sub-commands owned by other modules (approvals, memory, pairing)."""
    from .approvals import add_cli
    from .pairing import add_cli as add_pairing_cli

    add_cli(sub, load)
    add_pairing_cli(sub, load)
