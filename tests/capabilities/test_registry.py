"""The registry: publish-time refusals with file and line, the catalog, and what every tool tells the model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import aiohttp
import pytest
from pydantic_ai.toolsets import FunctionToolset

from bindings.loader import ConfigError, load_config
from bindings.models import KNOWN_SCOPES, GatewayConfig
from capabilities.registry import load_all
from capabilities.tool_text import describes_return, tool_text
from gateway.ops import cli
from gateway import extensions
from gateway.messages import ChatKind
from gateway.outbound.adapter import CHANNEL_TOOL_IDS

from ..conftest import write_config
from ..fakes.chat import DIRECTORIES, FakeDirectory
from .support import Account, Place, agent, slack_binding, world

AGENT_FILE = """\
name: A
model: demo
capabilities:
  - id: clokc
  - id: clock
    config:
      timezone: Mars/Base
  - id: memory_files
    tool_approval:
      remember: required
    tool_overrides:
      forget: {name: x}
      read_memory:
        name: read notes
  - id: channel_tools
    config:
      tools: [get_channel_info]
"""


def test_publish_refuses_with_file_line_and_a_fix(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text(AGENT_FILE)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    tools = "delete_memory, edit_memory, list_memory, read_memory, write_memory"
    # Other tests register capabilities of their own in the same process; those are offered too.
    available = ", ".join(sorted(k for k, d in load_all().items() if not d.binding_only))
    assert {"clock", "memory_files", "thinking"} <= set(available.split(", "))
    assert [str(p) for p in e.value.problems if not p.warning] == [
        f"{path}:4:5: capabilities.0.id: unknown capability 'clokc': no entry point 'clokc' in group "
        f"agent_gateway.capabilities; available: {available}",
        f"{path}:7:7: capabilities.1.config.timezone: 'Mars/Base' is not an IANA time zone name "
        "(e.g. UTC, Europe/Warsaw, America/New_York)",
        f"{path}:10:7: capabilities.2.tool_approval.remember: memory_files has no tool 'remember'; its tools are: {tools}",
        f"{path}:12:7: capabilities.2.tool_overrides.forget: memory_files has no tool 'forget'; its tools are: {tools}",
        f"{path}:14:9: capabilities.2.tool_overrides.read_memory.name: 'read notes' is not a name a model can call: "
        "use 1-64 letters, digits, '_' or '-'",
        f"{path}:16:5: capabilities.3.config: channel_tools is granted per binding: move its config to the binding's "
        "`channel_tools:` section (the agent entry may only set approval and tool overrides)",
    ]


def test_check_and_run_both_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, agents={"assistant": {"name": "A"}, "other": {"name": "B"}})
    spec = cfg / "agents" / "assistant.yaml"
    spec.write_text("name: A\nchannel_tools:\n  tools: [get_channel_info]\n")
    other = cfg / "agents" / "other.yaml"
    other.write_text("name: B\ncapabilities:\n  - id: clock\n    config: {timezone: Nowhere}\n")
    for command in ("check", "run"):
        assert cli.main([command, "--config", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert f"{spec}:2:1: channel_tools: channel_tools belongs to a binding, not an agent: move it to " \
               "bindings/<binding>.yaml" in err
        assert f"{other}:4:14: capabilities.0.config.timezone: 'Nowhere' is not an IANA time zone name" in err


def test_the_catalog_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["capabilities"]) == 0
    text = capsys.readouterr().out
    assert "memory_files (Memory files, memory)" in text
    assert "channel_tools (Chat channel lookup, chat) — set on a binding, not an agent" in text
    assert "  config default_limit: default 20, minimum 1, maximum 200" in text
    assert cli.main(["capabilities", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in data["capabilities"]] == sorted(load_all())


async def test_the_catalog_over_http_comes_from_the_running_registry(tmp_path: Path) -> None:
    async with world(tmp_path) as w, aiohttp.ClientSession(w.gw.url) as s:
        r = await s.get("/api/v1/agents/capabilities")
        assert r.status == 200
        body = await r.json()
        served = {c["id"]: c for c in body["capabilities"]}
    assert set(served) == set(load_all())
    assert body["scopes"] == {"known": list(KNOWN_SCOPES), "granted": list(KNOWN_SCOPES)}
    assert served["channel_tools"]["binding_only"] is True
    assert served["channel_tools"]["config_schema"]["properties"]["default_limit"]["maximum"] == 200
    assert [t["id"] for t in served["memory_files"]["tools"]] == [
        "list_memory", "read_memory", "write_memory", "edit_memory", "delete_memory"]
    assert not any(t["side_effecting"] for t in served["memory_files"]["tools"]), "memory is the agent's own"
    assert served["clock"]["tools"] == [] and served["clock"]["config_schema"]["properties"]["timezone"]


async def test_every_registered_tool_says_what_comes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Build every capability's tools as a run sees them and read the definitions pydantic-ai made."""
    shipped = [decl for decl in load_all().values() if decl.build.__module__.startswith("capabilities.")]
    assert {d.id for d in shipped} >= {"clock", "thinking", "memory_files", "channel_tools"}
    with_tools = [decl for decl in shipped if decl.tools and not decl.binding_only]
    # The config under which each capability offers every tool it declares (a flat plan has no subtask tools).
    configs = {"skills": {"skills": ["incident-summary"]},  # the shipped example, copied below
               "planning": {"enable_subtasks": True}, "context": {"default_mode": "link"},
               "knowledge": {"collections": ["docs"]},
               "audio": {"provider": "openai"},  # the agent's model is in-process: no provider of its own
               "subagents": {"mode": "auto", "inline": [{"name": "helper", "model": "recorder"}],
                             "allow_questions": True, "allow_dynamic": True}}
    monkeypatch.setenv("TEST_CAPABILITY_KEY", "a-key")  # for those that need one (image_generation)
    keys = {"secret_id": "env:TEST_CAPABILITY_KEY"}
    agents = {"assistant": agent(*({"id": d.id, "config": configs.get(d.id, {}),
                                    **(keys if d.needs_key == "required" else {})} for d in with_tools)),
              "other": agent()}  # someone for handoffs to send to
    bindings = {"slack": slack_binding(channel_tools={"tools": list(CHANNEL_TOOL_IDS)})}
    shutil.copytree(Path(__file__).parents[2] / "config" / "examples" / "skills", tmp_path / "skills")
    (tmp_path / "context" / "assistant").mkdir(parents=True)
    (tmp_path / "context" / "assistant" / "glossary.md").write_text("A widget is a part.")
    (tmp_path / "docs").mkdir()
    gateway = {"knowledge": {"collections": {"docs": {"path": "docs"}}}}
    async with world(tmp_path, agents=agents, bindings=bindings, gateway=gateway) as w:
        DIRECTORIES["slack"] = FakeDirectory()
        seen = await w.run(Account("slack", "T1", "U1", "a"), Place("slack", "slack", "T1", "C1", ChatKind.CHANNEL),
                           "hello")
    # sandbox declares execute so a binding can gate or rename it, and offers it only with a shell backend (none yet).
    # answer_subagent is declared so policy can name it, and offered to no model (the seed's rule).
    declared = {t.id for decl in shipped for t in decl.tools} - {"execute", "answer_subagent"}
    # load_capability is the framework's own (skills are loaded with it): no spec declares, gates or renames it.
    offered = {name: tool for name, tool in seen.defs.items() if name != "load_capability"}
    assert set(offered) == declared, "every declared tool is built (and nothing undeclared)"
    for name, tool in offered.items():
        assert describes_return(tool.description), f"{name} does not say what comes back"
        assert tool.description and tool.description.startswith("<summary>")
        for arg, schema in tool.parameters_json_schema.get("properties", {}).items():
            assert schema.get("description"), f"{name}({arg}) is not described"


def test_tool_text_renders_what_pydantic_ai_builds_from_a_docstring() -> None:
    def lookup(query: str) -> str:
        """Find a thing.

        Use it for things; use other for others.

        Args:
            query: What to find.

        Returns:
            One line per thing.
        """
        return query

    [built] = FunctionToolset([lookup]).tools.values()
    assert built.description == tool_text("Find a thing.", "Use it for things; use other for others.",
                                          "One line per thing.")


def test_two_tools_under_one_visible_name_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from bindings.loader import ConfigError, load_config
    from gateway import extensions

    from ..conftest import write_config

    extensions.register_checks()
    cfg = write_config(tmp_path, agents={"assistant": {"name": "A", "model": "demo", "capabilities": [
        {"id": "memory_files", "tool_overrides": {"read_memory": {"name": "list_memory"}}}]}})
    try:
        load_config(cfg)
        raise AssertionError("a duplicate visible tool name was accepted")
    except ConfigError as e:
        [problem] = [str(p) for p in e.problems if not p.warning]
        assert problem.startswith(f"{cfg}/agents/assistant.yaml:")
        assert "two tools named 'list_memory'" in problem


def test_a_scope_not_granted_refuses_the_agent_naming_the_scope_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Seed "Scopes": withholding conversations:read stops every agent that searches conversations."""
    granted = [s for s in KNOWN_SCOPES if s != "conversations:read"]
    cfg = write_config(tmp_path, agents={"assistant": {"name": "A", "model": "demo", "capabilities": [
        {"id": "clock"}, {"id": "conversation_search"}]}}, gateway={"scopes": {"granted": granted}})
    spec = cfg / "agents" / "assistant.yaml"
    line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1) if "conversation_search" in text)
    for command in ("check", "run"):
        assert cli.main([command, "--config", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert f"{spec}:{line}:" in err and "capabilities.1.id: conversation_search needs the scope " \
               "conversations:read and gateway.yaml's scopes.granted does not grant it" in err
    # the catalog still prints (the config's problems on stderr), with the deployment's scope set
    assert cli.main(["capabilities", "--config", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "scopes withheld (gateway.yaml scopes.granted): conversations:read" in text
    assert "conversations:read (not granted: agents cannot use conversation_search)" in text


def test_an_unknown_scope_is_refused_with_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, gateway={"scopes": {"granted": ["web:read", "root"]}})
    assert cli.main(["check", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "scopes.granted: unknown scope 'root'; known: knowledge:read," in err


def test_every_declared_scope_is_known_and_granted_by_default() -> None:
    declared = {scope for decl in load_all().values() for scope in decl.scopes}
    assert declared <= set(KNOWN_SCOPES)
    assert set(GatewayConfig().scopes.granted) == set(KNOWN_SCOPES)


def test_the_shared_builds_kept_are_the_ones_used_lately_not_the_first_made() -> None:
    """Delegates' one-off agents come and go; an agent every message uses stays built among them."""
    from types import SimpleNamespace

    from capabilities.registry import SharedBuild, SharedBuilds

    class Counted(SharedBuilds):
        built: list[str] = []

        def _build(self, turn, parts):  # type: ignore[no-untyped-def, override]
            self.built.append(turn.agent.name)
            return SharedBuild(None, {})

    builds = Counted(size=2)
    binding = SimpleNamespace()
    configured = SimpleNamespace(name="configured")
    turn = SimpleNamespace(agent=configured, binding=binding)
    builds.get(turn, {})  # type: ignore[arg-type]
    for i in range(5):  # each delegation's agent once, the configured agent's runs between them
        builds.get(SimpleNamespace(agent=SimpleNamespace(name=f"delegate {i}"), binding=binding), {})  # type: ignore[arg-type]
        builds.get(turn, {})  # type: ignore[arg-type]
    assert Counted.built.count("configured") == 1
    assert Counted.built == ["configured"] + [f"delegate {i}" for i in range(5)]
