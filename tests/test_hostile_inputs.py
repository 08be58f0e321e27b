"""Hostile inputs never stall the event loop (docs/security.md, "Patterns and other work on the event loop").

The model (or a page or document steering it) chooses `grep`'s pattern, `glob`'s glob, the text
every renderer formats and `search_documents`' query; an admin's docs repository chooses the
documents. Each case below once froze the daemon for seconds to hours. The gateway runs in this
test's loop, and a probe beside it measures how late the loop runs a timer while every case is
tried: the assertion is on that lag, never on how long the work took.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.slack.render import markdown_to_mrkdwn
from adapters.telegram.render import markdown_to_html
from capabilities.knowledge_index import KnowledgeIndexer
from gateway.messages import ChatKind

from .capabilities.scripted import say_calls
from .capabilities.support import Account, Place, World, agent, slack_binding, world
from .support.loop_lag import own_lag

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
PROBE_EVERY = 0.005
MAX_LAG = 0.1

# Text the model writes (and every renderer formats): each once cost seconds per 32 KB line.
MARKDOWN = {
    "bold": "**a " * 8000,
    "bold_under": "__a " * 8000,
    "italic": "*a " * 11000,
    "strike": "~~a " * 8000,
    "links": "[a](" * 8000,
    "brackets": "[" * 32000,
    "images": "![" * 16000,
    "autolinks": "<http://" * 4000,
    "ticks": "`a" * 16000,
    "mixed": "**a __b ~~c *d _e `f [g](h " * 1200,
    "heading": "# a" + " " * 32000 + "b",
    "item": "- " + " " * 32000 + "x",
    "fence": "```" + " " * 16000 + "`" * 16000 + "x",  # gateway/markdown.py's FENCE looks ahead for a backtick
    "fences": "```\n" * 8000 + "~~~ x\n" * 4000,
}
DEEP = "/".join("d" for _ in range(80)) + "/x.txt"  # 80 folders deep


class LagProbe:
    """The largest delay the loop's own work put on a short timer while each case ran (a busy
    machine's delay not counted: `tests/support/loop_lag.py`)."""

    def __init__(self) -> None:
        self.case = "start"
        self.worst: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            lag = await own_lag(PROBE_EVERY)
            self.worst[self.case] = max(self.worst.get(self.case, 0.0), lag)

    def stalls(self) -> dict[str, float]:
        return {case: round(lag, 3) for case, lag in self.worst.items() if lag >= MAX_LAG}


@contextlib.asynccontextmanager
async def probing() -> AsyncIterator[LagProbe]:
    probe = LagProbe()
    task = asyncio.create_task(probe.run())
    await asyncio.sleep(PROBE_EVERY * 2)
    try:
        yield probe
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def said(w: World, *calls: tuple[str, dict[str, object]]) -> str:
    seen = await w.say(ALICE, DM, say_calls(*calls), timeout=60)
    out = seen.tool_results + seen.retries
    assert out, seen
    return out[-1]


def _hostile_documents(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "policy.md").write_text("# Travel\n\nReceipts within 30 days.\n")
    (root / "bold.md").write_text("# Bold\n\n" + MARKDOWN["bold"] + "\n")
    (root / "heading.md").write_text(MARKDOWN["heading"] + "\n\nbody\n")
    (root / "spaces.txt").write_text(("word " + " " * 5000) * 20 + "\n\n\n")
    (root / "page.html").write_text("<html><body><h1>" + "<b>" * 5000 + "x</h1>" + "<p>" * 5000 + "</body></html>")


async def test_no_hostile_input_stalls_the_loop(tmp_path: Path) -> None:
    _hostile_documents(tmp_path / "docs")
    agents = {"assistant": agent({"id": "sandbox"}, {"id": "knowledge", "config": {"collections": ["docs"]}},
                                 model="scripted")}
    gateway = {"knowledge": {"collections": {"docs": {"path": str(tmp_path / "docs")}}}}
    async with world(tmp_path / "c", agents=agents, bindings={"slack": slack_binding()}, gateway=gateway) as w:
        # The first turn builds the agent's tool schemas (once per process, not per input): not measured.
        assert await said(w, ("ls", {})) == "The workspace is empty."
        async with probing() as probe:
            probe.case = "indexing"
            indexer = next(e for e in w.gw.extensions if isinstance(e, KnowledgeIndexer))
            await indexer.refresh()  # the documents' text is an admin's repository's
            probe.case = "grep"
            # grep: a pattern that backtracks exponentially in Python's `re`.
            assert (await said(w, ("write_file", {"path": "r.txt", "content": "a" * 26 + "!"}))).startswith("Created")
            assert await said(w, ("grep", {"pattern": "(a+)+$"})) == "No match for '(a+)+$'."
            assert await said(w, ("grep", {"pattern": "(a|a)*(b|b)*c"})) == "No match for '(a|a)*(b|b)*c'."
            refused = await said(w, ("grep", {"pattern": r"(a)\1"}))
            assert "backreferences" in refused
            refused = await said(w, ("grep", {"pattern": "(x{1,999}){1,999}"}))
            assert "is not a regular expression grep can run" in refused
            assert "at most 1000 are searched" in await said(w, ("grep", {"pattern": "a" * 5000}))
            probe.case = "glob"
            # glob: repeated `**/` over a deep path once nested one `(?:.*/)?` per repeat.
            assert (await said(w, ("write_file", {"path": DEEP, "content": "x"}))).startswith("Created")
            glob = "**/" * 8 + "nomatch.txt"
            assert await said(w, ("glob", {"pattern": glob})) == f"No file matches {glob!r}."
            assert (await said(w, ("glob", {"pattern": "**/" * 8 + "x.txt"}))).startswith(DEEP)
            assert (await said(w, ("glob", {"pattern": "d/*/*/**/*.t?t"}))).startswith(DEEP)
            # Every renderer, on text the model writes.
            for name, text in MARKDOWN.items():
                probe.case = f"slack {name}"
                markdown_to_mrkdwn(text)
                await asyncio.sleep(PROBE_EVERY * 2)
                probe.case = f"telegram {name}"
                markdown_to_html(text)
                await asyncio.sleep(PROBE_EVERY * 2)
            probe.case = "search_documents"
            # search_documents: hostile queries over hostile documents.
            assert "[docs/policy.md" in await said(w, ("search_documents", {"query": "receipts"}))
            assert "at most 1,000 are searched" in await said(w, ("search_documents", {"query": "a " * 5000}))
            assert "at most 32 are searched" in await said(w, ("search_documents", {"query": "receipts " * 40}))
            for query in ("(a+)+$", '"' * 999, "-" * 999, "or " * 300 + "receipts", "**a " * 240,
                          " ".join(f"w{i}" for i in range(32))):
                await said(w, ("search_documents", {"query": query}))
            await asyncio.sleep(PROBE_EVERY * 2)
        assert probe.stalls() == {}, "the loop stalled (seconds, by case)"
