"""Cron expressions and time zones, checked once and computed in one place.

Five fields, minute granularity (`cronsim`, the evaluator healthchecks.io runs on, with the
standard library's zoneinfo). Times are computed in the task's own zone and handed back in UTC,
so `0 9 * * MON` in Europe/Warsaw is 09:00 local on both sides of a DST change (07:00 UTC in
summer, 08:00 UTC in winter). A local time that a spring-forward skips fires at the first
minute after the gap; one that an autumn fall-back repeats fires once (cronsim's rules).

Used by the binding loader (admin schedules), the schedules capability and the store, so a
task is judged the same way wherever it comes from.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

UTC = timezone.utc


def cron_problem(expr: str) -> str | None:
    """None for a valid five-field expression; otherwise a sentence saying what is wrong."""
    fields = expr.split()
    if len(fields) != 5:
        return (f"{expr!r} is not a cron expression: it needs five fields (minute hour day-of-month month "
                "day-of-week), e.g. '0 9 * * MON' for 09:00 every Monday")
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as e:
        return f"{expr!r} is not a valid cron expression ({e}); e.g. '0 9 * * MON' for 09:00 every Monday"
    return None


def zone_problem(name: str) -> str | None:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"{name!r} is not an IANA time zone name (e.g. UTC, Europe/Warsaw, America/New_York)"
    return None


def next_after(expr: str, zone: str, after: datetime) -> datetime:
    """The first occurrence strictly after `after`, in UTC."""
    local = after.astimezone(ZoneInfo(zone))
    return next(CronSim(expr, local)).astimezone(UTC)


def latest_until(expr: str, zone: str, until: datetime) -> datetime:
    """The last occurrence at or before `until`, in UTC (cronsim's reverse walk is strictly before
    its start, which it takes to the minute: a second past `until` includes `until` itself)."""
    # To the whole second first: 09:16:59.5 plus a second is 09:17:00.5, whose minute cronsim includes,
    # and an every-minute task's "latest" came out 09:17, half a second in the future.
    local = (until.replace(microsecond=0) + timedelta(seconds=1)).astimezone(ZoneInfo(zone))
    return next(CronSim(expr, local, reverse=True)).astimezone(UTC)


def local_text(moment: datetime, zone: str) -> str:
    """An instant as people read it where the task lives: ISO date and time with its offset."""
    return moment.astimezone(ZoneInfo(zone)).isoformat(timespec="minutes")
