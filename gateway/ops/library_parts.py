"""Parts of the daemon's libraries that it never runs, kept from loading at all.

`import httpx` (pydantic-ai's HTTP client, imported by every deployment) also imports httpx's
command-line client when its optional dependencies happen to be installed, and here they are (other
packages depend on rich and click): rich, click and pygments, 80 modules, 4.2 MiB of the daemon's
idle RSS and ~0.05 s of its start-up CPU (bench/README.md, Round 14), for a command no process of
ours ever runs. httpx itself falls back to a stub `main` when that import fails
(`from ._main import main` in an `except ImportError`), so a `None` in `sys.modules` is all it takes.

Done by `gateway/__init__.py`, i.e. before any module of ours imports a library; in a process
that imported httpx already it changes nothing. The cost: `import httpx._main` raises ImportError
in a process that imported the gateway (httpx's own CLI is `httpx`, a process of its own).
"""

from __future__ import annotations

import sys

# Module -> why no process of ours needs it. Only modules whose importer catches ImportError.
UNUSED = {
    "httpx._main": "httpx's command-line client (rich, click, pygments); httpx falls back to a stub",
}


def skip_unused() -> None:
    """Mark the `UNUSED` modules absent (an import of them raises ImportError), unless already loaded."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "not importable", by design
