"""MCP servers in agent files: validation at load (file:line:col), `check --online`, `mcp list`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from gateway import extensions

from .conftest import write_config

BAD_SERVERS = """\
name: Ops
mcp_servers:
  - name: wiki docs
    url: https://wiki.example.com/mcp
  - name: both
    url: https://x.example.com/mcp
    command: x-mcp
  - name: neither
  - name: badurl
    url: ftp//nowhere
  - name: badport
    url: http://127.0.0.1:99999/mcp
  - name: perms
    url: https://x.example.com/mcp
    tools: {search: maybe}
  - name: stdio
    command: x-mcp
    headers: {Authorization: env:X}
"""

BAD_NAMES = """\
name: Ops
mcp_servers:
  - name: tracker
    url: https://tracker.example.com/mcp
  - name: tracker
    command: tracker-mcp
  - name: tracker_v2
    url: https://v2.example.com/mcp
  - name: wiki
    url: https://wiki.example.com/mcp
    tools:
      search: allow
      a_tool_name_so_long_that_with_its_prefix_it_is_more_than_64_chars: ask
"""


def problems(directory: Path) -> list[str]:
    extensions.register_checks()
    with pytest.raises(ConfigError) as e:
        load_config(directory)
    return [str(p) for p in e.value.problems if not p.warning]


def test_malformed_servers_are_refused_with_file_and_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text(BAD_SERVERS)
    path = cfg / "agents" / "assistant.yaml"
    assert problems(cfg) == [
        f"{path}:3:5: mcp_servers.0.name: 'wiki docs' cannot prefix tool names every model provider accepts: use "
        "letters, digits, '_' or '-' (at most 40 characters, starting with a letter or digit)",
        f"{path}:5:5: mcp_servers.1: set either url (streamable HTTP) or command (stdio), not both or neither",
        f"{path}:8:5: mcp_servers.2: set either url (streamable HTTP) or command (stdio), not both or neither",
        f"{path}:10:5: mcp_servers.3.url: 'ftp//nowhere' is not an http(s) URL such as https://mcp.example.com/mcp",
        f"{path}:12:5: mcp_servers.4.url: 'http://127.0.0.1:99999/mcp' has a malformed port",
        f"{path}:15:13: mcp_servers.5.tools.search: Input should be 'allow', 'ask' or 'deny'",
        f"{path}:16:5: mcp_servers.6: headers are for an HTTP server (url); a stdio server takes env",
    ]


def test_duplicate_names_overlapping_prefixes_and_long_tool_names(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text(BAD_NAMES)
    path = cfg / "agents" / "assistant.yaml"
    assert problems(cfg) == [
        f"{path}:5:5: mcp_servers.1.name: another MCP server of this agent is already named 'tracker' (entry 1); "
        "names must differ because they prefix the tool names",
        f"{path}:7:5: mcp_servers.2.name: 'tracker_v2' and 'tracker' could give two tools the same name (tool "
        "v2_x of tracker and tool x of tracker_v2 would both be tracker_v2_x): rename one",
        f"{path}:13:7: mcp_servers.3.tools.a_tool_name_so_long_that_with_its_prefix_it_is_more_than_64_chars: the "
        "model would see this tool as 'wiki_a_tool_name_so_long_that_with_its_prefix_it_is_more_than_64_chars', "
        "which not every model provider accepts: letters, digits, '_' and '-', at most 64 characters",
    ]


def test_more_than_twenty_servers(tmp_path: Path) -> None:
    servers = [{"name": f"s{i}", "url": f"https://s{i}.example.com/mcp"} for i in range(21)]
    cfg = write_config(tmp_path, agents={"assistant": {"name": "A", "mcp_servers": servers}})
    [problem] = problems(cfg)
    assert problem == f"{cfg}/agents/assistant.yaml:1:1: mcp_servers: at most 20 MCP servers per agent (found 21)"


def test_a_valid_server_list_loads(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, agents={"assistant": {"name": "A", "mcp_servers": [
        {"name": "wiki", "url": "https://wiki.example.com/mcp", "headers": {"Authorization": "env:WIKI_TOKEN"},
         "tools": {"search": "allow", "delete_page": "deny"}},
        {"name": "files", "command": "npx", "args": ["-y", "files-mcp"], "env": {"FILES_TOKEN": "file:/etc/t"},
         "default": "deny", "tools": {"read": "ask"}, "enabled": False},
    ]}})
    extensions.register_checks()
    config = load_config(cfg)
    wiki, files = config.agents["assistant"].mcp_servers
    assert wiki.permission("search") == "allow" and wiki.permission("anything") == "ask"
    assert wiki.permission("delete_page") == "deny"
    assert files.permission("read") == "ask" and files.permission("write") == "deny"
    assert wiki.describe() == "https://wiki.example.com/mcp" and files.describe() == "stdio: npx"
    assert config.warnings == []


def _online_config(tmp_path: Path) -> Path:
    import socket
    import sys

    from .test_mcp import SERVER

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = write_config(tmp_path, bindings={"web": {"platform": "web", "agent": "ops"}})
    (cfg / "agents" / "assistant.yaml").unlink()
    (cfg / "agents" / "ops.yaml").write_text(f"""\
name: Ops
mcp_servers:
  - name: tracker
    command: {sys.executable}
    args: [{SERVER}]
    tools:
      status: allow
      drop_database: deny
      nonexistent: allow
  - name: wiki
    url: http://127.0.0.1:{port}/mcp
  - name: off
    url: https://off.example.com/mcp
    enabled: false
""")
    return cfg


def test_mcp_list_and_check_online(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.ops.cli import main

    cfg = _online_config(tmp_path)
    assert main(["mcp", "list", "--config", str(cfg), "--agent", "ops"]) == 1  # wiki cannot be reached
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "agent ops: 3 MCP servers"
    assert out[1] == f"  tracker (stdio: {__import__('sys').executable}): up, 7 tools"
    assert out[2:10] == [
        "    tracker_status         allow",
        "    tracker_deploy         ask",
        "    tracker_drop_database  deny  (never offered)",
        "    tracker_explode        ask",
        "    tracker_chart          ask",
        "    tracker_whoami         ask",
        "    tracker_grow           ask",
        "    warning: tools: 'nonexistent' names no tool this server offers",
    ]
    assert out[10].startswith("  wiki (http://127.0.0.1:") and ": down: " in out[10]
    assert out[11] == "  off (https://off.example.com/mcp): disabled"

    assert main(["check", "--online", "--config", str(cfg)]) == 0  # what only connecting tells is a warning
    err = capsys.readouterr().err.splitlines()
    path = cfg / "agents" / "ops.yaml"
    [tools_warning] = [line for line in err if "nonexistent" in line]
    assert tools_warning == (f"{path}:9:7: warning: mcp_servers.0.tools.nonexistent: tracker offers no tool "
                             "'nonexistent' (it offers: chart, deploy, drop_database, explode, grow, status, whoami)")
    [wiki_warning] = [line for line in err if "wiki" in line]
    assert wiki_warning.startswith(f"{path}:10:5: warning: mcp_servers.1.name: MCP server wiki (http://127.0.0.1:")
    assert "cannot be reached" in wiki_warning


def test_a_literal_credential_in_headers_or_env_is_a_warning(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    (cfg / "agents" / "assistant.yaml").write_text("""\
name: A
mcp_servers:
  - name: wiki
    url: https://wiki.example.com/mcp
    headers:
      Authorization: Bearer abc123
      X-Tenant: acme
  - name: files
    command: files-mcp
    env:
      FILES_API_KEY: abc123
      LOG_LEVEL: debug
""")
    extensions.register_checks()
    config = load_config(cfg)
    path = cfg / "agents" / "assistant.yaml"
    assert [str(w) for w in config.warnings] == [
        f"{path}:6:7: warning: mcp_servers.0.headers.Authorization: a literal secret in a config file; "
        "use env:NAME, file:/path or credential:NAME",
        f"{path}:11:7: warning: mcp_servers.1.env.FILES_API_KEY: a literal secret in a config file; "
        "use env:NAME, file:/path or credential:NAME",
    ]
    wiki = config.agents["assistant"].mcp_servers[0]
    assert "abc123" not in repr(wiki)
