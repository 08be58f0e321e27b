"""The core finds adapters and capabilities by name through entry points (gateway/extensions.py): each is
imported when a config names it, and a name no installed distribution declares is a config error that
names the file, the name and the entry-point group."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from gateway import extensions

from .conftest import ROOT, write_config


def _without(name: str) -> Any:
    """The installed entry points, less `name`: a deployment that did not install that package."""
    class Installed:
        def select(self, **selection: Any) -> list[importlib.metadata.EntryPoint]:
            return [ep for ep in importlib.metadata.entry_points(**selection) if ep.name != name]

    return Installed


def test_a_binding_whose_platform_has_no_adapter_installed_is_a_config_error(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extensions, "entry_points", _without("telegram"))
    extensions.rescan()  # the entry points are read once per process: forget what was read before the patch
    try:
        extensions.register_checks()
        config = write_config(tmp_path, bindings={"tg": {"platform": "telegram", "agent": "assistant",
                                                         "telegram": {"token": "env:TG_TOKEN"}}})
        with pytest.raises(ConfigError) as e:
            load_config(config)
    finally:
        monkeypatch.undo()
        extensions.rescan()  # and the patched reading, for the tests after this one
    assert [str(p) for p in e.value.problems if not p.warning] == [
        f"{config / 'bindings' / 'tg.yaml'}:2:1: platform: no adapter for platform 'telegram': no entry point "
        "'telegram' in group agent_gateway.adapters (installed: mattermost, slack, web); install the package that "
        "provides it (in a checkout: pip install -e .)"]


def test_every_group_is_found_in_one_scan_of_the_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan reads every installed distribution's metadata (5-17 ms here); start-up asks four groups (the
    commands, the extensions, the capabilities, the adapters): one scan serves them all."""
    scans: list[dict[str, Any]] = []
    read = extensions.entry_points

    def counted(**selection: Any) -> Any:
        scans.append(selection)
        return read(**selection)  # what extensions asks: every group's (`select` then picks one)

    monkeypatch.setattr(extensions, "entry_points", counted)
    extensions.rescan()
    try:
        found = {group: extensions.names(group) for group in (extensions.COMMANDS, extensions.EXTENSIONS,
                                                              extensions.CAPABILITIES, extensions.ADAPTERS)}
    finally:
        monkeypatch.undo()
        extensions.rescan()
    assert scans == [{}]
    assert found[extensions.ADAPTERS] == ["mattermost", "slack", "telegram", "web"]
    assert "clock" in found[extensions.CAPABILITIES] and found[extensions.EXTENSIONS]


def test_every_shipped_adapter_and_capability_is_declared() -> None:
    assert extensions.names(extensions.ADAPTERS) == ["mattermost", "slack", "telegram", "web"]
    from capabilities.registry import load_all

    declared = extensions.names(extensions.CAPABILITIES)
    assert {"clock", "memory_files", "code_execution", "web_research", "channel_tools"} <= set(declared)
    assert set(declared) <= set(load_all())  # each entry point's module declares the capability of its name
    assert [type(e).__name__ for e in extensions.installed()] == ["CapabilitiesExtension"]


def test_a_capability_module_is_imported_only_when_a_config_names_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, agents={"assistant": {"name": "A", "model": "demo",
                                                          "capabilities": [{"id": "clock"}]}})
    script = ("import sys\n"
              "from gateway import extensions\n"
              "from bindings.loader import load_config\n"
              "extensions.register_checks()\n"
              f"load_config({str(config)!r})\n"
              "print(sorted(m for m in sys.modules if m in ('capabilities.clock', 'capabilities.web_fetch', "
              "'capabilities.web_search', 'capabilities.run_python')))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['capabilities.clock']"


# What a deployment that binds none of it must never load: the platform SDKs, PostgreSQL's driver, the
# capabilities' heavy libraries, the model providers' SDKs with no key, MCP with no server, and Alembic
# for a database already at head; nor SQLAlchemy's PostgreSQL dialect on SQLite; nor the parts of a
# library no process of ours runs.
NEVER_FOR_THE_SHIPPED_CONFIG = ("slack_sdk", "slack_bolt", "telegram", "asyncpg", "matplotlib", "av", "pypdf", "bs4",
                                "markdownify", "pydantic_ai_skills", "re2", "mcp", "fastmcp", "openai", "anthropic",
                                "tiktoken", "alembic", "sqlalchemy.dialects.postgresql",
                                # capabilities it names none of: their checks and daemon parts included
                                "capabilities.context", "capabilities.knowledge", "capabilities.knowledge_index",
                                "capabilities.subagents", "capabilities.handoffs",
                                "capabilities.background_delegation", "capabilities.delegate_questions",
                                # httpx's command-line client, which `import httpx` loads when they are
                                # installed (gateway/ops/library_parts.py)
                                "rich", "click", "pygments",
                                # unbound capabilities' library, which start-up imported to check its private
                                # attributes (gateway/private_api.py)
                                "pydantic_ai_harness.system_reminders", "pydantic_ai_harness.tool_output_limits",
                                "pydantic_ai_harness.compaction")


def test_the_shipped_config_starts_without_importing_what_it_does_not_bind(tmp_path: Path) -> None:
    """The daemon assembled and started on `config/` as shipped (the web chat, the offline model), on a
    database at head: none of the packages above is imported (bench/startup.py measures what that saves)."""
    from tests.support.template_db import copy_migrated_sqlite

    shutil.copytree(ROOT / "config", tmp_path / "config")
    copy_migrated_sqlite(tmp_path / "var" / "gateway.db")  # the shipped database.url, relative to the cwd
    script = ("import asyncio, sys\n"
              "from gateway import extensions\n"
              "from bindings.loader import load_config\n"
              "from gateway.daemon import Gateway\n"
              "extensions.register_checks()\n"
              "async def main():\n"
              "    gateway = Gateway(load_config('config'), listen='127.0.0.1:0')\n"
              "    await gateway.start()\n"
              "    await gateway.stop()\n"
              "asyncio.run(main())\n"
              f"print(sorted({{p for m in sys.modules for p in (m, m.partition('.')[0])}} "
              f"& set({NEVER_FOR_THE_SHIPPED_CONFIG!r})))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_telegram_binding_connects_without_loading_cryptography(tmp_path: Path) -> None:
    """python-telegram-bot imports `cryptography` only for Telegram Passport, which the gateway never offers:
    7 MiB of OpenSSL's bindings in every Telegram deployment (gateway/ops/library_parts.py). The daemon,
    started on a Telegram binding against the fake server, connects and never loads it."""
    script = ("import asyncio, os, sys\n"
              "import gateway\n"  # first, as in the daemon: `agent-gateway run` is gateway.ops.cli
              "from pathlib import Path\n"
              "from bindings.loader import load_config\n"
              "from gateway import extensions\n"
              "from gateway.daemon import Gateway\n"
              "from tests.adapters.stopping import ENV, fake_platforms\n"
              "from tests.conftest import write_config\n"
              "os.environ.update(ENV)\n"
              "extensions.register_checks()\n"
              "async def main():\n"
              "    async with fake_platforms() as fakes:\n"
              f"        config = write_config(Path({str(tmp_path / 'config')!r}),\n"
              "                              bindings={'telegram': fakes.bindings()['telegram']})\n"
              "        gateway = Gateway(load_config(config), listen='127.0.0.1:0')\n"
              "        await gateway.start()\n"
              "        down = await gateway.wait_connected(30)\n"
              "        await gateway.stop()\n"
              "    print(down, 'cryptography' in sys.modules)\n"
              "asyncio.run(main())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[] False", "connected, and cryptography never imported"
