"""The fake Bot API's own contract, checked over HTTP the way any client would see it."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.fakes.telegram import FakeTelegram, parse_html


async def _call(fake: FakeTelegram, method: str, **form: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake.api_url}{fake.token}/{method}", data=form) as resp:
            return resp.status, await resp.json()


async def test_form_encoded_send_and_error_shapes() -> None:
    async with FakeTelegram(budget_scale=0) as fake:  # calls in quick succession: budgets are tested elsewhere
        ada = fake.user(42, "Ada")
        fake.private_chat(ada)
        status, body = await _call(fake, "sendMessage", chat_id="42", text="123",
                                   reply_markup='{"inline_keyboard": [[{"text": "ok", "callback_data": "a:x"}]]}')
        assert status == 200 and body["ok"] is True
        assert body["result"]["text"] == "123"  # a numeric-looking text stays text
        assert fake.sent(42)[0].buttons == [{"text": "ok", "callback_data": "a:x"}]

        status, body = await _call(fake, "sendMessage", chat_id="42", text="x", reply_markup=(
            '{"inline_keyboard": [[{"text": "ok", "callback_data": "' + "x" * 65 + '"}]]}'))
        assert (status, body["ok"], body["error_code"]) == (400, False, 400)
        assert body["description"] == "Bad Request: BUTTON_DATA_INVALID"

        fake.fail_next("sendMessage", retry_after=7)
        status, body = await _call(fake, "sendMessage", chat_id="42", text="x")
        assert status == 429 and body["parameters"] == {"retry_after": 7}


async def test_get_updates_confirms_with_offset_and_long_polls() -> None:
    async with FakeTelegram(budget_scale=0) as fake:  # calls in quick succession: budgets are tested elsewhere
        ada = fake.user(42, "Ada")
        fake.private_chat(ada)
        first, _ = fake.push_message(42, ada, "one")
        second, _ = fake.push_message(42, ada, "two")
        _, body = await _call(fake, "getUpdates")
        assert [u["update_id"] for u in body["result"]] == [first, second]
        _, body = await _call(fake, "getUpdates", offset=str(second))  # confirms `first` only
        assert [u["update_id"] for u in body["result"]] == [second]
        assert fake.confirmed_through == first

        poll = asyncio.create_task(_call(fake, "getUpdates", offset=str(second + 1), timeout="10"))
        await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 3)
        third, _ = fake.push_message(42, ada, "three")
        _, body = await poll
        assert [u["message"]["text"] for u in body["result"]] == ["three"]
        assert body["result"][0]["update_id"] == third


def test_html_check_matches_telegram_rules() -> None:
    assert parse_html('<b>a</b> &lt;&amp;&gt; <a href="https://x.y/?a=1&amp;b=2">l</a>') == "a <&> l"
    for bad in ("<b>open", "<p>x</p>", "a & b", "<b><i>x</b></i>", "x < y", "<br/>"):
        try:
            parse_html(bad)
        except Exception as e:  # ApiError
            assert "can't parse entities" in str(e)
        else:
            raise AssertionError(f"{bad!r} should not parse")
