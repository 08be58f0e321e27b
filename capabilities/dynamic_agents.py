"""subagents under allow_dynamic: a specialist the model writes for itself (create_agent) and hands work to
(delegate), on a model this deployment's config already names and nothing else.

What the model writes is instructions and the name of a model; it cannot attach capabilities, knowledge
or delegates of its own, and it never asks the parent a question (instructions a model wrote a moment ago
are not the author's to put to anyone). Its model must be one the config already runs: an agent file's
`model:` or an inline specialist's. A string the model invents would be a model the organization holds no
key or budget for, so it is refused with the list it may choose from.

A created specialist lasts the reply it was created in, an approval park included: its definition is
capability state under the run's id (the store, so a run resumed after a restart finds it), and the next
reply is a new run that starts with none. It is built through the same `build_agent` as every delegate,
so its requests go through the same model cache, usage limits and approval gate.

pydantic-ai-harness `SubAgents` offers a model menu of the same spirit (`models=`, keys the model picks
from), but builds its children from live `Agent` objects in memory; here a child is an `AgentSpec` built
per run like any agent, and the menu is the config's models, so the harness class is not used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai import RunContext, Tool

from bindings.models import AgentSpec
from gateway.runs.turn import Turn

from .background_delegation import _Detaching
from .failures import trouble
from .subagents import ID, NAME, SubagentsConfig

DYNAMIC = "subagents.dynamic"  # capability state: this run's created specialists, by name
MAX_DYNAMIC_SPECIALISTS = 5  # per run
MAX_INSTRUCTIONS_CHARS = 8000


def configured_models(agents: Mapping[str, AgentSpec]) -> list[str]:
    """Every model the config names: each agent's, and each inline specialist's."""
    models = {a.model for a in agents.values()}
    for spec in agents.values():
        for entry in spec.capabilities:
            if entry.id != ID:
                continue
            try:
                config = SubagentsConfig.model_validate(entry.config)
            except ValidationError:
                continue  # refused at load
            models.update(sp.model for sp in config.inline if sp.model)
    return sorted(models)


class Dynamic(_Detaching):
    """The detaching delegation plus the two tools of specialists the model writes."""

    def tools(self) -> list[Tool[Turn]]:
        return [Tool(self.create_agent, name="create_agent"), Tool(self.delegate, name="delegate")]

    def allowed(self) -> list[str]:
        return configured_models(self.delegator.agents())

    def instructions(self) -> str:
        base = super().instructions() if self.delegates else ""
        return (base + "\n\nYou may also write a specialist yourself: create_agent gives it instructions and one of "
                f"these models: {', '.join(self.allowed())}; delegate hands it work. It lasts this reply only.").strip()

    async def _created(self, turn: Turn) -> dict[str, dict[str, Any]]:
        items = await turn.state.items(DYNAMIC, turn.run_id)
        return {name: json.loads(raw) for name, raw in items.items()}

    async def create_agent(self, ctx: RunContext[Turn], name: str, instructions: str, model: str,
                           description: str = "") -> str:
        """Write a specialist of your own for a piece of work none of your delegates fits, then hand it work
        with delegate.

        It gets your instructions and a model, nothing else: no tools, no knowledge, no delegates, and it sees
        only the prompt delegate gives it. Prefer a configured delegate (task) when one fits. It lasts until
        the end of this reply: in a later reply, create it again.

        Args:
            name: What you call it in delegate(agent=...): letters, digits, '_' or '-', at most 64.
            instructions: Who it is and how it works (its system prompt), at most 8000 characters.
            model: One of the models listed in your instructions; no other model can be used.
            description: One sentence on what it is for (default: none).

        Returns:
            That it was created (creating a name again replaces it), or why not (a model this deployment does
            not run, with the list to choose from; the name of a configured delegate; or the most
            specialists one reply may create, 5).
        """
        import re

        name, model = name.strip(), model.strip()
        if not re.match(NAME, name):
            return trouble(ctx, "mistake", "Name it with 1 to 64 letters, digits, '_' or '-', starting with a letter "
                           "or digit.")
        if not instructions.strip() or len(instructions) > MAX_INSTRUCTIONS_CHARS:
            return trouble(ctx, "mistake", f"Give it instructions of 1 to {MAX_INSTRUCTIONS_CHARS} characters.")
        allowed = self.allowed()
        if model not in allowed:
            return (f"Not created: {model!r} is not a model this deployment runs. A specialist you write may use only "
                    f"a model the config already names: {', '.join(allowed)}.")
        if name in self.delegates:
            return f"Not created: {name!r} is one of your configured delegates; hand it work with task instead."
        turn = ctx.deps
        created = await self._created(turn)
        if name not in created and len(created) >= MAX_DYNAMIC_SPECIALISTS:
            return (f"Not created: this reply has already created {len(created)} specialists, the most one reply may. "
                    f"Reuse one of them ({', '.join(created)}) or do this part yourself.")
        record = {"model": model, "instructions": instructions.strip(), "description": description.strip()}
        await turn.state.put(DYNAMIC, turn.run_id, name, json.dumps(record))
        return (f"Created {name} on {model}. Hand it work with delegate(agent=\"{name}\", prompt=...); it lasts until "
                "the end of this reply.")

    async def delegate(self, ctx: RunContext[Turn], agent: str, prompt: str,
                       mode: Literal["sync", "async"] = "sync") -> str:
        """Hand a self-contained piece of work to a specialist you created with create_agent in this reply.

        It sees only `prompt`, so say everything it needs. For your configured delegates use task.

        Args:
            agent: The name you gave it in create_agent.
            prompt: The whole task: what to do, what to give back, and every fact it needs.
            mode: "sync" (default) waits for its answer; "async" runs it in the background and returns a run id
                at once. Counted only when this agent's mode is auto; otherwise its mode decides.

        Returns:
            As task does, its answer (clipped in the middle past max_result_chars), or a run id when it runs in the
            background; or why nothing was delegated (no specialist of that name in this reply, max_fanout).
        """
        record = (await self._created(ctx.deps)).get(agent.strip())
        if record is None:
            return (f"No specialist named {agent!r} was created in this reply. Create it with create_agent first (one "
                    "created in an earlier reply is gone).")
        turn = ctx.deps
        spec = AgentSpec(id=f"{turn.agent.id}.{agent.strip()}", name=agent.strip(), description=record["description"],
                         model=record["model"], instructions=record["instructions"], limits=turn.agent.limits)
        asked = mode if self.config.mode == "auto" else None
        return await self._dispatch(ctx, agent.strip(), prompt, asked, found=("dynamic", spec))
