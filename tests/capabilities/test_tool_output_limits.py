"""tool_output_limits: a 1 MB MCP result is spilled, paged back, and gone when the run ends; refusals truncate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bindings.loader import ConfigError, load_config
from capabilities import tool_output_limits
from capabilities.tool_output_limits import CAPABILITY, MAX_SPILL_BYTES, RunSpills, SpillRefused
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store.engine import open_store
from gateway.store.models import CapabilityStateRow

from ..conftest import write_config
from .shaping_script import SCRIPT, Call, call, chat_text, mcp_server, say
from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
HANDLE = re.compile(r"stored to handle '([^']+)'")


def _agent(config: dict[str, object] | None = None, **server: object) -> dict[str, object]:
    spec = agent({"id": "tool_output_limits", "config": config or {}}, model="shaping-scripted")
    spec["mcp_servers"] = [mcp_server("files", tools={"listing": "allow"}, **server)]
    return spec


def _read_back(**args: object) -> object:
    def step(messages: list[object]) -> Call:
        match = next(m for r in SCRIPT.requests for t in r.tool_results() if (m := HANDLE.search(t)))
        return Call("read_tool_result", {"handle": match.group(1), **args})
    return step


async def _spill_rows(w: object) -> int:
    from sqlalchemy import func, select

    async with w.gw.store.sessions() as s:  # type: ignore[attr-defined]
        return await s.scalar(select(func.count()).select_from(CapabilityStateRow)
                              .where(CapabilityStateRow.capability == CAPABILITY))


async def test_a_one_megabyte_mcp_result_is_spilled_paged_back_and_gone_after_the_run(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": _agent()}) as w:
        SCRIPT.reset(call("files_listing", rows=10_000), _read_back(offset=0, limit=3), _read_back(from_end=True, limit=2),
                     _read_back(pattern="row 0009999:"), say("the listing has 10,000 rows"))
        await w.say(ALICE, DM, "list the files", timeout=60)
        first, head, tail, grep, last = SCRIPT.requests
        [preview] = head.tool_results()
        assert len(preview) < 3_000, "the model never carries the 1 MB return"
        assert "[Tool output too large (1,059,999 chars)" in preview and "read_tool_result" in preview
        assert all(len(r.tool_results()[0]) < 3_000 for r in (tail, grep))
        assert tail.tool_results()[0].splitlines()[1].startswith("row 0000000:")
        assert grep.tool_results()[0].splitlines()[1:] == [f"row {i:07d}: /srv/data/{i:07d}.bin " + "x" * 70
                                                           for i in (9998, 9999)]
        [found] = last.tool_results()
        assert found.startswith("[handle ") and "1 matching line(s); showing 1]" in found
        assert "read_tool_result" in first.tools and "files_listing" in first.tools
        # The spill lived in the store for the run, and went with it.
        assert await _spill_rows(w) == 0
        assert "the listing has 10,000 rows" in chat_text(w)


async def test_a_spill_the_store_refuses_is_truncated_never_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The ceiling lowered to 256 KB so that a 320 KB return is over it: what is refused is the point, not
    # the 8 MB (9 MB through the stdio server took 4 s of CPU, 320 KB 1.6 s). The real ceiling's
    # refusal: test_spills_are_shared_by_replicas_kept_per_run_and_binary_safe.
    monkeypatch.setattr(tool_output_limits, "MAX_SPILL_BYTES", 256 * 1024)
    spec = _agent({"max_chars": 2000, "truncation_strategy": "head"})
    async with world(tmp_path, agents={"assistant": spec}) as w:
        SCRIPT.reset(call("files_listing", rows=3_000), say("ok"))  # ~320 KB: over the (lowered) ceiling
        await w.say(ALICE, DM, "list everything")
        [result] = SCRIPT.requests[1].tool_results()
        assert len(result) <= 2000 and result.startswith("row 0000000:")
        assert "truncated: showing first" in result
        assert await _spill_rows(w) == 0


async def test_truncate_and_a_threshold_below_which_nothing_changes(tmp_path: Path) -> None:
    config = {"action": "truncate", "threshold": 5000, "max_chars": 1000}
    async with world(tmp_path, agents={"assistant": _agent(config)}) as w:
        SCRIPT.reset(call("files_listing", rows=40), call("files_listing", rows=60), say("ok"))
        await w.say(ALICE, DM, "two listings")
        small, big = SCRIPT.requests[1].tool_results()[0], SCRIPT.requests[2].tool_results()[0]
        assert len(small) == 40 * 106 - 1, "under the threshold a return passes untouched"
        assert len(big) <= 1000 and "truncated" in big and big.rstrip().endswith("x" * 20)


def test_bad_config_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: tool_output_limits\n    config:\n"
                    "      action: drop\n      threshold: 10\n      summary_prompt: 'summarise {output}'\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = [str(p) for p in e.value.problems if not p.warning]
    assert problems[0].startswith(f"{path}:6:7: capabilities.0.config.action: Input should be 'spill', 'truncate' "
                                  "or 'summarize'")
    assert problems[1] == f"{path}:7:7: capabilities.0.config.threshold: Input should be greater than or equal to 100"
    assert problems[2] == (f"{path}:8:7: capabilities.0.config.summary_prompt: summary_prompt must contain "
                           "{tool_name} and {output}; it lacks {tool_name}")


async def test_spills_are_shared_by_replicas_kept_per_run_and_binary_safe(pg_url: str) -> None:
    """Two stores on one PostgreSQL database are two replicas: a spill one writes, the other reads."""
    text = ("row: café ✓\n" * 90_000).encode()  # ~1.2 MB of UTF-8
    binary = bytes(range(256)) * 64 + b"\x00tail"
    async with open_store(pg_url) as a, open_store(pg_url) as b:
        here, there = RunSpills(a.capability_state, "run-1"), RunSpills(b.capability_state, "run-1")
        assert await there.read(await here.write("run-1/call-1.0", text)) == text
        assert await there.read(await here.write("run-1/call-2.0", binary)) == binary
        with pytest.raises(FileNotFoundError):
            await RunSpills(b.capability_state, "run-2").read("run-1/call-1.0")  # another run's handle reads nothing
        with pytest.raises(SpillRefused):
            await here.write("run-1/call-3.0", b"x" * (MAX_SPILL_BYTES + 1))
        assert await there.discard() == 2
        with pytest.raises(FileNotFoundError):
            await here.read("run-1/call-1.0")
