"""The shipped assistant pointed at docs/ as a collection (config/examples/) loads, indexes and cites the docs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bindings.loader import load_config
from capabilities.knowledge_index import KnowledgeIndexer
from gateway import extensions
from gateway.messages import ChatKind

from ..conftest import running_gateway
from .support import SEEN, Account, Place, World

ROOT = Path(__file__).resolve().parents[2]


async def test_the_example_assistant_cites_the_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL"):
        monkeypatch.delenv(name, raising=False)  # `model: auto` is the offline demo model
    config = tmp_path / "config"
    shutil.copytree(ROOT / "config", config)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "config" / "examples" / "assistant-with-docs.yaml", config / "agents" / "assistant.yaml")
    gateway_yaml = (ROOT / "config" / "examples" / "gateway-knowledge.yaml").read_text()
    (config / "gateway.yaml").write_text(gateway_yaml.replace("sqlite+aiosqlite:///var/gateway.db",
                                                              f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}")
                                         .replace("127.0.0.1:8788", "127.0.0.1:0"))
    extensions.register_checks()
    load_config(config)  # `agent-gateway check` passes

    async with running_gateway(config) as gw:
        SEEN.clear()
        w = World(gw)
        indexer = next(e for e in gw.extensions if isinstance(e, KnowledgeIndexer))
        await indexer.refresh()
        seen = await w.run(Account("web", "web", "u1", "ada"), Place("web", "web", "web", "u1", ChatKind.DM),
                           "search_documents query=inject_budget_chars")
    assert seen.output.startswith("`search_documents` answered: [1] cite as [docs/capabilities.md#context] — "
                                  "capabilities.md — Capabilities › Context")
