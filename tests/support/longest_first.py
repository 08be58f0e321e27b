"""The lane's tests handed out longest first, so no long test starts when the others are nearly done.

xdist hands each worker one test at a time in collection order (files alphabetically), once the
groups (the browser tests, one Chromium at a time) have gone out first. A 20-second test that comes
late in that order then runs alone at the end while the other workers idle: the lane's time is the
last worker's. Handing out the longest first (the classic LPT rule for a makespan) leaves only short
tests for the end. The lengths come from an earlier run, kept in `tests/durations.json`
(`make durations` writes it again); a test it does not know keeps its place after those it does, so
a stale file costs speed, never a test. Nothing here decides what runs, only in what order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
# The xdist group's suffix ("...::test@browser", tests/conftest.py:_group_in_nodeid) is not part of a
# test's name; an "@" inside a parameter's id is ("test_strip_mention[@agentbot-]"): a test's name ends
# with its name or its parameters' "]", never in a group's suffix.
_GROUP_SUFFIX = re.compile(r"@[\w-]+$")


def _key(nodeid: str) -> str:
    return _GROUP_SUFFIX.sub("", nodeid)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true", default=False,
                     help=f"write each test's time (setup, call and teardown) to {DURATIONS.name}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        known: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    items.sort(key=lambda item: -known.get(_key(item.nodeid), 0.0))  # stable: ties keep collection order


class _Recorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = _key(report.nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a worker: the controller has every report and writes the file
        try:
            kept: dict[str, float] = json.loads(DURATIONS.read_text())
        except (OSError, ValueError):
            kept = {}
        kept.update({name: round(s, 2) for name, s in self.seconds.items()})
        DURATIONS.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations"):
        config.pluginmanager.register(_Recorder(), "record-durations")
