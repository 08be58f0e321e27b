"""What an install gets: the lock files agree with pyproject.toml, and the wheel carries what the
daemon reads at run time (static files, migrations) and what the systemd unit points at."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .conftest import ROOT


def _pins(lock: Path) -> dict[str, str]:
    return {canonicalize_name(m.group(1)): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+) \\$", lock.read_text(), re.M)}


def test_every_dependency_is_pinned_in_the_lock_within_its_bounds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for lock, extras in (("requirements.lock", []), ("requirements-test.lock", ["test"])):
        pins = _pins(ROOT / lock)
        wanted = [*project["dependencies"], *(d for e in extras for d in project["optional-dependencies"][e])]
        for line in wanted:
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{lock} lacks {requirement.name}: run `make lock`"
            assert requirement.specifier.contains(pins[name], prereleases=True), (
                f"{lock} pins {requirement.name}=={pins[name]}, outside {requirement.specifier}: run `make lock`")
        assert "--hash=sha256:" in (ROOT / lock).read_text()
    assert "pytest" not in _pins(ROOT / "requirements.lock")  # the runtime lock installs no test tools


def test_the_wheel_carries_the_static_files_the_migrations_and_the_units_documentation(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("agent_gateway-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "adapters/web/static/index.html" in names
    assert "gateway/store/migrations/versions/0001_core.py" in names
    unit = (ROOT / "config" / "systemd" / "agent-gateway.service").read_text()
    [doc] = re.findall(r"^Documentation=file:///opt/agent-gateway/\.venv/(\S+)$", unit, re.M)
    data = wheel.name.split("-py3")[0] + ".data/data/"
    assert data + doc in names, f"the unit's Documentation= names {doc}, which a wheel install does not have"


def _imported(path: Path) -> set[str]:
    """The top-level modules a file imports (absolute imports only: relative ones are ours)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_package_the_code_imports_is_declared() -> None:
    """An import that works only because another dependency happens to pull its package in breaks
    the day that dependency drops it (fastmcp, mcp_types, httpx2, idna, bs4, yarl were such)."""
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # An optional extra of the product's own (uvloop) is declared; the test extra is not the product's.
    extras = [line for group, lines in project.get("optional-dependencies", {}).items() if group != "test"
              for line in lines]
    declared = {canonicalize_name(Requirement(line).name) for line in [*project["dependencies"], *extras]}
    provided_by = {"pydantic_monty": "pydantic-monty"}  # the module ships in pydantic-monty's client package
    ours = {"gateway", "adapters", "capabilities", "bindings", "__future__"}
    distributions = packages_distributions()
    undeclared = {}
    for folder in ours - {"__future__"}:
        for path in (ROOT / folder).rglob("*.py"):
            for module in _imported(path):
                if module in sys.stdlib_module_names or module in ours:
                    continue
                names = [provided_by[module]] if module in provided_by else distributions.get(module, [module])
                if not any(canonicalize_name(n) in declared for n in names):
                    undeclared[module] = str(path.relative_to(ROOT))
    assert undeclared == {}, f"imported but not in pyproject.toml's dependencies: {undeclared}"
