"""skills: a skill is listed, loaded on demand and its resource read; bad bundles and unknown names are refused at load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from bindings.skills import load_skills
from gateway import extensions
from gateway.messages import ChatKind

from ..conftest import write_config
from .scripted import database, say_calls  # noqa: F401 (database is a fixture)
from .support import Account, Place, agent, world

EXAMPLES = Path(__file__).parents[2] / "config" / "examples" / "skills"
ALICE = Account("slack", "T1", "U1", "alice")
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)
SKILL = "incident-summary"
BODY_LINE = "Never speculate about a root cause that nobody in the thread stated"


def skills_agent(*names: str, **extra: object) -> dict[str, dict[str, object]]:
    return {"assistant": agent({"id": "skills", "config": {"skills": list(names)}, **extra}, model="scripted")}


def with_example(directory: Path) -> Path:
    shutil.copytree(EXAMPLES, directory / "skills")
    return directory


def write_skill(directory: Path, name: str, text: str) -> Path:
    path = directory / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def test_a_skill_is_listed_loaded_on_demand_and_its_resource_read(tmp_path: Path,
                                                                        database: dict | None) -> None:
    async with world(with_example(tmp_path), agents=skills_agent(SKILL), gateway=database) as w:
        seen = await w.run(ALICE, CHANNEL, "hello")
        assert {"load_capability", "read_skill_resource"} <= set(seen.tools)
        [instructions] = seen.instructions
        assert f"- {SKILL}: How this team writes an incident summary" in instructions, "listed: name and description"
        assert BODY_LINE not in instructions, "the body costs nothing until the model loads it"

        seen = await w.run(ALICE, CHANNEL, say_calls(
            ("read_skill_resource", {"skill_name": SKILL, "resource_name": "template.md"}),
            ("load_capability", {"id": SKILL}),
            ("read_skill_resource", {"skill_name": SKILL, "resource_name": "references/severity.md"}),
            ("read_skill_resource", {"skill_name": SKILL, "resource_name": "template.md"}),
        ))
        assert "is not loaded" in seen.retries[0], "a skill's files stay behind its instructions"
        assert any(BODY_LINE in i for i in seen.instructions), "loading delivers the body"
        assert any("references/severity.md" in i and "template.md" in i for i in seen.instructions), \
            "the loaded body lists the files it ships"
        severity, template = seen.tool_results[1:]
        assert severity.startswith("# Severity levels") and "SEV1" in severity
        assert template.startswith("**Incident summary: <one-line title>**")


async def test_only_the_named_skills_are_offered(tmp_path: Path) -> None:
    write_skill(with_example(tmp_path), "release-notes", "---\ndescription: How to write release notes.\n---\nBe brief.\n")
    async with world(tmp_path, agents=skills_agent("release-notes")) as w:
        seen = await w.run(ALICE, CHANNEL, say_calls(("load_capability", {"id": SKILL})))
        [instructions, *_] = seen.instructions
        assert "release-notes: How to write release notes." in instructions and SKILL not in instructions
        assert "read_skill_resource" not in seen.tools, "offered only when a bound skill ships a file"
        assert "incident-summary" in seen.retries[0] and not any(BODY_LINE in i for i in seen.instructions)


async def test_reload_picks_up_an_edited_skill(tmp_path: Path) -> None:
    async with world(with_example(tmp_path), agents=skills_agent(SKILL)) as w:
        path = tmp_path / "skills" / SKILL / "SKILL.md"
        path.write_text(path.read_text().replace("How this team writes", "How our team writes"))
        seen = await w.run(ALICE, CHANNEL, "hello")
        assert "How this team writes" in seen.instructions[0], "a run uses what was checked at load"
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems
        seen = await w.run(ALICE, CHANNEL, "hello")
        assert "How our team writes" in seen.instructions[0]

        path.write_text("---\nname: incident-summary\n---\nno description\n")
        ok, problems = await w.gw.reload_from_disk()
        assert not ok and f"{path}:1:1: description: description is required: one or two sentences saying what " \
            "the skill is for and when to use it" in problems
        seen = await w.run(ALICE, CHANNEL, "hello")
        assert "How our team writes" in seen.instructions[0], "a refused reload keeps the last good skills"


def problems_of(cfg: Path) -> list[str]:
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    return [str(p) for p in e.value.problems if not p.warning]


def test_an_unknown_skill_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    cfg = write_config(with_example(tmp_path), agents=skills_agent(SKILL, "incident-sumary"))
    assert problems_of(cfg) == [
        f"{cfg / 'agents' / 'assistant.yaml'}:3:32: capabilities.0.config.skills.1: no skill 'incident-sumary': "
        f"expected {cfg / 'skills' / 'incident-sumary' / 'SKILL.md'} (skills found: incident-summary)"
    ]


@pytest.mark.parametrize(("text", "where", "message"), [
    ("# Incident summary\nno front-matter\n", "1:1", "a SKILL.md starts with YAML front-matter between two '---' "
     "lines, holding at least `description:`"),
    ("---\ndescription: x\n", "1:1", "the front-matter opened on line 1 is never closed: add a '---' line after it"),
    ("---\ndescription: [unclosed\n---\nbody\n", "2:1", "front-matter is not valid YAML"),
    ("---\nname: broken\ndescription: x\n---\n", "2:1", "name: name 'broken' must match its directory 'broken-skill'"),
    ("---\nname: Broken_Skill\ndescription: x\n---\n", "2:1", "name: 'Broken_Skill' is not a skill name"),
    ("---\nname: broken-skill\ndescription: '  '\n---\n", "3:1", "description: description is required"),
    ("---\ndescription: " + "x" * 1025 + "\n---\n", "2:1", "description: description is 1025 characters; at most 1024"),
])
def test_a_malformed_skill_is_refused_at_load_with_file_and_line(tmp_path: Path, text: str, where: str,
                                                                 message: str) -> None:
    path = write_skill(tmp_path, "broken-skill", text)
    cfg = write_config(tmp_path, agents=skills_agent("broken-skill"))
    agent_problem, skill_problem = problems_of(cfg)  # sorted by file
    assert skill_problem.startswith(f"{path}:{where}: {message}")
    assert agent_problem.endswith(f"skills.0: skill 'broken-skill' did not load: fix the problem reported for {path}")


def test_the_shipped_example_skill_loads_clean() -> None:
    found: list[str] = []
    skills = load_skills(EXAMPLES, lambda path, line, field, message, warning: found.append(message))
    assert not found
    assert set(skills) == {SKILL}
    assert set(skills[SKILL].resources) == {"template.md", "references/severity.md"}


async def test_a_renamed_resource_tool_still_reads_and_skills_still_load(tmp_path: Path) -> None:
    overrides = {"read_skill_resource": {"name": "read_playbook_file"}}
    async with world(with_example(tmp_path), agents=skills_agent(SKILL, tool_overrides=overrides)) as w:
        seen = await w.run(ALICE, CHANNEL, say_calls(
            ("load_capability", {"id": SKILL}),
            ("read_playbook_file", {"skill_name": SKILL, "resource_name": "template.md"}),
        ))
        assert "read_playbook_file" in seen.tools and "read_skill_resource" not in seen.tools
        assert not seen.retries and seen.tool_results[1].startswith("**Incident summary")
