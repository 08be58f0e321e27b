"""The web chat as a place to live in, in the real browser (Debian's chromium): commands and their
answers kept, Markdown drawn safely (answers are model output: hostile), the sidebar of the
person's conversations, and how the page looks in light and dark."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text

from gateway.runs.llm import register_model
from gateway.store.notes import NoteStore, Scope

from .conftest import running_gateway, write_config
from .support.browser import BROWSER_LOOP

pytestmark = BROWSER_LOOP

WAIT = 10_000  # ms: a ceiling for Playwright's polling, not a timing assertion
SHOTS = Path("/tmp/webchat-shots")

TABLE = """Here are the fruits:

| Fruit | Colour | Count |
|:------|:------:|------:|
| apple | red    | 3     |
| pear  | green  | 12    |

- [x] bought
- [ ] eaten

```python
print("hello")
```"""

# Everything a hostile answer might try; each sets a flag if it ever runs.
HOSTILE = """<script>window.__pwned = "script"</script>

<img src="x" onerror="window.__pwned = 'onerror'"> and <b onmouseover="window.__pwned='hover'">bold?</b>

[click me](javascript:window.__pwned='link') · [or me](JaVaScRiPt:window.__pwned='caps')
[tab](java\tscript:window.__pwned='tab') · [data](data:text/html,<script>parent.__pwned='data'</script>)
![pic](javascript:window.__pwned='image') <javascript:window.__pwned='auto'>

[a safe one](https://example.org/a?b=c)"""


def _last_prompt(messages: list[ModelMessage]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            for part in m.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


# "slowly": the reply streams "one", then "two" once the test sets the first event, and ends at the second.
HOLD: list[asyncio.Event] = []


async def _answers(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    said = _last_prompt(messages)
    if said == "slowly" and HOLD:
        yield "one"
        await HOLD[0].wait()
        yield " two"
        await HOLD[1].wait()
        return
    yield TABLE if "table" in said else HOSTILE if "hostile" in said else f"You said: {said}"


def _config(tmp_path: Path) -> Path:
    register_model("browser-chat", lambda: FunctionModel(stream_function=_answers, model_name="browser-chat"))
    return write_config(tmp_path / "config", agents={"assistant": {"name": "Chat", "model": "browser-chat"}})


async def _send(page: Page, words: str) -> None:
    box = page.locator("textarea#text")
    await box.fill(words)
    await box.press("Enter")
    await expect(box).to_have_value("", timeout=WAIT)
    await expect(box).to_be_focused()  # ready for the next message, from the keyboard


async def _open(context: BrowserContext, url: str) -> Page:
    page = context.pages[0] if context.pages else await context.new_page()
    await page.goto(url + "/")
    await page.wait_for_url("**/#*", timeout=WAIT)
    return page


@pytest.mark.browser
async def test_help_is_a_list_and_the_memory_card_stays_after_the_next_message_and_a_reload(chromium: Browser, tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path)) as gw:
        person = (await gw.store.identify("web", "local", "local", "local")).person_id
        await NoteStore(gw.store).write(Scope("assistant", "person", person), "tea.md", "green, no sugar")
        context = await chromium.new_context()
        try:
            page = await _open(context, gw.url)
            await _send(page, "/help")
            help_items = page.locator(".notice ul > li")
            await expect(help_items.first).to_be_visible(timeout=WAIT)
            assert await help_items.count() >= 6
            await expect(page.locator(".notice ul > li code").first).to_have_text("/help")
            await expect(page.locator(".notice")).not_to_contain_text("`")  # no literal backticks

            await _send(page, "/memory")
            card = page.locator(".card.memory")
            await expect(card).to_have_count(1, timeout=WAIT)
            await expect(card).to_contain_text("tea.md")
            await expect(page.locator(".msg.command")).to_have_text(["/help", "/memory"])

            await _send(page, "and now something else")
            await expect(page.locator(".msg.assistant")).to_have_text("You said: and now something else",
                                                                      timeout=WAIT)
            await expect(card).to_have_count(1)
            await expect(card).to_contain_text("tea.md")
            await page.reload()
            await expect(page.locator(".msg.assistant")).to_have_count(1, timeout=WAIT)
            await expect(page.locator(".card.memory")).to_contain_text("tea.md")
            await expect(page.locator(".notice ul > li").first).to_be_visible()
            # Its buttons still work after the reload.
            await page.locator(".card.memory button", has_text="Stop using").first.click()
            await expect(page.locator(".card.memory button", has_text="Use again")).to_have_count(1, timeout=WAIT)
            await expect(page.locator(".card.memory code", has_text="assistant/tea.md")).to_have_count(2)
        finally:
            await context.close()


@pytest.mark.browser
async def test_tables_task_lists_code_render_and_a_hostile_answer_runs_nothing(chromium: Browser, tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path)) as gw:
        context = await chromium.new_context()
        try:
            page = await _open(context, gw.url)
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            await _send(page, "show me a table")
            answer = page.locator(".msg.assistant").last
            await expect(answer.locator("table th")).to_have_text(["Fruit", "Colour", "Count"], timeout=WAIT)
            await expect(answer.locator("table tbody tr")).to_have_count(2)
            await expect(answer.locator("table tbody tr").last.locator("td")).to_have_text(["pear", "green", "12"])
            assert await answer.locator("td").last.evaluate("td => td.style.textAlign") == "right"
            boxes = answer.locator("li.task input[type=checkbox]")
            assert [await b.is_checked() for b in await boxes.all()] == [True, False]
            await expect(answer.locator(".code pre code")).to_have_text('print("hello")')
            await expect(answer.locator(".code button.copy")).to_have_accessible_name("Copy the code")

            await _send(page, "now something hostile")
            hostile = page.locator(".msg.assistant").last
            await expect(hostile.locator("a", has_text="a safe one")).to_have_count(1, timeout=WAIT)
            # The markup shows as the text it is; nothing of it became an element.
            await expect(hostile).to_contain_text('<script>window.__pwned = "script"</script>')
            await expect(hostile).to_contain_text("<img src=\"x\" onerror=")
            for selector in ("script", "img", "iframe", "b", "[onerror]", "[onmouseover]", "[style*=url]"):
                assert await hostile.locator(selector).count() == 0, selector
            hrefs = await hostile.locator("a").evaluate_all("as => as.map(a => a.href)")
            assert hrefs == ["https://example.org/a?b=c"], hrefs
            safe = hostile.locator("a")
            assert await safe.get_attribute("target") == "_blank"
            assert "noopener" in (await safe.get_attribute("rel") or "")
            attributes = await hostile.evaluate("m => [...m.querySelectorAll('*')].flatMap(e => [...e.attributes]"
                                                ".map(a => a.name))")
            assert not [a for a in attributes if a.startswith("on") or a in ("src", "srcdoc", "style")], attributes
            for paragraph in (await hostile.locator("p").all())[:-1]:  # where the would-be links are
                await paragraph.click()
            await hostile.hover()
            assert await page.evaluate("window.__pwned") is None
            await page.reload()
            await expect(page.locator(".msg.assistant a", has_text="a safe one")).to_have_count(1, timeout=WAIT)
            assert await page.evaluate("window.__pwned") is None
            assert dialogs == []
        finally:
            await context.close()


@pytest.mark.browser
async def test_a_message_typed_before_the_page_is_listening_still_gets_its_reply(chromium: Browser, tmp_path: Path) -> None:
    """The page opens a conversation's event stream after drawing it; a person who types at once must not
    lose the reply to a stream not yet open (it went to no one: neither it nor the run's end came)."""
    async with running_gateway(_config(tmp_path)) as gw:
        context = await chromium.new_context()
        try:
            page = context.pages[0] if context.pages else await context.new_page()

            async def slow_token(route: Any) -> None:
                await asyncio.sleep(1.5)  # pacing only: the stream opens late, as on a slow link
                await route.continue_()

            await page.route("**/api/v1/stream-tokens", slow_token)
            await page.goto(gw.url + "/")
            await page.wait_for_url("**/#*", timeout=WAIT)
            await _send(page, "typed at once")
            await expect(page.locator(".msg.assistant")).to_have_text("You said: typed at once", timeout=WAIT)
            await expect(page.locator(".msg.user")).to_have_text("typed at once")
        finally:
            await context.close()


@pytest.mark.browser
async def test_two_conversations_in_the_sidebar_switching_and_deleting_one(chromium: Browser, tmp_path: Path) -> None:
    async with running_gateway(_config(tmp_path)) as gw:
        context = await chromium.new_context()
        try:
            page = await _open(context, gw.url)
            await _send(page, "about apples")
            await expect(page.locator(".msg.assistant")).to_have_text("You said: about apples", timeout=WAIT)
            first = page.url.split("#", 1)[1]
            await page.locator("header").get_by_role("button", name="New conversation").click()
            await expect(page.locator(".msg")).to_have_count(0, timeout=WAIT)
            await _send(page, "about pears")
            await expect(page.locator(".msg.assistant")).to_have_text("You said: about pears", timeout=WAIT)
            second = page.url.split("#", 1)[1]
            assert first != second

            entries = page.locator("#conversations li .title")
            await expect(entries).to_have_text(["about pears", "about apples"], timeout=WAIT)
            await expect(page.locator("#conversations li.current .title")).to_have_text("about pears")
            await page.locator("#conversations button.open", has_text="about apples").click()
            await expect(page.locator(".msg.user")).to_have_text("about apples", timeout=WAIT)
            await expect(page.locator(".msg.assistant")).to_have_text("You said: about apples")
            await page.locator("#conversations button.open", has_text="about pears").click()
            await expect(page.locator(".msg.user")).to_have_text("about pears", timeout=WAIT)

            # Search goes through the full-text index.
            await page.get_by_role("searchbox", name="Search conversations").fill("apples")
            await expect(entries).to_have_text(["about apples"], timeout=WAIT)
            await page.get_by_role("searchbox", name="Search conversations").fill("")
            await expect(entries).to_have_count(2, timeout=WAIT)

            page.on("dialog", lambda d: d.accept())
            await page.get_by_role("button", name="Delete “about apples”").click()
            await expect(entries).to_have_text(["about pears"], timeout=WAIT)
            await page.reload()
            await expect(page.locator("#conversations li .title")).to_have_text(["about pears"], timeout=WAIT)
            async with gw.store.sessions() as s:
                assert await s.scalar(text("SELECT count(*) FROM conversations WHERE id = :c"), {"c": first}) == 0
                assert await s.scalar(text("SELECT count(*) FROM messages WHERE conversation_id = :c"),
                                      {"c": first}) == 0
                assert await s.scalar(text("SELECT count(*) FROM messages WHERE conversation_id = :c"),
                                      {"c": second}) == 2
        finally:
            await context.close()


@pytest.mark.browser
async def test_screenshots_light_dark_and_narrow(chromium: Browser, tmp_path: Path) -> None:
    """Not an assertion of looks: pictures to look at (SHOTS), and the narrow layout's menu works."""
    SHOTS.mkdir(exist_ok=True)
    async with running_gateway(_config(tmp_path)) as gw:
        context = await chromium.new_context()
        try:
            page = await _open(context, gw.url)
            await _send(page, "/help")
            await _send(page, "a table please")
            await expect(page.locator(".msg.assistant table")).to_have_count(1, timeout=WAIT)
            await expect(page.locator("#conversations li")).to_have_count(1, timeout=WAIT)
            for scheme in ("light", "dark"):
                await page.emulate_media(color_scheme=scheme)
                await page.set_viewport_size({"width": 1100, "height": 800})
                await page.screenshot(path=str(SHOTS / f"{scheme}.png"))
            background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == "rgb(21, 23, 27)"  # the dark theme follows the system's setting
            await page.set_viewport_size({"width": 380, "height": 740})
            await expect(page.locator("#sidebar")).to_be_hidden()
            await page.screenshot(path=str(SHOTS / "narrow.png"))
            await page.get_by_role("button", name="Show conversations").click()
            await expect(page.locator("#sidebar")).to_be_visible()
            await page.screenshot(path=str(SHOTS / "narrow-sidebar.png"))
        finally:
            await context.close()


@pytest.mark.browser
async def test_a_page_reloaded_while_a_reply_streams_goes_on_drawing_it_in_one_bubble(chromium: Browser, tmp_path: Path) -> None:
    """After a reload the listing draws the reply so far; the deltas that follow redraw that bubble
    (they name its message), never start a second one beside it, and none is lost to a stream that opens late."""
    HOLD[:] = [asyncio.Event(), asyncio.Event()]
    async with running_gateway(_config(tmp_path)) as gw:
        context = await chromium.new_context()
        try:
            page = await _open(context, gw.url)
            await _send(page, "slowly")
            replies = page.locator(".msg.assistant")
            await expect(replies).to_have_text(["one"], timeout=WAIT)

            async def slow_token(route: Any) -> None:
                await asyncio.sleep(1.5)  # pacing only: the reloaded page's stream opens late, as on a slow link
                await route.continue_()

            # A word streamed while the reloaded page has its listing but not yet its stream must still come:
            # the page connects its stream before it reads the listing (read the other way round, it was lost).
            await page.route("**/api/v1/stream-tokens", slow_token)
            await page.reload()
            await expect(replies).to_have_text(["one"], timeout=WAIT)
            await expect(replies).to_have_class("msg assistant streaming")
            HOLD[0].set()
            await expect(replies).to_have_text(["one two"], timeout=WAIT)
            HOLD[1].set()
            await expect(page.locator(".msg.assistant.final")).to_have_text(["one two"], timeout=WAIT)
            await expect(replies).to_have_count(1)
        finally:
            HOLD.clear()
            await context.close()
