"""What a run spent beside its model's tokens: media other models made for it, kept on its row.

Images drawn (`generate_image`), seconds transcribed and characters spoken (the audio capability) come
from separate models, priced apart from the agent's tokens, so they are counted in their own columns
rather than folded into `input_tokens` / `output_tokens`: an operator reading `runs list` or the
metrics sees what the chat cost and what the media cost. One function records every kind, so an image
and a transcript are counted the same way. Each kind has its own column for its amount (an atomic
increment, so two tools finishing at once both count) and one `media_cost_usd` holds their dollars;
a request whose price pydantic-ai's pricing data (genai-prices) does not know adds its amount and no
dollars, and counts in `media_unpriced`: the run's cost is then "partial".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.store.models import Run

MediaKind = Literal["image", "transcription", "speech"]
# The column each kind's amount adds to, and the unit it is counted in.
AMOUNT = {"image": Run.images, "transcription": Run.transcribed_seconds, "speech": Run.spoken_characters}
UNIT = {"image": "images", "transcription": "seconds", "speech": "characters"}


@dataclass(frozen=True)
class MediaSpend:
    """One request to a media model: its kind, the model, how much it made (`UNIT[kind]`), and its price
    in US dollars where known (None: unpriced)."""

    kind: MediaKind
    model: str
    amount: float
    cost_usd: float | None


async def add_media(sessions: async_sessionmaker[AsyncSession], run_id: str, spend: MediaSpend) -> bool:
    """Add one media request to `run_id`'s row; False when no such run is stored."""
    column = AMOUNT[spend.kind]
    values: dict[Any, Any] = {column: column + spend.amount,
                              Run.media_cost_usd: Run.media_cost_usd + (spend.cost_usd or 0.0)}
    if spend.cost_usd is None:
        values[Run.media_unpriced] = Run.media_unpriced + 1
    async with sessions() as s, s.begin():
        result = await s.execute(update(Run).where(Run.id == run_id).values(values))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def media_usage(run: Run) -> dict[str, Any]:
    """A run's media spend as the API and `runs list --json` show it (inside "usage")."""
    return {"images": run.images, "transcribed_seconds": round(run.transcribed_seconds, 2),
            "spoken_characters": run.spoken_characters, "media_cost_usd": round(run.media_cost_usd, 6),
            "media_cost_partial": run.media_unpriced > 0}


def media_text(usage: dict[str, Any]) -> str:
    """The spend in a few words ("1 image, 12 s transcribed, $0.042"), "" for a run that made no media."""
    parts = []
    if usage["images"]:
        parts.append(f"{usage['images']} image{'s' if usage['images'] != 1 else ''}")
    if usage["transcribed_seconds"]:
        parts.append(f"{usage['transcribed_seconds']:g} s transcribed")
    if usage["spoken_characters"]:
        parts.append(f"{usage['spoken_characters']} characters spoken")
    if not parts:
        return ""
    return ", ".join(parts) + f", ${usage['media_cost_usd']:.3f}" + (" (partial)" if usage["media_cost_partial"] else "")
