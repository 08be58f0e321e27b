"""Parts of the daemon's libraries that it never runs, kept from loading at all.

`import httpx` (pydantic-ai's HTTP client, imported by every deployment) also imports httpx's
command-line client when its optional dependencies happen to be installed, and here they are (other
packages depend on rich and click): rich, click and pygments, 80 modules, 4.2 MiB of the daemon's
idle RSS and ~0.05 s of its start-up CPU (bench/README.md, Round 14), for a command no process of
ours ever runs. httpx itself falls back to a stub `main` when that import fails
(`from ._main import main` in an `except ImportError`), so a `None` in `sys.modules` is all it takes.

`import telegram` (python-telegram-bot, for a Telegram binding) imports `cryptography` for Telegram
Passport (decrypting identity documents a user shares with a bot: `Bot(private_key=...)`), which the
gateway never offers: OpenSSL's bindings, 7 MiB of RSS. Both of its imports of it are in an
`except ImportError` that turns the feature off, so `cryptography` is hidden while `telegram`
itself is imported, and only then (`_Hide`); a process that loaded `cryptography` already keeps it.
The cost: an import of `cryptography` in another thread during those ~0.1 s would fail too (nothing
the daemon runs at the time imports it: adapters are made on the loop, before the warm-up's thread).

Done by `gateway/__init__.py`, i.e. before any module of ours imports a library; in a process that
imported the library already it changes nothing. The cost of the first: `import httpx._main` raises
ImportError in a process that imported the gateway (httpx's own CLI is `httpx`, a process of its own).
"""

from __future__ import annotations

import importlib.machinery
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc and typing's imports: ~2 MiB and 27 modules every command would load here
    from collections.abc import Sequence
    from importlib.abc import Loader
    from types import ModuleType
    from typing import Any

# Module -> why no process of ours needs it. Only modules whose importer catches ImportError.
UNUSED = {
    "httpx._main": "httpx's command-line client (rich, click, pygments); httpx falls back to a stub",
}
# Package -> the modules hidden while it is imported, for a feature of it the gateway never uses.
HIDDEN_WHILE_IMPORTING: dict[str, tuple[str, ...]] = {
    "telegram": ("cryptography",),  # Telegram Passport's decryption; CRYPTO_INSTALLED = False
}


def skip_unused() -> None:
    """Mark the `UNUSED` modules absent (an import of them raises ImportError), unless already loaded,
    and hide `HIDDEN_WHILE_IMPORTING`'s while their package is imported."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "not importable", by design
    if not any(isinstance(finder, _Hide) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Hide())


class _Hide:  # an importlib.abc.MetaPathFinder
    """Finds a `HIDDEN_WHILE_IMPORTING` package where Python would, and runs it with its modules hidden."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        hidden = HIDDEN_WHILE_IMPORTING.get(fullname)
        if hidden is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Hiding(spec.loader, hidden)  # type: ignore[assignment]
        return spec


class _Hiding:  # an importlib.abc.Loader
    """The package's own loader, with `hidden` absent from `sys.modules` while the package's code runs."""

    def __init__(self, loader: Loader, hidden: tuple[str, ...]) -> None:
        self._loader, self._hidden = loader, hidden

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        hid = [name for name in self._hidden if name not in sys.modules]
        for name in hid:
            sys.modules[name] = None  # type: ignore[assignment]  # its import raises ImportError meanwhile
        try:
            self._loader.exec_module(module)
        finally:
            for name in hid:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package...: the package's own
        return getattr(self._loader, name)
