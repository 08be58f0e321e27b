"""One chromium for a test process's browser tests, a fresh context (a new profile) for each test.

Playwright drives Debian's chromium (`/usr/bin/chromium`), never a downloaded browser: the machines
running the suite have no network. `make test` installs it when it is missing; without it a
browser test fails (a skipped browser test would hide a broken page).

Each test used to start Playwright's driver and launch chromium with a profile of its own: about
1 s of CPU a test before its page loaded, ~0.3 s with the browser shared (8 pages measured each
way: 8.2 s -> 2.3 s of the children's CPU). A context is what a new profile was: its own cookies,
storage and cache, closed with the test. The browser tests all run on one worker (xdist_group
"browser", tests/conftest.py) and on the worker's one event loop (`BROWSER_LOOP`), which the
Playwright objects belong to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

if TYPE_CHECKING:
    from playwright.async_api import Browser

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

# A browser test module's `pytestmark`: its tests run on the loop the shared browser was started on.
BROWSER_LOOP = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium() -> AsyncIterator[Browser]:
    """The test process's chromium, started by the first browser test that asks for it."""
    from playwright.async_api import async_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`, "
                    "or run `make test`, which does it). Do not use `playwright install`.")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()
