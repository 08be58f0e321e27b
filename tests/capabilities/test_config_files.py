"""Files under the config are read through one reader that refuses what resolves outside its root
(docs/security.md, "Files under the config").

A docs repository can commit a symlink: `docs/leak.txt -> /proc/self/environ` once put the
daemon's environment (every key and token) into the search index, a context folder's prompt
and a skill's resources, while `check` said ok. Each case plants the same four files: a link to
/proc, a link out of the folder, `..` in a configured path, and a FIFO (which would hang the
reader); the knowledge case runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.knowledge_index import KnowledgeIndexer
from gateway import extensions
from gateway.messages import ChatKind
from gateway.ops import cli

from ..conftest import write_config
from .knowledge_script import SCRIPT, call, scripted_agent, world_on
from .support import Account, Place

ALICE = Account("slack", "T1", "U1", "alice")
DM_ALICE = Place("slack", "slack", "T1", "D1", ChatKind.DM)
OUTSIDE = "outside-secret-tangerine"
# A word of the environment the daemon started with, as /proc/self/environ shows it.
ENVIRON = Path("/proc/self/environ").read_bytes().decode(errors="replace")


def _plant(folder: Path, outside: Path) -> None:
    """The hostile entries, beside a good file."""
    outside.write_text(f"# Outside\n\n{OUTSIDE}\n")
    (folder / "leak.txt").symlink_to("/proc/self/environ")
    (folder / "escape.md").symlink_to(outside)
    os.mkfifo(folder / "pipe.txt")


def _check(cfg: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["check", "--config", str(cfg)])
    return code, capsys.readouterr().err


async def test_a_knowledge_collection_indexes_nothing_from_outside_and_check_names_it(
        tmp_path: Path, db_url: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy.md").write_text("# Travel\n\nReceipts within 30 days.\n")
    _plant(docs, tmp_path / "secret.md")
    gateway = {"knowledge": {"collections": {"docs": {"path": "docs"}}}}
    agents = {"assistant": scripted_agent({"id": "knowledge", "config": {"collections": ["docs"]}})}
    async with world_on(tmp_path, db_url, agents=agents, gateway=gateway) as w:
        indexer = next(e for e in w.gw.extensions if isinstance(e, KnowledgeIndexer))
        [report] = await indexer.refresh()
        assert report.indexed + report.unchanged == 1  # policy.md only (the indexer may have run at start)
        assert sorted(p.split(":")[0] for p in report.problems) == ["escape.md", "leak.txt", "pipe.txt"]
        await w.run(ALICE, DM_ALICE, call("search_documents", query="PATH or HOME or usr"))
        await w.run(ALICE, DM_ALICE, call("search_documents", query=OUTSIDE))
        await w.run(ALICE, DM_ALICE, call("search_documents", query="receipts"))
        environ, outside, good = SCRIPT.results
        assert "leak.txt" not in environ and "/usr/" not in environ
        assert outside.startswith("Nothing in the documents matched")
        assert "[docs/policy.md" in good
    code, err = _check(tmp_path, capsys)
    assert code == 0  # refused files are warnings: the rest of the collection is served
    assert "warning: knowledge.collections.docs.path: leak.txt: resolves to /proc/" in err
    assert "a system pseudo-file (a symlink); not indexed" in err
    assert f"escape.md: resolves to {(tmp_path / 'secret.md').resolve()}, outside {docs.resolve()} (a symlink)" in err
    assert "pipe.txt: is a FIFO, not a regular file; not indexed" in err


def test_a_context_folder_reads_nothing_from_outside_and_check_names_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path / "c", agents={"assistant": scripted_agent({"id": "context"})})
    folder = cfg / "context" / "assistant"
    folder.mkdir(parents=True)
    (folder / "style.md").write_text("Write short sentences.\n")
    _plant(folder, tmp_path / "secret.md")
    code, err = _check(cfg, capsys)
    assert code == 1
    assert f"{folder}/leak.txt: resolves to /proc/" in err and "(a symlink); not read" in err
    assert f"{folder}/escape.md: resolves to {(tmp_path / 'secret.md').resolve()}, outside" in err
    assert f"{folder}/pipe.txt: is a FIFO, not a regular file; not read" in err
    # A configured path with `..` climbs out of the folder: refused the same way.
    extensions.register_checks()
    cfg2 = write_config(tmp_path / "c2", agents={"assistant": scripted_agent(
        {"id": "context", "config": {"files": [{"path": "../../secret.md"}]}})})
    (cfg2 / "context" / "assistant").mkdir(parents=True)
    (cfg2 / "secret.md").write_text(OUTSIDE)
    with pytest.raises(ConfigError) as refused:
        load_config(cfg2)
    assert any("secret.md: resolves to" in str(p) and "outside" in str(p) for p in refused.value.problems), \
        refused.value.problems


async def test_context_never_injects_the_environment(tmp_path: Path) -> None:
    """The daemon's view: the good file is injected, nothing from the planted ones reaches the model."""
    agents = {"assistant": scripted_agent({"id": "context", "config": {"files": [
        {"path": "style.md"}, {"path": "leak.txt"}]}})}
    folder = tmp_path / "context" / "assistant"
    folder.mkdir(parents=True)
    (folder / "style.md").write_text("Write short sentences.\n")
    (folder / "leak.txt").symlink_to("/proc/self/environ")
    extensions.register_checks()
    write_config(tmp_path, agents=agents)
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path)
    assert any("leak.txt: resolves to /proc/" in str(p) for p in refused.value.problems)


def test_a_skill_ships_nothing_from_outside_and_check_names_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path / "c", agents={"assistant": scripted_agent(
        {"id": "skills", "config": {"skills": ["triage"]}})})
    skill = cfg / "skills" / "triage"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\ndescription: How to triage an incident.\n---\nRead the runbook.\n")
    (skill / "runbook.md").write_text("Step one.\n")
    _plant(skill, tmp_path / "secret.md")
    extensions.register_checks()
    resources = load_config(cfg).skills["triage"].resources
    assert set(resources) == {"runbook.md"}
    assert not any(ENVIRON[:20] in text for text in resources.values())
    # A skill whose SKILL.md is itself a link out of the library does not load.
    other = cfg / "skills" / "borrowed"
    other.mkdir()
    (tmp_path / "SKILL.md").write_text("---\ndescription: Borrowed.\n---\nbody\n")
    (other / "SKILL.md").symlink_to(tmp_path / "SKILL.md")
    code, err = _check(cfg, capsys)
    assert f"{skill}/leak.txt:1:1: warning: left out: resolves to /proc/" in err
    assert f"{skill}/escape.md:1:1: warning: left out: resolves to" in err
    assert f"{skill}/pipe.txt:1:1: warning: left out: is a FIFO, not a regular file" in err
    assert f"{other}/SKILL.md:1:1: not loaded: resolves to {(tmp_path / 'SKILL.md').resolve()}, outside" in err
