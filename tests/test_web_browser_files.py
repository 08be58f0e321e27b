"""The web page's attach button and drag-and-drop, in a real browser (Debian's chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect
from pydantic_ai.messages import BinaryContent

from gateway.runs.llm import register_model
from tests.support.files_model import CSV, Recorder

from .conftest import running_gateway, wait_for, write_config
from .support.browser import BROWSER_LOOP

pytestmark = BROWSER_LOOP

WAIT = 10_000  # ms: a ceiling for Playwright's polling, not a timing assertion

# Drops a small PNG on the page the way a file dragged from the desktop arrives.
DROP_PNG = """
const bytes = Uint8Array.from(atob("iVBORw0KGgo="), (c) => c.charCodeAt(0));
const data = new DataTransfer();
data.items.add(new File([bytes], "dropped.png", {type: "image/png"}));
for (const type of ["dragover", "drop"]) {
  document.dispatchEvent(new DragEvent(type, {dataTransfer: data, bubbles: true, cancelable: true}));
}
"""


@pytest.mark.browser
async def test_files_attached_by_button_and_by_drop_reach_the_model(chromium: Browser, tmp_path: Path) -> None:
    recorder = Recorder()
    register_model("browser-files", recorder.model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "Files", "model": "browser-files"}})
    (tmp_path / "q3.csv").write_bytes(CSV)
    async with running_gateway(config) as gw:
        context = await chromium.new_context()
        try:
            page = await context.new_page()
            await page.goto(gw.url + "/")
            await page.wait_for_url("**/#*", timeout=WAIT)
            await page.locator("input#files").set_input_files(str(tmp_path / "q3.csv"))
            await page.evaluate(DROP_PNG)
            await expect(page.locator("#attached .chip")).to_have_count(2, timeout=WAIT)
            await page.locator("textarea#text").fill("what are these?")
            await page.locator("button#send").click()
            await expect(page.locator(".msg.assistant")).to_have_text("Got it.", timeout=WAIT)
            await expect(page.locator("#attached .chip")).to_have_count(0)
        finally:
            await context.close()
    await wait_for(lambda: recorder.requests, what="the model")
    text, table, image = recorder.last_prompt()
    assert text.startswith("what are these?") and "q3.csv" in text and "dropped.png" in text
    assert table.startswith('<file name="q3.csv" type="text/csv">')
    assert isinstance(image, BinaryContent) and image.media_type == "image/png" and image.data.startswith(b"\x89PNG")
