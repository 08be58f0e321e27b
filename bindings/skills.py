"""Agent Skills bundles: `skills/<name>/SKILL.md` under the config directory, read once per load.

A bundle is a directory holding `SKILL.md` (YAML front-matter with `description` and an optional
`name`, then a Markdown body) and optional resource files beside it (`references/…`, templates,
data). The rules are the Agent Skills ones pydantic-ai-harness's `Skills` applies (name: at most
64 lowercase letters, digits and single hyphens, equal to the directory's name; description
required, at most 1,024 characters); they are checked here, not by the harness's loader, because
an admin must be told the file and line, and the harness's errors name neither a line nor every
problem at once.

Everything is read at load into a snapshot (`SkillBundle`), so a run uses exactly what was
checked, and a reload (SIGHUP) is when edits take effect. Resource files are read as UTF-8 text,
at most `MAX_RESOURCE_BYTES` each; any other file is left out with a warning.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError

from . import config_files

MAX_DESCRIPTION = 1024
MAX_RESOURCE_BYTES = 256 * 1024
MAX_RESOURCES = 100
_SKIPPED = ("__pycache__", ".git", ".DS_Store")

# (path, line, field, message, warning) — the loader turns each into a Problem.
Report = Callable[[Path, int, str, str, bool], None]


@dataclass(frozen=True)
class SkillBundle:
    name: str
    description: str
    body: str
    path: Path  # the SKILL.md
    resources: dict[str, str] = field(default_factory=dict)  # path relative to the skill directory → text


def valid_name(name: str) -> bool:
    """The Agent Skills name rule, as pydantic-ai-harness applies it."""
    return (
        bool(name) and len(name) <= 64 and name == name.lower() and not name.startswith("-")
        and not name.endswith("-") and "--" not in name and all(c.isalnum() or c == "-" for c in name)
    )


def load_skills(library: Path, report: Report) -> dict[str, SkillBundle]:
    """Every well-formed bundle in `library` by name; each problem is reported with its file and line."""
    skills: dict[str, SkillBundle] = {}
    if not library.is_dir():
        return skills
    for child in sorted(library.iterdir()):
        skill_file = child / "SKILL.md"
        if not child.is_dir() or not skill_file.is_file():
            continue
        bundle = _load_one(skill_file, report, library)
        if bundle is not None:
            skills[bundle.name] = bundle
    return skills


def _load_one(path: Path, report: Report, library: Path) -> SkillBundle | None:
    try:
        lines = config_files.read_text(library, path).splitlines()
    except config_files.FileRefused as e:
        report(path, 1, "", f"not loaded: {e.reason}", False)
        return None
    except (OSError, UnicodeDecodeError) as e:
        report(path, 1, "", f"cannot read: {e}", False)
        return None
    if not lines or lines[0].strip() != "---":
        report(path, 1, "", "a SKILL.md starts with YAML front-matter between two '---' lines, "
                            "holding at least `description:`", False)
        return None
    closing = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---"), None)
    if closing is None:
        report(path, 1, "", "the front-matter opened on line 1 is never closed: add a '---' line after it", False)
        return None
    try:
        data = YAML(typ="rt").load("\n".join(lines[1:closing]))
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        report(path, (mark.line + 2) if mark else 2, "", f"front-matter is not valid YAML: {e.problem or e}", False)
        return None
    if not isinstance(data, CommentedMap):
        report(path, 2, "", "front-matter must be a mapping, e.g. `description: How to write an incident summary`",
               False)
        return None

    def line_of(key: str) -> int:
        return data.lc.key(key)[0] + 2 if key in data else 1

    ok = True
    directory = unicodedata.normalize("NFKC", path.parent.name)
    name = data.get("name", directory)
    if not isinstance(name, str) or not valid_name(unicodedata.normalize("NFKC", name)):
        report(path, line_of("name"), "name", f"{name!r} is not a skill name: at most 64 lowercase letters or digits "
                                             "and single hyphens, not starting or ending with one", False)
        ok = False
    elif unicodedata.normalize("NFKC", name) != directory:
        report(path, line_of("name"), "name", f"name {name!r} must match its directory {directory!r}", False)
        ok = False
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        report(path, line_of("description"), "description",
               "description is required: one or two sentences saying what the skill is for and when to use it",
               False)
        ok = False
    elif len(description.strip()) > MAX_DESCRIPTION:
        report(path, line_of("description"), "description",
               f"description is {len(description.strip())} characters; at most {MAX_DESCRIPTION}", False)
        ok = False
    if not ok:
        return None
    body = "\n".join(lines[closing + 1:]).strip()
    assert isinstance(name, str) and isinstance(description, str)
    return SkillBundle(unicodedata.normalize("NFKC", name), description.strip(), body, path,
                       _resources(path.parent, report))


def _resources(directory: Path, report: Report) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in config_files.files(directory):
        file = entry.path
        rel = file.relative_to(directory)
        if rel.as_posix() == "SKILL.md" or any(part in _SKIPPED or part.startswith(".") for part in rel.parts):
            continue
        if entry.refused is not None:
            report(file, 1, "", f"left out: {entry.refused}", True)
            continue
        if len(found) >= MAX_RESOURCES:
            report(file, 1, "", f"left out: a skill ships at most {MAX_RESOURCES} resource files", True)
            continue
        if file.stat().st_size > MAX_RESOURCE_BYTES:
            report(file, 1, "", f"left out: a resource file is at most {MAX_RESOURCE_BYTES // 1024} KiB", True)
            continue
        try:
            found[rel.as_posix()] = config_files.read_text(directory, file)  # refused above if it leaves the folder
        except config_files.FileRefused as e:
            report(file, 1, "", f"left out: {e.reason}", True)
        except UnicodeDecodeError:
            report(file, 1, "", "left out: read_skill_resource reads UTF-8 text files only", True)
    return found
