"""The start-up self-check of dependencies' private attributes (gateway/private_api.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiosqlite
import pytest

from gateway import private_api
from gateway.daemon import StartupError

from .conftest import ROOT, running_gateway, write_config


def test_the_installed_dependencies_have_what_we_use() -> None:
    assert private_api.problems() == []


async def test_a_dependency_that_lost_a_private_attribute_stops_the_start(config_dir: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As aiosqlite would look if a release dropped `Connection._execute` (0.22 broke other projects so)."""
    monkeypatch.delattr(aiosqlite.Connection, "_execute")
    with pytest.raises(StartupError) as refused:
        async with running_gateway(config_dir):
            raise AssertionError("started without aiosqlite's Connection._execute")
    message = str(refused.value)
    assert f"aiosqlite {aiosqlite.__version__} lacks Connection._execute" in message
    assert "gateway/store/sqlite.py" in message and "requirements.lock" in message


# In a fresh interpreter (what it has imported decides what is checked): pydantic-ai-harness' LLMReminder without
# `_generate`; a gateway started on argv[1] (no capability of it bound), then the reload that binds
# system_reminders, then a start on that config. Prints what each did.
RELOAD_THEN_START = """
import asyncio, json, sys
from pydantic_ai_harness.system_reminders import LLMReminder
from bindings.loader import load_config
from gateway import extensions
from gateway.daemon import Gateway, StartupError
from tests.conftest import DEFAULT_AGENT, write_config

del LLMReminder._generate
extensions.register_checks()

async def main():
    config = load_config(sys.argv[1])
    gw = Gateway(config, listen="127.0.0.1:0")
    await gw.start()
    try:
        write_config(config.directory, agents={"assistant": {**DEFAULT_AGENT, "capabilities": [
            {"id": "system_reminders", "config": {"reminders": [{"text": "Be brief.", "interval": 3}]}}]}})
        reloaded, problems = await gw.reload_from_disk()
        kept = [c.id for c in gw.config.agents["assistant"].capabilities]
    finally:
        await gw.stop()
    try:
        await Gateway(load_config(sys.argv[1]), listen="127.0.0.1:0").start()
        refused = ""
    except StartupError as e:
        refused = str(e)
    print(json.dumps({"reloaded": reloaded, "problems": problems, "kept": kept, "start": refused}))

asyncio.run(main())
"""


async def test_a_bound_capabilitys_library_that_lost_a_private_attribute_stops_the_reload_and_the_start(
        tmp_path: Path) -> None:
    """What a capability uses is checked when a config binds it: a config binding none of pydantic-ai-harness'
    reminders starts without importing them to check them; the reload that binds them is refused, naming
    what is missing (the last good config stays), and so is a start on that config."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RELOAD_THEN_START, str(write_config(tmp_path / "config")), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert not result["reloaded"] and result["kept"] == []
    (problem,) = result["problems"]
    assert "pydantic-ai-harness" in problem and "lacks LLMReminder._generate" in problem
    assert "capabilities/system_reminders.py" in problem
    assert "lacks LLMReminder._generate" in result["start"]
