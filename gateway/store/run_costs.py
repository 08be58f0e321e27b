"""What a run spent beside its model's tokens: images a tool drew (`generate_image`), kept on its row.

An image comes from a separate model, priced apart from the agent's tokens, so it is counted in its own
columns rather than folded into `input_tokens` / `output_tokens`: an operator reading `runs list` or the
metrics sees what the chat cost and what the pictures cost. A price pydantic-ai's pricing data does not
know adds an image and no dollars (the log says so).
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.store.models import Run


async def add_image(sessions: async_sessionmaker[AsyncSession], run_id: str, cost_usd: float | None) -> bool:
    """Count one image drawn for `run_id`, and its price where known; False when no such run is stored."""
    async with sessions() as s, s.begin():
        result = await s.execute(update(Run).where(Run.id == run_id).values(
            images=Run.images + 1, image_cost_usd=Run.image_cost_usd + (cost_usd or 0.0)))
    return bool(result.rowcount)  # type: ignore[attr-defined]
