"""Stop under kill -9: a person told "Stopping." or "Stopped." is not then answered, nor left without the line.

The real daemon in its own process on a SQLite file, Slack over Socket Mode; the daemon SIGKILLed right after
the stop and started again on the same file. A stop of a run claimed and not started yet (it fetches its
message's file) holds across the restart: the run ends stopped, its line posted, the model never asked. A
waiting run's stopped line the killed process could not post (the platform refused it meanwhile) is posted by
the next process, and kept in the conversation's history once. A run the restart put back in the queue with its reply partly shown (a Stop button on it) is
stopped in that reply: the line goes there, the button goes away, nothing new is posted beside it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import yaml

from adapters.slack.stop import STOP_BLOCK
from gateway.outbound.delivery import FINAL_ATTEMPTS
from gateway.store.engine import open_store
from tests.fakes.slack import PostedMessage
from tests.support.settled import settled

from .harness import ANSWER, CHANNEL, PERSON, World, thread_answers, world

CSV = b"quarter,revenue\nq3,12\n"


async def _kill(w: World) -> None:
    """SIGKILL, no shutdown of any kind (started again by `_restart`)."""
    assert w.daemon.proc is not None
    w.daemon.proc.kill()
    await w.daemon.proc.wait()


async def _stop_while_fetching(w: World) -> PostedMessage:
    """Ada's question with a file; her `!stop` while the run fetches it (claimed, not started), then SIGKILL.
    Returns her question (the thread's root)."""
    w.slack.file_hold = asyncio.Event()
    root, _ = await w.slack.say(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> sum this up",
                                files=[w.slack.add_file("q3.csv", "text/csv", CSV)])
    await w.slack.wait_for(lambda: w.slack.file_fetches, timeout=30)
    _, envelopes = await w.slack.say(CHANNEL, PERSON, "!stop", thread_ts=root.ts)
    await w.slack.wait_for(lambda: all(w.slack.acked(e) for e in envelopes), timeout=30)  # told, then killed
    await _kill(w)
    w.slack.file_hold.set()
    return root


async def _restart(w: World) -> None:
    await w.daemon.start()
    await w.daemon.wait_ready(timeout=90)


async def test_a_stop_of_a_run_fetching_its_files_holds_across_sigkill(tmp_path: Path) -> None:
    """Ada's `!stop` reaches the run while it fetches her file (claimed, not started); the process dies before
    the run starts. The next process requeues it and must not answer it: the line says she stopped it."""
    async with world(tmp_path / "config", "sqlite") as w:
        root = await _stop_while_fetching(w)
        await _restart(w)
        await w.slack.wait_for(lambda: [t for t in thread_answers(w.slack, root.ts) if "Stopped by Ada" in t],
                               timeout=30)
        await settled(*w.parts())
        answers = [t.strip() for t in thread_answers(w.slack, root.ts)]
        assert ANSWER not in answers, answers
        assert "_⏹ Stopped by Ada; I had not done anything yet._" in answers, answers
        assert w.model.requests == []


async def test_a_waiting_runs_stopped_line_the_killed_process_never_posted_is_posted_after_the_restart(
        tmp_path: Path) -> None:
    """Ada's second question waits behind her first; her `!stop` ends both. Slack refuses posts meanwhile, so the
    waiting run's line is not out when the process dies; the next one posts it, once."""
    async with world(tmp_path / "config", "sqlite", model_delay=1.0) as w:
        root, _ = await w.slack.say(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> first")
        await w.slack.wait_for(lambda: thread_answers(w.slack, root.ts), timeout=30)  # the first one streams
        _, envelopes = await w.slack.say(CHANNEL, PERSON, "second", thread_ts=root.ts)
        await w.slack.wait_for(lambda: all(w.slack.acked(e) for e in envelopes), timeout=30)  # it waits
        w.slack.fail_next("chat.postMessage", status=500, error="internal_error", retry_after=None, times=10_000)
        posts = len(w.slack.calls_to("chat.postMessage"))
        _, envelopes = await w.slack.say(CHANNEL, PERSON, "!stop", thread_ts=root.ts)
        await w.slack.wait_for(lambda: all(w.slack.acked(e) for e in envelopes), timeout=30)
        await w.slack.wait_for(lambda: len(w.slack.calls_to("chat.postMessage")) > posts, timeout=30)  # refused
        await _kill(w)
        w.slack._failures.pop("chat.postMessage", None)
        await _restart(w)
        waiting = "_⏹ Stopped by Ada; I had not done anything yet._"
        await w.slack.wait_for(lambda: waiting in thread_answers(w.slack, root.ts), timeout=30)
        await settled(*w.parts())
        answers = [t.strip() for t in thread_answers(w.slack, root.ts)]
        assert answers.count(waiting) == 1, answers
        assert ANSWER not in answers, answers
        assert len(w.model.requests) == 1, w.model.requests  # the first question's, stopped; never the second's
        # Posted by the second process after the first one's refused tries: kept in the history once all the same.
        assert _notices(w).count(waiting.strip("_")) == 1, _notices(w)


def _notices(w: World) -> list[str]:
    """The lines the conversations' histories keep as notices (read from the daemon's SQLite file)."""
    with sqlite3.connect(w.url.removeprefix("sqlite+aiosqlite:///")) as db:
        return [text for (text,) in db.execute("SELECT text FROM messages WHERE role = 'notice' ORDER BY id")]


def _waiting_threads(w: World) -> list[str]:
    """The threads whose run waits in the queue (read from the daemon's SQLite file)."""
    with sqlite3.connect(w.url.removeprefix("sqlite+aiosqlite:///")) as db:
        return [key.rsplit(":", 1)[1] for (key,) in db.execute(
            "SELECT c.key FROM runs r JOIN conversations c ON c.id = r.conversation_id WHERE r.status = 'queued'")]


async def test_a_stop_of_a_run_requeued_with_its_reply_half_shown_closes_that_reply(tmp_path: Path) -> None:
    """Two threads' replies stream, their Stop buttons on; the process dies. The next one runs one run at a time:
    one thread's run waits for the other's, its half reply still showing its button. Ada's `!stop` there closes
    that reply (the line below its text, the button gone) and posts nothing beside it."""
    config = tmp_path / "config"
    async with world(config, "sqlite", model_delay=1.0) as w:
        roots = [(await w.slack.say(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> question {i}"))[0] for i in (1, 2)]

        def buttons(thread: str) -> list[str]:
            return [m.text for m in w.slack.bot_messages(CHANNEL)
                    if m.thread_ts == thread and m.blocks and STOP_BLOCK in json.dumps(m.blocks)]

        await w.slack.wait_for(lambda: all(buttons(r.ts) for r in roots), timeout=30)
        await _kill(w)
        settings = yaml.safe_load((config / "gateway.yaml").read_text())
        settings.setdefault("limits", {})["concurrent_runs"] = 1
        (config / "gateway.yaml").write_text(yaml.safe_dump(settings))
        asked = len(w.model.requests)
        await _restart(w)
        [thread] = _waiting_threads(w)
        [shown] = buttons(thread)
        _, envelopes = await w.slack.say(CHANNEL, PERSON, "!stop", thread_ts=thread)
        await w.slack.wait_for(lambda: all(w.slack.acked(e) for e in envelopes), timeout=30)
        await settled(*w.parts())
        assert thread_answers(w.slack, thread) == [f"{shown}\n\n_⏹ Stopped by Ada before it went on._"]
        assert buttons(thread) == []
        assert len(w.model.requests) == asked + 1  # the other thread's run, run again; never the stopped one's


BOB = "U0BOB"


async def test_a_stop_honoured_after_the_restart_stops_only_what_the_stopper_may_stop(tmp_path: Path) -> None:
    """Ada's `!stop` reaches her run while it fetches her file; the process dies. Her run goes back to the queue
    (as the next start's requeue does) and Bob writes in the thread before the stored stop is honoured. His message
    does not join her run (it had been claimed: `ingest` joins only runs never started), so the stop, honoured
    whole, ends only what Ada asked: her message ends stopped, Bob's is answered."""
    async with world(tmp_path / "config", "sqlite") as w:
        w.slack.add_user(BOB, "bob", real_name="Bob")
        root = await _stop_while_fetching(w)
        async with open_store(w.url) as store:
            [conversation_id] = await store.requeue_interrupted(at_start=True)
            conv = await store.conversation(conversation_id)
            assert conv is not None
            bob, _ = w.slack.user_posts(CHANNEL, BOB, "and what about q4?", thread_ts=root.ts)
            await store.ingest(binding_id="slack", event_ids=[f"bob-{bob.ts}"], conversation=conv,
                               identity=await store.identify("slack", conv.workspace, BOB, "Bob"), account_id=BOB,
                               text=bob.text, agent_id="assistant", platform_message_id=bob.ts, queue_limit=20)
        await _restart(w)
        stopped = "_⏹ Stopped by Ada; I had not done anything yet._"
        await w.slack.wait_for(lambda: {ANSWER, stopped} <= {t.strip() for t in thread_answers(w.slack, root.ts)},
                               timeout=30)
        await settled(*w.parts())
        answers = [t.strip() for t in thread_answers(w.slack, root.ts)]
        with sqlite3.connect(w.url.removeprefix("sqlite+aiosqlite:///")) as db:
            ended = dict(db.execute("SELECT m.account_id, r.status FROM messages m JOIN runs r ON r.id = m.run_id"
                                    " WHERE m.role = 'user' AND m.text NOT LIKE '!stop%'"))
        assert ended == {PERSON: "stopped", BOB: "finished"}, ended
        assert answers.count(stopped) == 1 and answers.count(ANSWER) == 1, answers
        assert len(w.model.requests) == 1  # Bob's question only


async def test_a_stopped_line_refused_until_a_sweep_posts_it_is_kept_in_the_history_once(tmp_path: Path) -> None:
    """Ada's second question waits behind her first; her `!stop` ends both while Slack refuses every try of the
    waiting run's line (`FINAL_ATTEMPTS`): it is given up, kept, and a later sweep posts it. The history and the
    thread have it once."""
    async with world(tmp_path / "config", "sqlite", model_delay=1.0) as w:
        root, _ = await w.slack.say(CHANNEL, PERSON, f"<@{w.slack.bot_user_id}> first")
        await w.slack.wait_for(lambda: thread_answers(w.slack, root.ts), timeout=30)  # the first one streams
        _, envelopes = await w.slack.say(CHANNEL, PERSON, "second", thread_ts=root.ts)
        await w.slack.wait_for(lambda: all(w.slack.acked(e) for e in envelopes), timeout=30)  # it waits
        w.slack.fail_next("chat.postMessage", status=500, error="internal_error", retry_after=None,
                            times=FINAL_ATTEMPTS)
        _, envelopes = await w.slack.say(CHANNEL, PERSON, "!stop", thread_ts=root.ts)
        waiting = "_⏹ Stopped by Ada; I had not done anything yet._"
        await w.slack.wait_for(lambda: waiting in thread_answers(w.slack, root.ts), timeout=90)
        await settled(*w.parts())
        assert [t.strip() for t in thread_answers(w.slack, root.ts)].count(waiting) == 1
        assert _notices(w).count(waiting.strip("_")) == 1, _notices(w)
