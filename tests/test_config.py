"""Config validation: every problem names its file, line, column and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config

from .conftest import ROOT, write_config
from .test_cli import run_cli


def _problems(directory: Path) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(directory)
    return [str(p) for p in e.value.problems if not p.warning]


def test_shipped_config_is_valid() -> None:
    config = load_config(ROOT / "config")
    assert "assistant" in config.agents and "web" in config.bindings
    assert config.warnings == []


def test_unknown_field_points_at_its_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text("name: A\nmodel: demo\nlimits:\n  model_requets: 3\n")
    assert _problems(cfg) == [f"{cfg}/agents/assistant.yaml:4:3: limits.model_requets: unknown setting "
                              "(check the spelling; `agent-gateway schema` lists every setting)"]


def test_out_of_range_value(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "gateway.yaml").write_text("limits:\n  concurrent_runs: 0\n")
    [problem] = _problems(cfg)
    assert problem.startswith(f"{cfg}/gateway.yaml:2:3: limits.concurrent_runs: ")
    assert "greater than or equal to 1" in problem


def test_allowed_hosts_and_origins_are_checked(tmp_path: Path) -> None:
    """The web surface's allowlists (docs/security.md): a URL where a host name belongs is an error, not a hole."""
    cfg = write_config(tmp_path)
    (cfg / "gateway.yaml").write_text("http:\n  allowed_hosts: [https://chat.example.com]\n"
                                      "  allowed_origins: [chat.example.com, 'https://ok.example/path']\n"
                                      "  header_timeout_seconds: 0\n  typo_hosts: []\n")
    problems = _problems(cfg)
    assert any("http.allowed_hosts: " in p and "is not a host name such as chat.example.com" in p for p in problems)
    assert any("http.allowed_origins: " in p and "is not an origin such as https://chat.example.com" in p
               for p in problems)
    assert any("http.header_timeout_seconds: " in p for p in problems)
    assert any("http.typo_hosts: unknown setting" in p for p in problems)
    (cfg / "gateway.yaml").write_text("http:\n  allowed_hosts: [Chat.Example.com, 10.0.0.5]\n"
                                      "  allowed_origins: ['https://tools.example.com:8443']\n")
    assert load_config(cfg).gateway.http.allowed_hosts == ["chat.example.com", "10.0.0.5"]


def test_every_problem_reported_at_once(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "bindings" / "web.yaml").write_text("platform: web\nagent: nobody\n")
    (cfg / "bindings" / "slack.yaml").write_text("platform: slack\nagent: assistant\nslack:\n  bot_token: env:X\n  mode: socket\n")
    (cfg / "agents" / "broken.yaml").write_text("name: [unclosed\n")
    problems = _problems(cfg)
    assert any(p.startswith(f"{cfg}/bindings/web.yaml:2:1: agent: no agent 'nobody'") for p in problems)
    assert any(p.startswith(f"{cfg}/bindings/slack.yaml:3:1: slack: ") and "app_token" in p for p in problems)
    assert any(p.startswith(f"{cfg}/agents/broken.yaml:") and "not valid YAML" in p for p in problems)


def test_channel_tools_refused_in_agent(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text("name: A\nchannel_tools:\n  tools: [get_channel_info]\n")
    [problem] = _problems(cfg)
    assert problem.startswith(f"{cfg}/agents/assistant.yaml:2:1: channel_tools: channel_tools belongs to a binding")


def test_literal_secret_is_a_warning(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, bindings={
        "web": {"platform": "web", "agent": "assistant"},
        "tg": {"platform": "telegram", "agent": "assistant", "telegram": {"token": "123:abc"}},
    })
    config = load_config(cfg)
    [warning] = config.warnings
    assert str(warning).startswith(f"{cfg}/bindings/tg.yaml:")
    assert "telegram.token" in str(warning) and "literal secret" in str(warning)
    assert "123:abc" not in str(warning)


def test_id_must_match_file_name(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text("id: other\nname: A\n")
    [problem] = _problems(cfg)
    assert problem.startswith(f"{cfg}/agents/assistant.yaml:1:1: id: id 'other' must match the file name")


def test_check_command_exit_codes(tmp_path: Path) -> None:
    """What `check` and `run` print and return, read from `cli.main` in this process (tests/test_cli.py:run_cli;
    tests/test_startup.py runs the daemon's own process)."""
    cfg = write_config(tmp_path)
    ok = run_cli("check", "--config", str(cfg))
    assert ok.returncode == 0 and "ok" in ok.stdout
    (cfg / "gateway.yaml").write_text("http:\n  listen: nowhere\n")
    bad = run_cli("check", "--config", str(cfg))
    assert bad.returncode == 1
    assert f"{cfg}/gateway.yaml:2:3: http.listen: expected host:port" in bad.stderr
    run = run_cli("run", "--config", str(cfg))
    assert run.returncode == 1
    assert f"{cfg}/gateway.yaml:2:3: http.listen: expected host:port" in run.stderr


def test_schema_command_prints_json_schema() -> None:
    import json

    out = run_cli("schema", "binding")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert "platform" in schema["properties"] and schema["additionalProperties"] is False


def test_api_tokens_name_a_person_and_nothing_else(tmp_path: Path) -> None:
    """`http.api_tokens` (each token acts as its person: docs/security.md) are checked like every setting."""
    cfg = write_config(tmp_path)
    (cfg / "gateway.yaml").write_text("http:\n  api_tokens:\n    - {token: env:A, person: 'slack:U0ADA', name: Ada}\n"
                                      "    - {token: env:B, persn: 'slack:U0BOB'}\n")
    problems = "\n".join(_problems(cfg))
    assert "api_tokens.1.persn: unknown setting" in problems
    assert "api_tokens.1.person" in problems  # missing
    (cfg / "gateway.yaml").write_text("http:\n  api_tokens:\n    - {token: env:A, person: 'slack:U0ADA'}\n"
                                      "    - {token: env:A, person: p1}\n")
    assert "two api_tokens name the same secret" in "\n".join(_problems(cfg))
    cfg2 = write_config(tmp_path / "ok")
    (cfg2 / "gateway.yaml").write_text("http:\n  api_tokens:\n    - {token: env:A, person: 'slack:U0ADA', name: Ada}\n")
    assert load_config(cfg2).gateway.http.api_tokens[0].person == "slack:U0ADA"
