"""memory_files: notes an agent keeps across conversations, indexed by MEMORY.md, which it maintains.

Every tool works on the one store this run may touch, resolved per call from the run's deps
(gateway.runs.memory.scope_for_turn): the model never passes a scope. The index is injected into
the instructions only in one-to-one conversations, fenced as reference material; in a group
chat it is read with read_memory. An index over 6,000 characters is left out whole.

The tools are not side-effecting for approvals: the notes are the agent's own, kept for the
people who hear the answer, and those people can stop or delete any note about them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .registry import BuildContext, CapabilityDecl, ToolDecl, register

if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability


# The tools and their pydantic-ai toolset, imported when a run is built (a config check needs only this).
RUNTIME = f"{__package__}.memory_files_tools"


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    return importlib.import_module(RUNTIME).build(ctx)  # type: ignore[no-any-return]


register(CapabilityDecl(
    id="memory_files",
    name="Memory files",
    category="memory",
    tools=(
        ToolDecl("list_memory", summary="List the notes kept for this conversation's audience."),
        ToolDecl("read_memory", summary="Read one note in full."),
        ToolDecl("write_memory", summary="Create or replace a note."),
        ToolDecl("edit_memory", summary="Replace one exact passage of a note."),
        ToolDecl("delete_memory", summary="Delete a note."),
    ),
    build=build,
    runtime=RUNTIME,
    shared=True,  # the tools and the index read the store and scope from the run's deps on every call
    description=(
        "Notes the agent keeps across conversations, indexed by MEMORY.md. One to one they are the person's "
        "(and the index is shown to the agent); in a group chat they are the chat's; a public surface has none."
    ),
))
