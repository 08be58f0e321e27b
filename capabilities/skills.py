"""skills: Agent Skills, written know-how the agent loads only when it decides it is relevant.

Each bound skill is a deferred capability of its own (pydantic-ai's on-demand capabilities): its
name and description sit in the catalog the model reads every turn, and the model pulls the body
in with `load_capability`, the framework's own tool, which a spec cannot grant, gate or rename
(the framework adds it around the run's toolset, outside the approval gate). `read_skill_resource` reads a file
shipped beside a skill's SKILL.md; it is offered only when a bound skill ships one, and only for
a skill the model has loaded.

Built on pydantic-ai-skills' `SkillsCapability` (which delegates to pydantic-ai-harness's
`Skills`), with `run_skill_script` switched off: this gateway has no shell for a script to run
under, and a second execution path would be a second set of rules to get wrong. The bundles come
from the config's snapshot (`bindings/skills.py`, checked at load with file and line) and are
handed to the library as programmatic skills, so a run sees exactly what was checked and a reload
is when an edit takes effect; read_skill_resource keeps the library's name and is re-described
in place in this deployment's tool-text shape.

An agent entry names the skills it may use (`config.skills`); a name that is not a bundle in
`skills/` is refused at load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai_skills import SkillsCapability
from pydantic_ai_skills.types import Skill, SkillResource

from bindings.skills import SkillBundle

from .registry import BuildContext, CapabilityDecl, ToolDecl, register
from .tool_text import tool_text

READ_RESOURCE = tool_text(
    what="Read a file shipped with a skill you have loaded: a template, a checklist, reference notes or data.",
    when=(
        "Use it when a loaded skill's instructions name one of its files (they list them under \"Bundled files\"). "
        "Load the skill with load_capability first. This reads only a skill's own files; it is not a way to read "
        "workspace files or anything else.\n\n"
        "Args:\n"
        "- skill_name: the skill's name exactly as in the catalog, e.g. incident-summary. Required.\n"
        "- resource_name: the file's path relative to the skill, as listed under \"Bundled files\", e.g. "
        "template.md or references/severity.md; a bare file name works when only one file has it. Required.\n"
        "- args: leave out; skill files here are plain text."
    ),
    returns=(
        "The file's whole text (at most 256 KiB, so never a truncated slice). A skill that is not loaded, "
        "an unknown skill or a file name it does not ship is an error listing what is available, so you "
        "can call again correctly."
    ),
)


class SkillsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skills: list[str] = Field(
        default_factory=list,
        description="Names of the skills this agent may use: directories under skills/ holding a SKILL.md",
    )


def _skill(bundle: SkillBundle) -> Skill:
    return Skill(
        name=bundle.name,
        description=bundle.description,
        content=bundle.body,
        resources=[SkillResource(name=rel, content=text or "(this file is empty)") for rel, text in bundle.resources.items()],
        uri=str(bundle.path),
    )


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, SkillsConfig)
    bundles = [ctx.turn.skills[name] for name in dict.fromkeys(ctx.config.skills) if name in ctx.turn.skills]
    if not bundles:
        return None  # bound with nothing usable: not attached at all
    capability: SkillsCapability[Any] = SkillsCapability(
        skills=[_skill(b) for b in bundles], scripts=False, resources=True, require_loaded=True,
    )
    files = capability.get_toolset()
    if isinstance(files, FunctionToolset) and "read_skill_resource" in files.tools:
        files.tools["read_skill_resource"].description = READ_RESOURCE
    return capability


def validate_config(config: Any, report: Callable[..., None]) -> None:
    """Refuse an agent entry naming a skill that is not a bundle under skills/ (with file and line)."""
    known = ", ".join(sorted(config.skills)) or "none"
    for agent_id, agent in config.agents.items():
        for i, entry in enumerate(agent.capabilities):
            if entry.id != "skills":
                continue
            for j, name in enumerate(entry.config.get("skills", []) if isinstance(entry.config, dict) else []):
                if not isinstance(name, str) or name in config.skills:
                    continue
                expected = config.directory / "skills" / name / "SKILL.md"
                if expected.is_file():
                    message = f"skill {name!r} did not load: fix the problem reported for {expected}"
                else:
                    message = f"no skill {name!r}: expected {expected} (skills found: {known})"
                report(f"agent:{agent_id}", ("capabilities", i, "config", "skills", j), message)


register(CapabilityDecl(
    id="skills",
    name="Skills",
    category="knowledge",
    tools=(ToolDecl("read_skill_resource", summary="Read a file shipped with a loaded skill."),),
    build=build,
    config_model=SkillsConfig,
    scopes=("knowledge:read",),
    # The bundles are the config's (a reload builds anew); which skills a run loaded is its run context's.
    shared=True,
    description=(
        "Agent Skills from skills/<name>/SKILL.md: the model sees each named skill's name and description, "
        "loads its instructions on demand (load_capability) and reads its files with read_skill_resource."
    ),
))
