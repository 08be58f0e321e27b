"""The direction of imports the design fixes: the core never imports an adapter, a capability or a
platform SDK, and capabilities see the narrow run context, never the runner or the daemon.

Read from the syntax tree, so every form counts: `import a.b`, `from a import b`, `from gateway import
runner`, an import inside a function or under TYPE_CHECKING, `importlib.import_module("a.b")`, and a
'module:Class' string naming a module to import later (what the core once kept for its adapters).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A string that names a module path to import ("adapters.slack.adapter", "capabilities.clock:X").
MODULE_STRING = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


def _package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every module `path` imports or names for a later import, in any form."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the file's own package
                parts = _package_of(path).split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield node.lineno, base
            for alias in node.names:  # `from gateway import runner` imports the module gateway.runner
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
            yield node.lineno, node.value.partition(":")[0]  # import_module("a.b"), "a.b:Class"


def _offending(folder: str, forbidden: re.Pattern[str]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {module}"
            for path in sorted((ROOT / folder).rglob("*.py"))
            for line, module in imported(path) if forbidden.match(module)]


def test_the_core_imports_nothing_from_adapters_or_capabilities() -> None:
    assert _offending("gateway", re.compile(r"^(adapters|capabilities)(\.|$)")) == []


def test_the_core_imports_no_platform_sdk() -> None:
    assert _offending("gateway", re.compile(r"^(slack_bolt|slack_sdk|telegram|mattermostdriver)(\.|$)")) == []


def test_capabilities_see_the_run_context_not_the_runner_or_daemon() -> None:
    assert _offending("capabilities", re.compile(r"^gateway\.(runs\.runner|daemon)(\.|$)")) == []
    text = "\n".join(p.read_text() for p in sorted((ROOT / "capabilities").rglob("*.py")))
    assert re.findall(r"\bturn\.gateway\b|getattr\(turn\.", text) == []


def test_the_checker_sees_every_form(tmp_path: Path) -> None:
    """The forms above, each caught (and a look-alike that is not an import, left alone)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import capabilities.clock\n"
        "from gateway import runner\n"
        "def later():\n"
        "    from adapters.slack import adapter\n"
        "    importlib.import_module('capabilities.sandbox')\n"
        "PATHS = {'web': 'adapters.web.adapter:WebAdapter'}\n"
        "TEXT = 'see capabilities. for more'\n"
    )
    found = {module for _, module in imported(sample)}
    assert {"capabilities.clock", "gateway.runner", "adapters.slack", "adapters.slack.adapter",
            "capabilities.sandbox", "adapters.web.adapter"} <= found
    assert not any(m.startswith("see ") for m in found)


def test_a_native_stream_extends_the_reply_stream_through_its_hooks() -> None:
    """`NativeReplyStream` touches none of `ReplyStream`'s state: only the hooks the base names."""
    from gateway.outbound.delivery import ReplyStream

    source = (ROOT / "gateway" / "outbound" / "native_stream.py").read_text()
    tree = ast.parse(source)
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self" and n.attr.startswith("_") and not n.attr.startswith("__")}
    own = {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
           for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
           for t in (t.elts if isinstance(t, ast.Tuple) else [t])
           if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    own |= {n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)}
    hooks = {"_shows_drafts", "_show_draft", "_adopt_first_message", "_hand_back_first_message", "_hold_drafts",
             "_platform_error"}
    assert hooks <= set(vars(ReplyStream))
    assert used - own - hooks == set()
