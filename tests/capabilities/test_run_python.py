"""code_execution: run_python computes, is stopped at both limits, and reaches no file, network or environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.run_python import OUTPUT_LIMIT
from gateway import extensions
from gateway.messages import ChatKind

from ..conftest import write_config
from .scripted import database, say_calls  # noqa: F401 (database is a fixture)
from .support import Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
CHANNEL = Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL)


def python_agent(**config: object) -> dict[str, dict[str, object]]:
    return {"assistant": agent({"id": "code_execution", "config": config}, model="scripted")}


async def run(w: World, code: str) -> tuple[list[str], list[str]]:
    seen = await w.run(ALICE, CHANNEL, say_calls(("run_python", {"code": code})))
    return seen.tool_results, seen.retries


async def test_a_normal_computation_returns_its_value_and_what_it_printed(tmp_path: Path,
                                                                          database: dict | None) -> None:
    code = (
        "import csv\n"
        "rows = list(csv.DictReader('item,amount\\ntea,3.50\\ncake,4.25\\n'.splitlines()))\n"
        "print(len(rows), 'rows')\n"
        "sum(float(r['amount']) for r in rows)"
    )
    async with world(tmp_path, agents=python_agent(), gateway=database) as w:
        results, retries = await run(w, code)
        assert not retries
        assert results == ["Printed:\n2 rows\n\n\nValue of the last expression:\n7.75"]


async def test_a_loop_that_never_ends_is_stopped_at_the_time_limit(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent(timeout_secs=0.5)) as w:
        results, retries = await run(w, "print('starting')\nwhile True:\n    pass")
        assert not results
        assert "stopped" in retries[0] and "timeout_secs = 0.5 seconds" in retries[0]
        assert "starting" in retries[0], "what was printed before the limit is shown"


async def test_a_program_that_sleeps_is_stopped_at_the_wall_clock_limit(tmp_path: Path) -> None:
    """Sleeping uses no running time, so timeout_secs never fires; the wall clock does, and the
    model is told which limit it was (docs/security.md, "Time limits")."""
    async with world(tmp_path, agents=python_agent(timeout_secs=60, wall_clock_secs=1)) as w:
        results, retries = await run(w, "import time\nprint('napping')\ntime.sleep(3600)\n'awake'")
        assert not results
        assert "wall-clock limit (wall_clock_secs = 1 seconds, which counts sleeping and waiting too)" in retries[0]


async def test_allocating_past_the_memory_limit_is_stopped(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent(max_memory_mb=16)) as w:
        results, retries = await run(w, "chunks = []\nfor i in range(100):\n    chunks.append('x' * 1_000_000)\nlen(chunks)")
        assert not results
        assert "memory limit (max_memory_mb = 16 MB)" in retries[0]


@pytest.mark.parametrize(("code", "refused"), [
    ("open('/etc/passwd').read()", True),
    ("import pathlib\npathlib.Path('/etc/passwd').read_text()", True),
    ("import socket", True),
    ("import urllib.request", True),
    ("import subprocess", True),
    ("import os\nos.getenv('HOME')", True),
    ("__import__('os').system('cat /etc/passwd')", False),  # NameError: there is no __import__
    ("import os\nos.system('cat /etc/passwd')", False),  # AttributeError: os has no system
])
async def test_files_the_network_and_the_host_are_out_of_reach(tmp_path: Path, code: str, refused: bool) -> None:
    async with world(tmp_path, agents=python_agent()) as w:
        results, retries = await run(w, code)
        said = "\n".join(results + retries)
        assert "root:" not in said and "/bin/" not in said, "nothing of the host's files came back"
        if refused:  # a refusal is text, so the model does not look for a way round it
            assert not retries and results[0].startswith("Refused:") and "no files, no network" in results[0]
        else:
            assert not results and ("NameError" in retries[0] or "AttributeError" in retries[0])


async def test_a_mistake_in_the_code_is_a_retry_prompt_with_the_traceback(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent()) as w:
        results, retries = await run(w, "total = 1\ntotl + 1")
        assert not results
        assert "NameError" in retries[0] and "totl" in retries[0] and "line 2" in retries[0]
        results, retries = await run(w, "def (")
        assert "does not parse" in retries[0]


async def test_output_is_clipped_with_a_marker(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent()) as w:
        results, _ = await run(w, "for i in range(3000):\n    print('0123456789')\n'y' * 25000")
        [result] = results
        printed, value = result.split("\n\nValue of the last expression:\n")
        assert printed.startswith("Printed:\n0123456789\n")
        assert f"…[clipped: {3000 * 11 - OUTPUT_LIMIT:,} more characters not shown" in printed
        assert value.startswith("'yyy") and "…[clipped: 15,002 more characters not shown" in value


async def test_each_call_starts_fresh(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent()) as w:
        await w.run(ALICE, CHANNEL, say_calls(("run_python", {"code": "kept = 41"}),
                                              ("run_python", {"code": "kept + 1"})))
        seen = await w.run(ALICE, CHANNEL, say_calls(("run_python", {"code": "kept + 1"})))
        assert "NameError" in seen.retries[0]


async def test_the_description_states_this_agents_limits(tmp_path: Path) -> None:
    async with world(tmp_path, agents=python_agent(timeout_secs=30, wall_clock_secs=45, max_memory_mb=512)) as w:
        seen = await w.run(ALICE, CHANNEL, "hello")
        description = seen.defs["run_python"].description or ""
        assert "stopped after 30 seconds of running or 45 seconds in all" in description
        assert "past 512 MB" in description
        assert "<returns>" in description


@pytest.mark.parametrize(("config", "message"), [
    ({"timeout_secs": 0}, "timeout_secs: Input should be greater than 0"),
    ({"timeout_secs": 121}, "timeout_secs: Input should be less than or equal to 120"),
    ({"max_memory_mb": 8}, "max_memory_mb: Input should be greater than or equal to 16"),
    ({"max_memory_mb": 5000}, "max_memory_mb: Input should be less than or equal to 4096"),
    ({"memory": 5}, "memory: Extra inputs are not permitted"),
])
def test_limits_out_of_range_are_refused_at_load_with_file_and_line(tmp_path: Path, config: dict, message: str) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path, agents={"assistant": agent({"id": "code_execution", "config": config})})
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    [problem] = [str(p) for p in e.value.problems if not p.warning]
    assert problem.startswith(f"{cfg / 'agents' / 'assistant.yaml'}:")
    assert f"capabilities.0.config.{message}" in problem
