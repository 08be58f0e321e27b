"""The web page in a real browser: type, watch the answer stream in, reload, still there.

Debian's chromium, one per test process, a fresh context each test (tests/support/browser.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Browser, BrowserContext, Page, Request, expect
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs.llm import register_model
from gateway.store.notes import NoteStore, Scope

from .conftest import running_gateway, write_config
from .support.browser import BROWSER_LOOP, CHROMIUM, CHROMIUM_ARGS

pytestmark = BROWSER_LOOP

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
    """A chromium of its own with `profile`, for the browser tests that still launch one (those of
    tests/capabilities/, on the test's own loop); the tests here take the shared `chromium`."""
    return {"user_data_dir": str(profile), "executable_path": str(CHROMIUM), "headless": True, "args": CHROMIUM_ARGS}


@pytest.mark.browser
async def test_page_streams_answer_and_keeps_it_after_reload(chromium: Browser, tmp_path: Path) -> None:
    register_model("browser-stream", lambda: FunctionModel(stream_function=_slow_stream, model_name="browser-stream"))
    cfg = write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Browser test agent", "model": "browser-stream", "instructions": "Test."}},
    )
    async with running_gateway(cfg) as gw:
        context: BrowserContext = await chromium.new_context()
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


ATTACKER_PAGE = """<!doctype html><script>
window.done = (async () => {
  const erase = JSON.stringify({action: "erase"});
  const sent = [];
  for (const [path, type, body] of [["/api/v1/me/memory", "text/plain", erase],
                                    ["/api/v1/me/memory", "application/x-www-form-urlencoded", "action=erase"],
                                    ["/api/v1/conversations", "text/plain", ""]]) {
    try { await fetch(TARGET + path, {method: "POST", mode: "no-cors", headers: {"Content-Type": type}, body}); sent.push(path); }
    catch (e) { sent.push("failed " + path); }
  }
  return sent;
})();
</script>"""


@pytest.mark.browser
async def test_with_a_token_the_page_streams_through_a_stream_token_and_another_site_changes_nothing(
        chromium: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's own requests carry the token in a header; its event stream opens with a stream
    token (never the API token in a URL) and the reply arrives. A page on another origin, in the
    same browser, sends the "simple" POSTs of issue 29: nothing is erased, nothing created."""
    token = "browser-s3cret"
    monkeypatch.setenv("GW_BROWSER_TOKEN", token)
    register_model("browser-stream", lambda: FunctionModel(stream_function=_slow_stream, model_name="browser-stream"))
    cfg = write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Browser test agent", "model": "browser-stream", "instructions": "Test."}},
        gateway={"http": {"listen": "127.0.0.1:0", "api_token": "env:GW_BROWSER_TOKEN"}},
    )
    async def attacker_page(request: web.Request) -> web.Response:  # another origin: another port
        return web.Response(text=ATTACKER_PAGE.replace("TARGET", repr(gw_url)), content_type="text/html")

    attacker = web.Application()
    attacker.router.add_get("/", attacker_page)
    async with running_gateway(cfg) as gw:
        gw_url = gw.url
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        await NoteStore(gw.store).write(Scope("assistant", "person", person), "tea.md", "green")
        runner = web.AppRunner(attacker)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        attacker_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        context: BrowserContext = await chromium.new_context()
        try:
            page: Page = context.pages[0] if context.pages else await context.new_page()
            await page.add_init_script(f"localStorage.setItem('agent-gateway-token', {token!r});")
            urls: list[str] = []
            authorized: list[bool] = []

            def seen(request: Request) -> None:
                if "/api/" in request.url:
                    urls.append(request.url)
                    authorized.append(request.headers.get("authorization") == f"Bearer {token}")

            page.on("request", seen)
            await page.goto(gw.url + "/")
            await expect(page).to_have_url(re.compile(r"#\w+"), timeout=WAIT)
            box = page.locator("textarea#text")
            await box.fill("hello with a token")
            await box.press("Enter")
            await expect(page.locator(".msg.assistant:not(.streaming)")).to_have_text(FINAL, timeout=WAIT)
            streams = [u for u in urls if "/events" in u]
            assert streams and all("stream_token=" in u for u in streams), urls
            assert not any(token in u or "access_token" in u for u in urls), "the API token went into a URL"
            assert all(ok for u, ok in zip(urls, authorized, strict=True) if "/events" not in u), urls

            evil = await context.new_page()
            await evil.goto(f"http://127.0.0.1:{attacker_port}/")
            sent = await evil.evaluate("window.done")
            assert len(sent) == 3 and not any(s.startswith("failed") for s in sent), sent  # they did go out
            assert [n.name for n in await NoteStore(gw.store).about(person)] == ["tea.md"]
            async with gw.store.sessions() as s:
                from sqlalchemy import func, select

                from gateway.store.models import Conversation

                assert await s.scalar(select(func.count()).select_from(Conversation)) == 1, "another site made one"
        finally:
            await context.close()
            await runner.cleanup()
