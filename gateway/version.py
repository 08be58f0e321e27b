"""The installed version: what `--version`, `doctor` and `/metrics` report."""

from __future__ import annotations

import platform
from importlib import metadata


def version() -> str:
    """The distribution's version as installed (a wheel, or `pip install -e .`), else "unknown"
    (the source tree on sys.path without an install)."""
    try:
        return metadata.version("agent-gateway")
    except metadata.PackageNotFoundError:
        return "unknown"


def python() -> str:
    return platform.python_version()
