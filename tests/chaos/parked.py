"""Approvals under kill -9: conversations whose agent calls a gated tool, decided by a person.

Each gated conversation is one message, "deploy NAME" (NAME unique), in a Slack thread or a web
conversation of `harness.world(gated=True)`: the fake model calls the gated `deploy` tool, the
run parks, a card shows. Half the cards are decided as soon as they show (while the daemon is
still being killed, so resumed runs are killed too), the rest once the stream ended; on Slack by
clicking the card's button, on the web through `POST /api/v1/approvals/{id}`. A person clicks
again when nothing happened (a click that reached a process about to die).

Counted where a person looks: the card and the answer below it in the thread, the web
conversation's cards and turns; and where the side effect lands: `deploy` appends one line per
call to the world's ops log. Every parked call must run once and be answered once.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from capabilities.approval_gate import ALREADY_STARTED
from tests.support.settled import settled

from .harness import ANSWER, CHANNEL, PERSON, Tally, World, _request, _until, thread_answers


@dataclass
class Held:
    """A parked call left for a person to decide later."""

    service: str
    decide: Any  # async () -> None: one try at deciding it
    answered: Any  # async () -> bool: whether its one answer showed


@dataclass
class Parked:
    """Every gated conversation of a run, for the count."""

    slack: list[tuple[str, str]] = field(default_factory=list)  # (thread, service)
    web: list[tuple[str, str]] = field(default_factory=list)  # (conversation, service)
    held: list[Held] = field(default_factory=list)


def _card(w: World, thread: str) -> Any:
    """The thread's approval card (the bot's message showing the `deploy` call), if it showed."""
    return next((m for m in w.slack.bot_messages(CHANNEL)
                 if m.thread_ts == thread and m.blocks and "deploy" in json.dumps(m.blocks)), None)


def approve_value(card: Any) -> str | None:
    """The Approve button's value on a Slack card, while it still has one."""
    return next((e["value"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]
                 if str(e.get("value", "")).startswith("approve:")), None)


def _cards(w: World, thread: str) -> int:
    return sum(1 for m in w.slack.bot_messages(CHANNEL)
               if m.thread_ts == thread and m.blocks and "deploy" in json.dumps(m.blocks))


def _answers(w: World, thread: str) -> list[str]:
    """The bot's posts in the thread other than the card."""
    return [m.text.strip() for m in w.slack.bot_messages(CHANNEL)
            if m.thread_ts == thread and not (m.blocks and "deploy" in json.dumps(m.blocks))]


async def _decided(held: Held, tally: Tally, wait: float, what: str) -> None:
    """Decide, then wait for the answer; decide again (as a person would) while none shows."""
    deadline = time.monotonic() + wait
    while True:
        await held.decide()
        if await _until(held.answered, 6.0):
            tally.resumed += 1
            return
        if time.monotonic() > deadline:
            tally.problems.append(f"{what}: approved, no answer within {wait:g}s")
            return


async def slack_gated(w: World, tally: Tally, parked: Parked, going: Callable[[], bool], *, wait: float, tag: str,
                      rng: random.Random) -> None:
    """New threads, each asking for one gated call, while `going()`."""
    n = 0
    while going():
        service = f"{tag}-{n}"
        n += 1
        msg, events = w.slack.user_posts(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> deploy {service}")
        tally.sent += 1
        tally.admitted += 1
        for event in events:
            await w.slack.send_event(event)
        parked.slack.append((msg.ts, service))
        if not await _until(lambda: _async(_card(w, msg.ts)), wait):
            tally.problems.append(f"slack {service}: no card within {wait:g}s ({thread_answers(w.slack, msg.ts)})")
            tally.lost += 1
            return
        tally.parked += 1

        async def click(thread: str = msg.ts) -> None:
            card = _card(w, thread)
            approve = approve_value(card)
            if approve is not None:  # none left: the card shows the decision already
                try:
                    await w.slack.click(PERSON, card, approve)
                except AssertionError:  # no connection open to send it on (the daemon is restarting)
                    pass

        async def answered(thread: str = msg.ts) -> bool:
            return bool(_answers(w, thread))

        held = Held(service, click, answered)
        if rng.random() < 0.5:
            await _decided(held, tally, wait, f"slack {service}")
            tally.answered += 1
        else:
            parked.held.append(held)


async def _async(value: Any) -> Any:
    return value


async def web_gated(w: World, tally: Tally, parked: Parked, going: Callable[[], bool], *, wait: float, tag: str,
                    rng: random.Random) -> None:
    async with aiohttp.ClientSession() as http:
        n = 0
        while going():
            service = f"{tag}-{n}"
            n += 1
            status, body = await _request(http, "POST", f"{w.api}/api/v1/conversations", json={},
                                          deadline=time.monotonic() + wait)
            if status != 201:
                tally.problems.append(f"web {service}: could not create a conversation ({status})")
                return
            conv = body["id"]
            url = f"{w.api}/api/v1/conversations/{conv}/messages"
            tally.sent += 1
            status, body = await _request(http, "POST", url, json={"text": f"deploy {service}"},
                                          headers={"Idempotency-Key": service}, deadline=time.monotonic() + wait)
            if status not in (202, 409):
                tally.problems.append(f"web {service}: not admitted ({status} {body})")
                return
            tally.admitted += 1
            parked.web.append((conv, service))

            async def page(url: str = url) -> dict[str, Any]:
                async with aiohttp.ClientSession() as own:  # also used after this lane's session closed
                    status, body = await _request(own, "GET", url, deadline=time.monotonic() + wait)
                return body if status == 200 else {"messages": [], "cards": []}

            async def pending(url: str = url) -> list[str]:
                return [i["approval_id"] for c in (await page(url))["cards"] for i in c["items"]
                        if i["state"] == "pending"]

            if not await _until(lambda: pending(), wait):
                tally.problems.append(f"web {service}: no card within {wait:g}s")
                tally.lost += 1
                return
            tally.parked += 1

            async def approve(pending: Any = pending) -> None:
                async with aiohttp.ClientSession() as own:
                    for approval in await pending():
                        await _request(own, "POST", f"{w.api}/api/v1/approvals/{approval}",
                                       json={"decision": "approve"}, deadline=time.monotonic() + wait)

            async def answered(page: Any = page) -> bool:
                return any(t["role"] == "assistant" and t["status"] == "final" for t in (await page())["messages"])

            held = Held(service, approve, answered)
            if rng.random() < 0.5:
                await _decided(held, tally, wait, f"web {service}")
                tally.answered += 1
            else:
                parked.held.append(held)


async def decide_held(w: World, tally: Tally, parked: Parked, *, wait: float) -> None:
    """After the stream: a person decides every card still waiting."""
    for held in parked.held:
        await _decided(held, tally, wait, held.service)
        tally.answered += 1


def tool_runs(w: World) -> Counter[str]:
    """How many times `deploy` ran for each service (the side effect, from the ops log)."""
    assert w.ops_log is not None
    if not w.ops_log.exists():
        return Counter()
    return Counter(json.loads(line)[1] for line in w.ops_log.read_text().splitlines() if line.strip())


def told_not_started(w: World, service: str) -> bool:
    """Whether the model, resuming `service`'s run, was told its approved call had been started
    once already and would not be started again (capabilities/approval_gate.py)."""
    asked = re.compile(rf"\bdeploy {re.escape(service)}\b")
    return any(any(m.get("role") == "user" and asked.search(str(m.get("content"))) for m in r["messages"])
               and any(m.get("role") == "tool" and m.get("content") == ALREADY_STARTED for m in r["messages"])
               for r in w.model.requests)


def _unstarted(w: World, service: str, answers: list[str], cards: int, ran: int) -> bool:
    """One card, one answer, the tool not run and the model told why: a kill landed between the
    call's start mark and the call (at most once, by design), neither lost nor doubled."""
    return answers == [ANSWER] and cards == 1 and ran == 0 and told_not_started(w, service)


async def count_parked(w: World, tally: Tally, parked: Parked) -> None:
    """Once every card was decided: one card, one answer (the model's) and one run of the tool each."""
    await settled(*w.parts())  # the resumed runs ended and posted: nothing left that could post a second
    runs = tool_runs(w)
    for thread, service in parked.slack:
        answers, cards = _answers(w, thread), _cards(w, thread)
        if _unstarted(w, service, answers, cards, runs[service]):
            tally.unstarted += 1
        elif answers != [ANSWER] or cards != 1 or runs[service] != 1:
            tally.duplicated += max(0, len(answers) - 1) + max(0, cards - 1) + max(0, runs[service] - 1)
            tally.wrong += sum(a != ANSWER for a in answers)
            tally.problems.append(f"slack {service}: {cards} cards, answers {answers}, ran {runs[service]}x")
    async with aiohttp.ClientSession() as http:
        for conv, service in parked.web:
            status, body = await _request(http, "GET", f"{w.api}/api/v1/conversations/{conv}/messages",
                                          deadline=time.monotonic() + 30)
            turns = body["messages"] if status == 200 else []
            answers = [t["text"].strip() for t in turns if t["role"] == "assistant"]
            users = [t for t in turns if t["role"] == "user"]
            if len(users) == 1 and _unstarted(w, service, answers, 1, runs[service]):
                tally.unstarted += 1
            elif answers != [ANSWER] or len(users) != 1 or runs[service] != 1:
                tally.duplicated += max(0, len(answers) - 1) + max(0, len(users) - 1) + max(0, runs[service] - 1)
                tally.wrong += sum(a != ANSWER for a in answers)
                tally.problems.append(f"web {service}: answers {answers}, {len(users)} user turns, "
                                      f"ran {runs[service]}x")


async def database_after_drain(w: World) -> dict[str, Any]:
    """What the runs and the ledger say once everything drained: runs by status, user messages
    without a finished run, runs without a user message, ledger rows per binding."""
    queries = {
        "runs": "SELECT status, count(*) FROM runs GROUP BY status",
        "orphan_messages": "SELECT count(*) FROM messages m LEFT JOIN runs r ON r.id = m.run_id"
                           " WHERE m.role = 'user' AND (r.id IS NULL OR r.status <> 'finished')",
        "empty_runs": "SELECT count(*) FROM runs r WHERE NOT EXISTS"
                      " (SELECT 1 FROM messages m WHERE m.run_id = r.id AND m.role = 'user')",
        "ledger": "SELECT binding_id, count(*) FROM inbound_ledger GROUP BY binding_id",
        "users": "SELECT c.binding_id, count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                 " WHERE m.role = 'user' GROUP BY c.binding_id",
    }
    rows: dict[str, list[tuple[Any, ...]]] = {}
    if w.url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(w.url.split("///", 1)[1]) as db:
            for name, sql in queries.items():
                rows[name] = [tuple(r) for r in db.execute(sql).fetchall()]
    else:
        import asyncpg

        conn = await asyncpg.connect(w.url.replace("postgresql+asyncpg", "postgresql"))
        try:
            for name, sql in queries.items():
                rows[name] = [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()
    return {"runs": dict(rows["runs"]), "orphan_messages": rows["orphan_messages"][0][0],
            "empty_runs": rows["empty_runs"][0][0], "ledger": dict(rows["ledger"]), "users": dict(rows["users"])}


async def approvals_under_kills(w: World, tally: Tally, *, slack_lanes: int, web_lanes: int, duration: float,
                                every: tuple[float, float], wait: float = 60.0, seed: int = 22,
                                min_kills: int = 0) -> Parked:
    """Gated conversations for `duration` s (longer, until `min_kills` kills, on a slow machine)
    with the killer running, then the held cards decided."""
    from .harness import KillWindow, killer

    rng = random.Random(seed)
    parked = Parked()
    window = KillWindow(tally, duration, min_kills)
    kill = asyncio.create_task(killer(w, tally, window, every=every, rng=random.Random(seed + 1)))
    lanes = [slack_gated(w, tally, parked, window.going, wait=wait, tag=f"gs{i}", rng=rng) for i in range(slack_lanes)]
    lanes += [web_gated(w, tally, parked, window.going, wait=wait, tag=f"gw{i}", rng=rng) for i in range(web_lanes)]
    try:
        await asyncio.gather(*lanes)
    finally:
        window.stop()
        await kill
    await decide_held(w, tally, parked, wait=wait)
    await count_parked(w, tally, parked)
    return parked
