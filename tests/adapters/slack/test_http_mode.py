"""HTTP mode: the adapter's route on an aiohttp server, Slack's signed requests against it.

A forged or stale request gets 401 and nothing runs: no submit, no decide, not even a Web API
call. Signatures are computed by the fake independently of the SDK.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from adapters.slack.adapter import SlackAdapter
from gateway.messages import ChatKind
from gateway.outbound.adapter import ApprovalCard, ApprovalItem, Decision, ReplyTarget
from tests.fakes.slack import FakeSlack, signed_event_request, signed_interactive_request

from tests.support.dispatcher import FakeDispatcher

from .conftest import start_adapter


@dataclass
class Served:
    adapter: SlackAdapter
    url: str
    http: aiohttp.ClientSession

    async def post(self, body: str, headers: dict[str, str]) -> tuple[int, str]:
        async with self.http.post(self.url, data=body.encode(), headers=headers) as response:
            return response.status, await response.text()


@pytest.fixture
async def served(fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> AsyncIterator[Served]:
    adapter = await start_adapter(fake_slack, dispatcher, mode="http")
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with aiohttp.ClientSession() as http:
        yield Served(adapter, f"http://127.0.0.1:{port}/slack/events/acme", http)
    await runner.cleanup()
    await adapter.stop()


def test_socket_mode_serves_no_route(fake_slack: FakeSlack) -> None:
    from gateway.adapter_registry import AdapterContext
    from bindings.models import GatewayConfig

    from .conftest import slack_binding

    assert SlackAdapter(slack_binding(fake_slack), AdapterContext(gateway=GatewayConfig())).http_routes() == []


async def test_health_after_token_check(served: Served, fake_slack: FakeSlack) -> None:
    assert served.adapter.health().connected
    assert fake_slack.calls_to("apps.connections.open") == [] and fake_slack.connections_opened == 0


async def test_url_verification(served: Served) -> None:
    body, headers = signed_event_request({"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"})
    status, text = await served.post(body, headers)
    assert status == 200 and "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" in text


async def test_valid_event_is_submitted_and_a_retry_is_a_duplicate(served: Served, fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> None:
    _, events = fake_slack.user_posts("C0GEN", "U0ADA", "<@U0BOT> hello over http")
    message_body = fake_slack.event_callback(events[0])
    status, _ = await served.post(*signed_event_request(message_body))
    assert status == 200
    assert [m.text for m in dispatcher.accepted] == ["hello over http"]
    # Slack's retry (X-Slack-Retry-Num) of the same event, and the app_mention twin: nothing new.
    assert (await served.post(*signed_event_request(message_body, retry_num=1)))[0] == 200
    assert (await served.post(*signed_event_request(fake_slack.event_callback(events[1]))))[0] == 200
    assert len(dispatcher.submitted) == 3 and len(dispatcher.accepted) == 1
    assert dispatcher.accepted[0].chat_kind is ChatKind.CHANNEL and dispatcher.accepted[0].sender.display_name == "Ada"


@pytest.mark.parametrize(
    "tamper",
    ["wrong secret", "stale timestamp", "body changed after signing", "no signature"],
)
async def test_forged_or_stale_event_gets_401_and_nothing_runs(served: Served, fake_slack: FakeSlack, dispatcher: FakeDispatcher, tamper: str) -> None:
    _, events = fake_slack.user_posts("D0ADA", "U0ADA", "run this")
    payload = fake_slack.event_callback(events[0])
    calls_before = len(fake_slack.calls)
    if tamper == "wrong secret":
        body, headers = signed_event_request(payload, "not-the-secret")
    elif tamper == "stale timestamp":
        body, headers = signed_event_request(payload, timestamp=int(time.time()) - 6 * 60)
    elif tamper == "body changed after signing":
        body, headers = signed_event_request(payload)
        body = body.replace("run this", "rm -rf /")
    else:
        body, headers = signed_event_request(payload)
        del headers["X-Slack-Signature"]
    status, _ = await served.post(body, headers)
    assert status == 401
    assert dispatcher.submitted == []
    assert len(fake_slack.calls) == calls_before  # not even a users.info


async def test_signed_click_decides_and_a_forged_one_does_not(served: Served, fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> None:
    where = ReplyTarget("slack", "acme", "T0TEAM", "C0GEN", "9.9", ChatKind.CHANNEL)
    card = ApprovalCard("card-1", "run-1", (ApprovalItem("appr-http", "send_mail", "mail", "{}"),), "only Ada can decide")
    card_ts = await served.adapter.post_card(where, card)
    payload = fake_slack.block_actions("U0ADA", fake_slack.message("C0GEN", card_ts), "approve:appr-http")

    forged_body, forged_headers = signed_interactive_request(payload, "guessed-secret")
    assert (await served.post(forged_body, forged_headers))[0] == 401
    stale_body, stale_headers = signed_interactive_request(payload, timestamp=int(time.time()) - 3600)
    assert (await served.post(stale_body, stale_headers))[0] == 401
    assert dispatcher.clicks == []

    status, _ = await served.post(*signed_interactive_request(payload))
    assert status == 200
    assert [(c.approval_id, c.decision, c.decider.account_id) for c in dispatcher.clicks] == [("appr-http", Decision.APPROVE, "U0ADA")]

    bob = fake_slack.block_actions("U0BOB", fake_slack.message("C0GEN", card_ts), "approve:appr-http")
    assert (await served.post(*signed_interactive_request(bob)))[0] == 200
    note = await fake_slack.wait_for(lambda: fake_slack.ephemerals)
    assert note[0].user == "U0BOB" and note[0].text == "Only Ada can decide this."


async def test_a_failing_submit_is_not_acked(served: Served, fake_slack: FakeSlack, dispatcher: FakeDispatcher) -> None:
    async def broken_submit(message: object) -> object:
        raise RuntimeError("database is down")

    dispatcher.submit = broken_submit  # type: ignore[method-assign]
    _, events = fake_slack.user_posts("D0ADA", "U0ADA", "hello")
    status, _ = await served.post(*signed_event_request(fake_slack.event_callback(events[0])))
    assert status >= 500  # Slack will deliver it again; the ledger makes that safe


async def test_malformed_signed_body_is_dropped(served: Served, dispatcher: FakeDispatcher) -> None:
    body = json.dumps({"type": "event_callback", "team_id": "T0TEAM", "event_id": "Ev9", "event": {"type": "message", "text": "x"}})
    from tests.fakes.slack import sign

    status, _ = await served.post(body, {"Content-Type": "application/json", **sign(body)})
    assert status == 200 and dispatcher.submitted == []


@pytest.mark.parametrize("body", [
    "payload=" + json.dumps({"type": "block_actions", "user": True}),  # Bolt reads `user` before any check
    "payload=" + json.dumps({"type": "block_actions", "user": {"id": "U0ADA"}, "channel": 7}),
    "payload=not%20json",
])
async def test_a_payload_bolt_cannot_read_is_a_400_not_a_500(served: Served, dispatcher: FakeDispatcher,
                                                             body: str, caplog: pytest.LogCaptureFixture) -> None:
    from tests.fakes.slack import sign

    status, _ = await served.post(body, {"Content-Type": "application/x-www-form-urlencoded", **sign(body)})
    assert status in (400, 401)
    assert dispatcher.clicks == [] and dispatcher.submitted == []
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_a_busy_database_is_not_acked_and_logs_one_line_not_a_traceback(
        served: Served, fake_slack: FakeSlack, dispatcher: FakeDispatcher, caplog: pytest.LogCaptureFixture) -> None:
    from gateway.store.availability import StoreUnavailable

    async def busy_submit(message: object) -> object:
        raise StoreUnavailable("no database connection free in time", 5.0)

    dispatcher.submit = busy_submit  # type: ignore[method-assign]
    _, events = fake_slack.user_posts("D0ADA", "U0ADA", "hello")
    status, _ = await served.post(*signed_event_request(fake_slack.event_callback(events[0])))
    assert status >= 500  # not acked: Slack delivers it again
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert [r.getMessage() for r in caplog.records if "database is busy" in r.getMessage()]
