"""An approval card in the real page shows every argument before the decision: a head at a glance, and
all of it behind "show all arguments" (docs/security.md, "Approval cards and decisions")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from .conftest import running_gateway, wait_for
from .support.plugin_ops import RAN
from .test_approvals import _config
from .support.browser import BROWSER_LOOP
from .test_web_browser import WAIT

pytestmark = BROWSER_LOOP

LONG = "staging" + " " * 1600 + "AND-ALSO-PROD"


@pytest.mark.browser
async def test_the_page_shows_every_argument_of_a_long_call_before_it_is_approved(chromium: Browser, tmp_path: Path) -> None:
    RAN.clear()
    async with running_gateway(_config(tmp_path / "c")) as gw:
        context = await chromium.new_context()
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            await page.goto(gw.url + "/")
            await expect(page).to_have_url(re.compile(r"#\w+"), timeout=WAIT)
            box = page.locator("textarea#text")
            await box.fill("deploy " + json.dumps({"service": LONG}))
            await box.press("Enter")

            card = page.locator(".card").last
            more = card.locator("details summary")
            await expect(more).to_contain_text("more characters: show all arguments", timeout=WAIT)
            full = card.locator("pre.full")
            await expect(full).to_be_hidden()
            await more.click()
            await expect(full).to_be_visible()
            assert json.loads(await full.text_content() or "") == {"service": LONG}, "the page cut the arguments"
            assert RAN == []

            await card.locator("button[data-decision=approve]").click()
            await wait_for(lambda: RAN == [("deploy", LONG)] or None, what="the tool to run")
        finally:
            await context.close()
