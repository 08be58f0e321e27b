"""Replies stream into one message edited in place, paced, split at paragraphs, never posted twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.clock import ManualClock
from gateway.outbound.delivery import ReplyStream, split_paragraphs
from gateway.outbound.native_stream import NativeReplyStream
from gateway.messages import ChatKind
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Store
from gateway.outbound.adapter import PlatformLimits, RateLimited, ReplyTarget
from .conftest import wait_for

TARGET = ReplyTarget("fake", "b", "w", "C1", "T1", ChatKind.CHANNEL)


class RecordingChat:
    """The platform side: what a person in the channel would see, message by message."""

    platform = "fake"

    def __init__(self, limit: int = 100, interval: float = 1.0, hold: float = 0.0) -> None:
        self.limits = PlatformLimits(max_message_chars=limit, min_edit_interval=interval, first_draft_after=hold)
        self.messages: dict[str, list[str]] = {}  # id -> every version shown
        self.rate_limit_next: list[float] = []

    def render(self, markdown: str) -> str:
        return markdown

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        self._maybe_limited()
        message_id = f"m{len(self.messages) + 1}"
        self.messages[message_id] = [text]
        return message_id

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        self._maybe_limited()
        self.messages[message_id].append(text)

    def forget(self, message_ids: object) -> None:
        """Keeps nothing between replies (the protocol's no-op)."""

    def _maybe_limited(self) -> None:
        if self.rate_limit_next:
            raise RateLimited(self.rate_limit_next.pop(0), "chat.update")

    def final(self) -> list[str]:
        return [versions[-1] for versions in self.messages.values()]


def _first_posts(stream: ReplyStream) -> list[str | None]:
    """Each time the stream posts the reply's first message (where the runner puts its Stop control)."""
    posted: list[str | None] = []

    async def stop_control() -> None:
        posted.append(stream.first_message_id)

    stream.on_first_post = stop_control
    return posted


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}")
    await migrate(engine)
    yield Store(engine)
    await engine.dispose()


@pytest.mark.parametrize(
    ("text", "limit", "pieces"),
    [
        ("short", 10, ["short"]),
        ("para one\n\npara two", 12, ["para one", "para two"]),
        ("a" * 25, 10, ["a" * 10, "a" * 10, "a" * 5]),
        ("line one\nline two\nline three", 20, ["line one\nline two", "line three"]),
        ("", 10, [""]),
    ],
)
def test_split_paragraphs(text: str, limit: int, pieces: list[str]) -> None:
    assert split_paragraphs(text, limit) == pieces
    assert all(len(p) <= limit for p in pieces)


async def test_one_message_edited_at_a_paced_interval(store: Store) -> None:
    chat, clock = RecordingChat(), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run1", clock)  # type: ignore[arg-type]
    for word in ["Hello ", "there ", "friend"]:
        await stream.append(word)  # all within the same second: one post, no edits yet
    assert chat.messages == {"m1": ["Hello"]}, "a draft is shown without the space after its last word"
    clock.advance(1.0)
    await stream.append(".")
    assert chat.messages["m1"][-1] == "Hello there friend."
    await stream.finish()
    assert list(chat.messages) == ["m1"], "a draft and a final message both posted"
    assert chat.final() == ["Hello there friend."]
    [row] = await store.deliveries("run1")
    assert row.final and row.platform_message_id == "m1" and row.text == "Hello there friend."


async def test_long_reply_continues_in_a_new_message_at_a_paragraph(store: Store) -> None:
    chat, clock = RecordingChat(limit=50), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run2", clock)  # type: ignore[arg-type]
    await stream.append("First paragraph is here.\n\n")
    clock.advance(2)
    await stream.append("Second paragraph is long enough to move on.")
    await stream.finish()
    assert chat.final() == ["First paragraph is here.", "Second paragraph is long enough to move on."]
    assert [d.seq for d in await store.deliveries("run2")] == [0, 1]


async def test_rate_limited_draft_is_skipped_and_the_final_waits(store: Store) -> None:
    chat, clock = RecordingChat(), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run3", clock)  # type: ignore[arg-type]
    await stream.append("one ")
    chat.rate_limit_next = [5.0]
    clock.advance(1)
    await stream.append("two ")  # rate limited: skipped, no busy loop
    clock.advance(1)
    await stream.append("three ")  # still inside Retry-After: not even tried
    assert chat.messages["m1"] == ["one"]
    assert clock.next_due() == 4.0, "the next draft is due when the Retry-After ends"
    chat.rate_limit_next = [2.0]
    finishing = asyncio.create_task(stream.finish("one two three"))
    await wait_for(lambda: clock.next_due() == 2.0, what="the final waiting out its Retry-After on the clock")
    clock.advance(1.9)
    assert clock.next_due() == pytest.approx(0.1) and chat.final() == ["one"], "not tried before Retry-After"
    clock.advance(0.1)
    await finishing
    assert chat.final() == ["one two three"]
    assert list(chat.messages) == ["m1"]


async def test_a_draft_shows_no_trailing_whitespace_so_the_final_only_extends_it(store: Store) -> None:
    """The final is the answer trimmed: a draft caught at "... 2 " would lose its space when the
    final lands. What a person sees only ever grows, and the space between words comes back."""
    chat, clock = RecordingChat(), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run10", clock)  # type: ignore[arg-type]
    for word in ["Counting: 1 ", "2 ", "3 "]:
        await stream.append(word)
        clock.advance(1.0)
    await stream.append("\n\n")  # only whitespace since the last draft: nothing to show
    await stream.finish("Counting: 1 2 3")
    versions = chat.messages["m1"]
    assert versions == ["Counting: 1", "Counting: 1 2", "Counting: 1 2 3"]
    assert all(later.startswith(earlier) for earlier, later in zip(versions, versions[1:])), versions


async def test_an_answer_shown_when_written_is_the_final_posted_once(store: Store) -> None:
    """The answer shown the moment the model wrote it, within the first draft's hold: the final finds it
    shown, so the reply is one post, never edited, with one row, and that row is the final's."""
    chat, clock = RecordingChat(hold=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run12", clock)  # type: ignore[arg-type]
    first_posts = _first_posts(stream)
    for word in ["Quick ", "answer. "]:
        await stream.append(word)
    await stream.show_answer()
    assert chat.messages == {"m1": ["Quick answer."]}, "not shown before the run's end"
    assert await store.deliveries("run12") == [], "a draft row written for what the final row records"
    await stream.finish("Quick answer.")
    assert chat.messages == {"m1": ["Quick answer."]} and first_posts == []
    [row] = await store.deliveries("run12")
    assert row.final and (row.platform_message_id, row.text) == ("m1", "Quick answer.")


async def test_an_answer_the_platform_refused_to_show_is_posted_by_the_final(store: Store) -> None:
    chat, clock = RecordingChat(hold=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run13", clock)  # type: ignore[arg-type]
    await stream.append("The answer.")
    chat.rate_limit_next = [2.0]
    await stream.show_answer()  # a 429: not shown, not retried here
    assert chat.messages == {}
    finishing = asyncio.create_task(stream.finish("The answer."))
    await wait_for(lambda: chat.messages, what="the final's post")
    await finishing
    assert chat.messages == {"m1": ["The answer."]}
    [row] = await store.deliveries("run13")
    assert row.final and row.platform_message_id == "m1"


class RecordingLive:
    """A native stream's platform side (Slack's appendStream): every piece appended, in order."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def start(self, markdown: str) -> str | None:
        self.pieces.append(markdown)
        return "s1"

    async def append(self, markdown: str) -> None:
        self.pieces.append(markdown)

    async def stop(self, markdown: str = "") -> str | None:
        if markdown:
            self.pieces.append(markdown)
        return "s1"

    def shown(self) -> list[str]:
        """What the message reads after each piece."""
        return ["".join(self.pieces[: n + 1]) for n in range(len(self.pieces))]


async def test_a_native_stream_holds_back_a_trailing_space_and_sends_it_with_the_next_word(store: Store) -> None:
    live, clock = RecordingLive(), ManualClock()
    chat = RecordingChat()
    stream = NativeReplyStream(live, chat, TARGET, store, "run11", clock, fresh=True)  # type: ignore[arg-type]
    await stream.append("a ")
    clock.advance(1.0)
    await stream.append("b ")
    clock.advance(1.0)
    await stream.append("c")
    await stream.finish("a b c")
    assert live.pieces == ["a", " b", " c"], "no space lost between words, none shown after the last"
    assert live.shown()[-1] == "a b c" and not any(text.endswith(" ") for text in live.shown())


async def test_a_restarted_run_edits_what_it_already_posted(store: Store) -> None:
    chat, clock = RecordingChat(), ManualClock()
    first = ReplyStream(chat, TARGET, store, "run4", clock)  # type: ignore[arg-type]
    await first.append("partial")
    await first.rows_written()  # the process dies once the draft's row is in the store
    again = ReplyStream(chat, TARGET, store, "run4", clock)  # type: ignore[arg-type]
    await again.finish("the whole answer")
    assert list(chat.messages) == ["m1"] and chat.final() == ["the whole answer"]



async def test_an_answer_complete_within_the_hold_is_posted_once_as_final(store: Store) -> None:
    """A chat platform holds a reply's first draft for a moment: a quick answer is one post, no edits."""
    chat, clock = RecordingChat(hold=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run5", clock)  # type: ignore[arg-type]
    posted = _first_posts(stream)
    for word in ["Quick ", "answer", "."]:
        await stream.append(word)
        clock.advance(0.3)
    assert chat.messages == {}, "a draft went out within the hold"
    await stream.finish()
    assert chat.messages == {"m1": ["Quick answer."]}, "posted once, never edited"
    assert posted == [], "no Stop control for an answer that was final when first shown"
    [row] = await store.deliveries("run5")
    assert row.final and row.text == "Quick answer."


async def test_held_text_is_shown_when_its_time_comes_though_the_model_says_nothing_more(store: Store) -> None:
    """Text that came before its time is not kept back until the model's next piece (a tool call
    or a slow step can take minutes): it is shown as a draft when the hold or interval ends, and
    the Stop control goes on then."""
    chat, clock = RecordingChat(hold=1.0, interval=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run6", clock)  # type: ignore[arg-type]
    posted = _first_posts(stream)
    await stream.append("Let me look that up…")
    clock.advance(0.9)
    assert chat.messages == {} and clock.next_due() == pytest.approx(0.1), "a draft waits for the hold's end"
    clock.advance(0.1)  # the hold ends; the model says nothing
    await wait_for(lambda: posted, what="the held draft")
    assert chat.messages == {"m1": ["Let me look that up…"]} and posted == ["m1"]
    await stream.append(" Found it.")  # within the interval of that draft: waits for its time again
    assert chat.messages["m1"] == ["Let me look that up…"] and clock.next_due() == 1.0
    clock.advance(1.0)
    await wait_for(lambda: chat.messages["m1"][-1].endswith("Found it."), what="the second draft")
    assert chat.messages["m1"] == ["Let me look that up…", "Let me look that up… Found it."]
    await stream.finish()
    assert list(chat.messages) == ["m1"] and posted == ["m1"]


async def test_a_draft_waiting_for_its_time_never_goes_out_after_the_run_ended(store: Store) -> None:
    chat, twin_chat, clock = RecordingChat(hold=1.0), RecordingChat(hold=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run7", clock)  # type: ignore[arg-type]
    await stream.append("half a thought")
    # A twin that is not closed, its draft due at the same moment: once it has been shown and its row
    # written, the closed stream's draft (set first, one store read before its post) would have gone out too.
    twin = ReplyStream(twin_chat, TARGET, store, "run7-twin", clock)  # type: ignore[arg-type]
    await twin.append("half a thought")
    stream.close()  # the run was cancelled (a stop, a shutdown) before the draft's time came
    clock.advance(1.0)
    await wait_for(lambda: twin_chat.messages, what="the twin's draft")
    await twin.rows_written()
    assert twin_chat.messages == {"m1": ["half a thought"]}
    assert chat.messages == {}


async def test_the_final_edit_does_not_wait_for_the_drafts_row(store: Store) -> None:
    """A quick answer's final edit goes out while its first draft's row is still being written;
    the final row waits for it, so the rows end up in order and right."""
    chat, clock = RecordingChat(), ManualClock()
    release = asyncio.Event()
    save = store.save_delivery

    async def slow_first_row(run_id: str, seq: int, message_id: str | None, text: str, final: bool) -> None:
        if not final:  # the draft's row
            await release.wait()
        await save(run_id, seq, message_id, text, final)

    store.save_delivery = slow_first_row  # type: ignore[method-assign]
    stream = ReplyStream(chat, TARGET, store, "run9", clock)  # type: ignore[arg-type]
    await stream.append("Hello")
    finishing = asyncio.create_task(stream.finish("Hello, world."))
    for _ in range(100):
        if chat.final() == ["Hello, world."]:
            break
        await asyncio.sleep(0)
    assert chat.final() == ["Hello, world."], "the final edit went out before the draft's row was written"
    assert not finishing.done()
    release.set()
    await finishing
    (row,) = await store.deliveries("run9")
    assert (row.platform_message_id, row.text) == ("m1", "Hello, world.")


async def test_a_finished_replys_final_row_goes_with_the_runs_end(store: Store, monkeypatch: Any) -> None:
    """The final edit's row is not a transaction of its own: the runner writes it with the run's
    end, so a reply costs one store round trip fewer (gateway/store/driver.py)."""
    from gateway.store import driver
    from gateway.store.repo import FinalRow, Identity
    from gateway.store.repo import ConversationRef

    conv = await store.create_conversation(ConversationRef("", "web:local:c1", "web", "web", "local", "c1", None, "dm"))
    said = await store.ingest(binding_id="web", event_ids=["e1"], conversation=conv, identity=Identity("p-ann", "Ann"),
                              account_id="ann", text="hi", agent_id="assistant", platform_message_id="e1",
                              queue_limit=10)
    await store.claim_next_run(conv.id)
    transactions: list[str] = []
    real = driver.transaction

    async def counted(engine: Any, program: Any, **kw: Any) -> Any:
        transactions.append(getattr(program, "__qualname__", "?"))
        return await real(engine, program, **kw)

    monkeypatch.setattr(driver, "transaction", counted)
    chat = RecordingChat()
    stream = ReplyStream(chat, TARGET, store, said.run_id, ManualClock(), fresh=True)  # type: ignore[arg-type]
    await stream.append("Hello")
    await stream.rows_written()
    assert len(transactions) == 1, "the draft's row, once posted"
    rows: list[FinalRow] = []
    await stream.finish("Hello, world.", rows=rows)
    await store.end_run(said.run_id, "finished", reply="Hello, world.", deliveries=rows)
    assert len(transactions) == 2, "the final row and the run's end: one transaction"
    assert chat.final() == ["Hello, world."] and list(chat.messages) == ["m1"]
    (row,) = await store.deliveries(said.run_id)
    assert (row.platform_message_id, row.text, row.final) == ("m1", "Hello, world.", True)


async def test_the_stores_trouble_in_a_draft_its_timer_sent_is_the_runs(store: Store) -> None:
    """A draft sent by its timer that could not read what the run posted before (a restarted run)
    fails the run's next step, as an inline draft's would, and the scheduler runs it again; it is
    never a warning the run goes on past (its final would post a second message beside the first)."""
    from gateway.store.availability import StoreUnavailable

    read, failures = store.deliveries, [StoreUnavailable("the database is busy", 5.0)]

    async def unavailable_once(run_id: str) -> Any:
        if failures:
            raise failures.pop()
        return await read(run_id)

    store.deliveries = unavailable_once  # type: ignore[method-assign]
    chat, clock = RecordingChat(hold=1.0), ManualClock()
    stream = ReplyStream(chat, TARGET, store, "run8", clock)  # type: ignore[arg-type]
    await stream.append("Let me look…")
    clock.advance(1.0)  # the hold ends: the timer's draft reads the store
    await wait_for(lambda: not failures, what="the timer's draft to run into the store's trouble")
    # The draft's task may have ended without its done-callback having run yet: finish() still sees
    # its failure (settle() takes the task's end itself).
    # finish() lets a draft under way end before it raises: nothing of the timer's draft can come later.
    with pytest.raises(StoreUnavailable):
        await stream.finish("Let me look… found it.")
    assert chat.messages == {}
