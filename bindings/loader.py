"""Load the config directory, and report every problem as `path:line:column: field: message`.

YAML is read with ruamel's round-trip loader because it remembers where each key and value
came from; pydantic's error locations are walked back to those positions, so an admin is
pointed at the line to fix rather than at a traceback.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from .models import AgentSpec, BindingSpec, GatewayConfig, valid_id
from .secrets import SecretRef
from .skills import SkillBundle, load_skills

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    column: int
    field: str
    message: str
    warning: bool = False

    def __str__(self) -> str:
        kind = "warning: " if self.warning else ""
        where = f"{self.field}: " if self.field else ""
        return f"{self.path}:{self.line}:{self.column}: {kind}{where}{self.message}"


class ConfigError(Exception):
    """The config has problems; `problems` lists every one (errors and warnings)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        errors = [p for p in problems if not p.warning]
        super().__init__("\n".join(str(p) for p in errors))


@dataclass
class Source:
    """One parsed file and the positions of its keys."""

    path: Path
    data: Any

    def position(self, loc: Iterable[str | int]) -> tuple[int, int]:
        """1-based line and column of the deepest part of `loc` present in the file."""
        node, line, col = self.data, 1, 1
        for part in loc:
            if isinstance(node, CommentedMap) and part in node:
                ln, cl = node.lc.key(part)
                line, col = ln + 1, cl + 1
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                ln, cl = node.lc.item(part)
                line, col = ln + 1, cl + 1
                node = node[part]
            else:
                break
        return line, col

    def problem(self, loc: Iterable[str | int], message: str, *, warning: bool = False) -> Problem:
        loc = tuple(loc)
        line, col = self.position(loc)
        return Problem(str(self.path), line, col, ".".join(str(p) for p in loc), message, warning)


@dataclass
class LoadedConfig:
    directory: Path
    gateway: GatewayConfig
    agents: dict[str, AgentSpec]
    bindings: dict[str, BindingSpec]
    sources: dict[str, Source] = field(default_factory=dict)  # "agent:<id>" / "binding:<id>" / "gateway"
    warnings: list[Problem] = field(default_factory=list)
    skills: dict[str, SkillBundle] = field(default_factory=dict)  # skills/<name>/SKILL.md, by name


# Checks that other packages add (the capability registry): (config, report) -> None.
ExtraCheck = Callable[[LoadedConfig, Callable[[str, tuple[str | int, ...], str], None]], None]
_extra_checks: list[ExtraCheck] = []


def add_check(check: ExtraCheck) -> None:
    if check not in _extra_checks:
        _extra_checks.append(check)


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.allow_duplicate_keys = False
    return y


def _parse(path: Path, problems: list[Problem]) -> Source | None:
    try:
        data = _yaml().load(path.read_text())
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problems.append(Problem(str(path), line, col, "", f"not valid YAML: {e.problem or e}"))
        return None
    except OSError as e:
        problems.append(Problem(str(path), 1, 1, "", f"cannot read: {e.strerror}"))
        return None
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):
        problems.append(Problem(str(path), 1, 1, "", "expected a mapping of settings at the top of the file"))
        return None
    return Source(path, data)


def _validate(model: type[M], source: Source, problems: list[Problem], extra: dict[str, Any] | None = None) -> M | None:
    data = dict(source.data)
    data.update(extra or {})
    try:
        return model.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown setting (check the spelling; `agent-gateway schema` lists every setting)"
            problems.append(source.problem(loc, msg))
        return None


def _literal_secrets(model: BaseModel, loc: tuple[str | int, ...] = ()) -> Iterable[tuple[str | int, ...]]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        yield from _walk_secrets(value, (*loc, name))


def _walk_secrets(value: Any, loc: tuple[str | int, ...]) -> Iterable[tuple[str | int, ...]]:
    if isinstance(value, SecretRef):
        if value.is_literal:
            yield loc
    elif isinstance(value, BaseModel):
        yield from _literal_secrets(value, loc)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_secrets(v, (*loc, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk_secrets(v, (*loc, i))


def config_directory(given: str | Path | None) -> Path:
    """The config directory: the one given, else $AGENT_GATEWAY_CONFIG, else ./config."""
    return Path(given or os.environ.get("AGENT_GATEWAY_CONFIG") or "config")


def load_gateway_config(directory: Path | str) -> GatewayConfig:
    """gateway.yaml alone (the defaults where there is none), for commands that need no agents;
    raise ConfigError naming its problems."""
    path = Path(directory) / "gateway.yaml"
    if not path.exists():
        return GatewayConfig()
    problems: list[Problem] = []
    src = _parse(path, problems)
    gateway = _validate(GatewayConfig, src, problems) if src else None
    if problems or gateway is None:
        raise ConfigError(problems)
    return gateway


def load_config(directory: Path | str) -> LoadedConfig:
    """Read gateway.yaml, agents/*.yaml and bindings/*.yaml; raise ConfigError listing every problem."""
    directory = Path(directory)
    problems: list[Problem] = []
    if not directory.is_dir():
        raise ConfigError([Problem(str(directory), 1, 1, "", "config directory not found")])

    sources: dict[str, Source] = {}
    gateway = GatewayConfig()
    gw_path = directory / "gateway.yaml"
    if gw_path.exists():
        src = _parse(gw_path, problems)
        if src:
            sources["gateway"] = src
            gateway = _validate(GatewayConfig, src, problems) or gateway
            exposure = gateway.http.exposure_problem()
            if exposure is not None:
                problems.append(src.problem(("http", "listen"), exposure))
            for i, module in enumerate(gateway.plugins):
                try:
                    importlib.import_module(module)
                except Exception as e:  # an admin's module: report it like any other config mistake
                    problems.append(src.problem(("plugins", i), f"cannot import {module!r}: {type(e).__name__}: {e}"))

    agents: dict[str, AgentSpec] = {}
    bindings: dict[str, BindingSpec] = {}
    for kind, model, target in (("agents", AgentSpec, agents), ("bindings", BindingSpec, bindings)):
        for path in sorted((directory / kind).glob("*.y*ml")):
            src = _parse(path, problems)
            if src is None:
                continue
            file_id = path.stem
            declared = src.data.get("id", file_id)
            if declared != file_id:
                problems.append(src.problem(("id",), f"id {declared!r} must match the file name {file_id!r}"))
            if not valid_id(file_id):
                problems.append(src.problem((), f"{file_id!r} is not a usable id: letters, digits, '_', '-', '.'"))
            spec = _validate(model, src, problems, {"id": file_id})
            if spec is None:
                continue
            target[file_id] = spec
            sources[f"{kind[:-1]}:{file_id}"] = src

    def report_file(path: Path, line: int, field_name: str, message: str, warning: bool) -> None:
        problems.append(Problem(str(path), line, 1, field_name, message, warning))

    skills = load_skills(directory / "skills", report_file)
    config = LoadedConfig(directory, gateway, agents, bindings, sources, skills=skills)

    for binding_id, binding in bindings.items():
        src = sources[f"binding:{binding_id}"]
        if binding.agent not in agents and not any(
            p.path.endswith(f"agents/{binding.agent}.yaml") for p in problems
        ):
            known = ", ".join(sorted(agents)) or "none"
            problems.append(src.problem(("agent",), f"no agent {binding.agent!r} in agents/ (known: {known})"))

    for key, src in sources.items():
        spec = gateway if key == "gateway" else (agents if key.startswith("agent:") else bindings).get(key.split(":", 1)[1])
        if spec is None:
            continue
        for loc in _literal_secrets(spec):
            problems.append(
                src.problem(loc, "a literal secret in a config file; use env:NAME, file:/path or credential:NAME", warning=True)
            )

    def report(key: str, loc: tuple[str | int, ...], message: str, warning: bool = False) -> None:
        problems.append(sources[key].problem(loc, message, warning=warning))

    for check in _extra_checks:
        check(config, report)

    errors = [p for p in problems if not p.warning]
    config.warnings = sorted(p for p in problems if p.warning)
    if errors:
        raise ConfigError(sorted(problems))
    return config
