"""The web page in a real browser: type, watch the answer stream in, reload, still there.

Playwright drives Debian's chromium (`/usr/bin/chromium`), never a downloaded browser: the
machines running the suite have no network. `make test` installs chromium when it is missing;
without it this test fails (a skipped browser test would hide a broken page).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page, async_playwright, expect
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs.llm import register_model

from .conftest import running_gateway, write_config

CHROMIUM = Path("/usr/bin/chromium")
# Without these, a headless chromium on a machine with no network stalls on start-up chores.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHUNKS = ["Streaming ", "answer ", "arrives ", "in **pieces**, ", "then it ", "is done."]
FINAL = "Streaming answer arrives in pieces, then it is done."  # as rendered (bold is markup)
WAIT = 10_000  # ms: generous ceilings for Playwright's polling, not timing assertions

# Records every text an assistant bubble showed, so the test can tell a partial answer was seen.
RECORD_TEXTS = """
window.__seen = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.msg.assistant')) {
    const t = el.textContent;
    if (t && window.__seen[window.__seen.length - 1] !== t) window.__seen.push(t);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


async def _slow_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """Several chunks with pauses between them, so the page shows a partial answer first."""
    for chunk in CHUNKS:
        yield chunk
        await asyncio.sleep(0.12)


def _launch_args(profile: Path) -> dict[str, object]:
    return {
        "user_data_dir": str(profile),
        "executable_path": str(CHROMIUM),
        "headless": True,
        "args": CHROMIUM_ARGS,
    }


@pytest.mark.browser
async def test_page_streams_answer_and_keeps_it_after_reload(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`, "
            "or run `make test`, which does it). Do not use `playwright install`."
        )
    register_model("browser-stream", lambda: FunctionModel(stream_function=_slow_stream, model_name="browser-stream"))
    cfg = write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Browser test agent", "model": "browser-stream", "instructions": "Test."}},
    )
    async with running_gateway(cfg) as gw, async_playwright() as pw:
        context: BrowserContext = await pw.chromium.launch_persistent_context(**_launch_args(tmp_path / "profile"))
        try:
            page: Page = context.pages[0] if context.pages else await context.new_page()
            await page.add_init_script(RECORD_TEXTS)
            await page.goto(gw.url + "/")
            await expect(page).to_have_url(re.compile(r"#\w+"), timeout=WAIT)  # a conversation is open
            conversation = page.url.split("#", 1)[1]

            box = page.locator("textarea#text")
            await box.fill("hello from the browser")
            await box.press("Enter")

            user = page.locator(".msg.user")
            await expect(user).to_have_text("hello from the browser", timeout=WAIT)
            done = page.locator(".msg.assistant:not(.streaming)")
            await expect(done).to_have_text(FINAL, timeout=WAIT)
            await expect(page.locator(".msg.assistant strong")).to_have_text("pieces")

            seen: list[str] = await page.evaluate("window.__seen")
            partial = [t for t in seen if t and t != FINAL]
            assert partial, f"no partial answer was shown before the final text; saw {seen!r}"
            assert all(FINAL.startswith(t.rstrip()) for t in partial), f"a partial text is not a prefix: {seen!r}"
            await expect(box).to_have_value("")
            await page.screenshot(path="/tmp/webchat.png")

            await page.reload()
            assert page.url.endswith("#" + conversation)
            await expect(page.locator(".msg.user")).to_have_text("hello from the browser", timeout=WAIT)
            await expect(page.locator(".msg.assistant")).to_have_text(FINAL, timeout=WAIT)
            await expect(page.locator(".msg.assistant.streaming")).to_have_count(0)
        finally:
            await context.close()
