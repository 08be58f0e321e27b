"""clock: the current date and time in the instructions, so the agent stops guessing the date."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .registry import BuildContext, CapabilityDecl, register

if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability


class ClockConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timezone: str = Field(default="UTC", description="An IANA time zone name, e.g. Europe/Warsaw")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not an IANA time zone name (e.g. UTC, Europe/Warsaw, America/New_York)") from None
        return v


def now_line(zone: str, now: datetime | None = None) -> str:
    current = (now or datetime.now(ZoneInfo("UTC"))).astimezone(ZoneInfo(zone))
    return f"The current date and time is {current:%A, %d %B %Y, %H:%M} ({zone})."


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    assert isinstance(ctx.config, ClockConfig)
    from .bound import FromDeps

    zone = ctx.config.timezone
    # A function, so a run resumed hours later after an approval reads the time anew; of the run's own
    # clock (its deps), so one built capability serves every run of the agent (`shared`).
    return FromDeps(lambda turn: now_line(zone, turn.clock.now()))


register(CapabilityDecl(
    id="clock", name="Date and time", category="utility", tools=(), build=build, config_model=ClockConfig, shared=True,
    description="Puts the current date and time into the instructions.",
))
