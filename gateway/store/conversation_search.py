"""Conversation search's queries: one person's conversations, matched by what was said in them.

A person's conversations are the ones they said something in (a `user` message from any account
that is theirs now), on any platform. Matching uses the full-text objects of migration 0008 — FTS5 on SQLite,
`websearch_to_tsquery('simple', ...)` / `ts_rank_cd` over a stored tsvector with a GIN index on PostgreSQL —
which the database keeps in step with `messages` whichever code path wrote it: PostgreSQL with the row,
SQLite in batches after it (migration 0017), caught up here before every match (`message_index`;
while another process holds the write lock past the bound, what is not indexed yet is not found).
Whole words, case-folded, not stemmed, on both engines.

A channel or group conversation counts only while the person is still in that channel, which only
the platform knows: `counts` (`gateway.membership.Membership.counts`) is asked for each candidate,
best first, before it is returned or opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.membership import Place
from gateway.store import message_index
from gateway.store.availability import StoreUnavailable
from gateway.store.fulltext import MESSAGES_PG_CONFIG, fts5_query, parse
from gateway.store.models import UTCDateTime

MAX_HITS = 300  # matching messages read before grouping by conversation
MAX_MESSAGE_CHARS = 4_000  # one message in read_conversation
# The configuration the stored vectors were made with (migration 0008), for the query.
_CFG = f"'{MESSAGES_PG_CONFIG}'::regconfig"


@dataclass(frozen=True)
class Found:
    conversation_id: str
    platform: str
    chat_kind: str
    title: str
    last_active: datetime
    matched: int
    passage: str  # the strongest matching message, matched words in **bold**


@dataclass(frozen=True)
class Listed:
    """One conversation in a person's list (the web chat's sidebar)."""

    conversation_id: str
    title: str
    last_active: datetime


@dataclass(frozen=True)
class Results:
    found: list[Found] = field(default_factory=list)
    unconfirmed: int = 0  # channel conversations left out: the platform could not confirm membership


Counts = Callable[[Place], Awaitable[bool | None]]


async def personal_only(place: Place) -> bool | None:
    """Without a membership check, only what is always the person's own counts (fail closed)."""
    return True if place.personal else None


@dataclass(frozen=True)
class Said:
    role: str
    sender_name: str
    text: str
    at: datetime


@dataclass(frozen=True)
class Window:
    platform: str
    chat_kind: str
    lines: list[Said]
    total: int


# The conversations a person said something in, through any account that is theirs now: a link
# made later brings that account's earlier conversations along, an unlink takes them away.
_MINE = ("SELECT DISTINCT mm.conversation_id FROM accounts a"
         " JOIN messages mm ON mm.account_id = a.account_id AND mm.role = 'user'"
         " JOIN conversations cc ON cc.id = mm.conversation_id"
         " AND cc.platform = a.platform AND cc.workspace = a.workspace"
         " WHERE a.person_id = :person")
_TS = UTCDateTime()
# A conversation's title: the one the person gave it, else its first message (a line of at most 80 characters).
_FIRST = ("(SELECT m.text FROM messages m WHERE m.conversation_id = c.id AND m.role = 'user' ORDER BY m.id LIMIT 1)")
_LAST = "COALESCE((SELECT max(m.created_at) FROM messages m WHERE m.conversation_id = c.id), c.updated_at)"
TITLE_CHARS = 80


def title_of(own: str | None, first: str | None) -> str:
    title = " ".join((own or first or "").split())
    return title[:TITLE_CHARS] + ("…" if len(title) > TITLE_CHARS else "")


def _when(value: object, dialect: str) -> datetime:
    if isinstance(value, str):  # SQLite returns text from a raw statement
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    result = _TS.process_result_value(value, None)  # type: ignore[arg-type]
    assert result is not None
    return result


# Where a conversation happened, and which of the person's accounts spoke in it.
_PLACE = ("SELECT c.platform, c.binding_id, c.workspace, c.channel, c.chat_kind, m.account_id"
          " FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id AND m.role = 'user'"
          " AND m.account_id IN (SELECT a.account_id FROM accounts a WHERE a.person_id = :person"
          " AND a.platform = c.platform AND a.workspace = c.workspace)"
          " WHERE c.id = :c GROUP BY c.platform, c.binding_id, c.workspace, c.channel, c.chat_kind, m.account_id")


class ConversationSearch:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], counts: Counts = personal_only) -> None:
        self._sessions = sessions
        self._counts = counts  # whether a conversation is still the person's (channel membership)

    async def _place(self, s: AsyncSession, person_id: str, conversation_id: str) -> Place | None:
        rows = (await s.execute(text(_PLACE), {"c": conversation_id, "person": person_id})).all()
        if not rows:
            return None
        first = rows[0]
        return Place(first[0], first[1], first[2], first[3], first[4], tuple(sorted({r[5] for r in rows if r[5]})))

    async def listing(self, person_id: str, binding_id: str, limit: int,
                      before: tuple[datetime, str] | None = None) -> list[Listed]:
        """The person's conversations under one binding, the most recently active first; `before`
        (the last one of a page: its activity and id) starts the next page after it."""
        where = " WHERE x.last < :bt OR (x.last = :bt AND x.id < :bid)" if before is not None else ""
        statement = text(
            f"SELECT x.id, x.title, x.first, x.last FROM (SELECT c.id, c.title, {_FIRST} AS first, {_LAST} AS last"
            f" FROM conversations c WHERE c.binding_id = :b AND c.id IN ({_MINE})) x{where}"
            " ORDER BY x.last DESC, x.id DESC LIMIT :n")
        params: dict[str, object] = {"person": person_id, "b": binding_id, "n": limit}
        if before is not None:
            statement = statement.bindparams(bindparam("bt", type_=_TS))
            params |= {"bt": before[0], "bid": before[1]}
        async with self._sessions() as s:
            dialect = s.bind.dialect.name
            rows = (await s.execute(statement, params)).all()
        return [Listed(r[0], title_of(r[1], r[2]), _when(r[3], dialect)) for r in rows]

    async def search(self, person_id: str, query: str, limit: int, *, skip_run: str | None = None,
                     binding_id: str | None = None) -> Results:
        """The person's best-matching conversations, best first (under one binding, when given), and how
        many channel conversations were left out unconfirmed. Raises QueryError for a query that cannot match."""
        parse(query)  # the same refusals on both engines
        within = " AND m.conversation_id IN (SELECT id FROM conversations WHERE binding_id = :b)" if binding_id else ""
        async with self._sessions() as s:
            dialect = s.bind.dialect.name
            if dialect == "sqlite":
                # Before the session takes the connection: the messages stored so far are all indexed.
                # Unless another process holds the write lock past the bound: a read is not refused
                # under a lock (WAL), so the search goes on with what is indexed (all but the latest).
                with contextlib.suppress(StoreUnavailable):
                    await message_index.catch_up(s.bind)
                rows = (await s.execute(text(
                    "SELECT m.conversation_id, snippet(messages_fts, 0, '**', '**', '…', 24), bm25(messages_fts)"
                    " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                    f" WHERE messages_fts MATCH :q AND m.conversation_id IN ({_MINE})"
                    " AND m.role IN ('user', 'assistant') AND (m.run_id IS NULL OR m.run_id != :skip)"
                    f"{within} ORDER BY bm25(messages_fts) LIMIT :n"),
                    {"q": fts5_query(query), "person": person_id, "skip": skip_run or "", "n": MAX_HITS,
                     "b": binding_id})).all()
            else:
                rows = (await s.execute(text(
                    f"SELECT m.conversation_id, ts_headline({_CFG}, m.text, q,"
                    " 'StartSel=**, StopSel=**, MaxWords=30, MinWords=12, ShortWord=0'),"
                    " -ts_rank_cd(m.search_tsv, q) AS score"
                    f" FROM messages m, websearch_to_tsquery({_CFG}, :q) q"
                    " WHERE m.search_tsv @@ q"
                    f" AND m.conversation_id IN ({_MINE})"
                    " AND m.role IN ('user', 'assistant') AND (m.run_id IS NULL OR m.run_id != :skip)"
                    f"{within} ORDER BY score LIMIT :n"),
                    {"q": query, "person": person_id, "skip": skip_run or "",
                     "n": MAX_HITS, "b": binding_id})).all()
            best: dict[str, tuple[str, int]] = {}
            for conversation_id, passage, _score in rows:  # ordered best first
                first, count = best.get(conversation_id, (passage, 0))
                best[conversation_id] = (first, count + 1)
        # Best first until `limit` count; the platform is asked outside any database session.
        found: list[Found] = []
        unconfirmed = 0
        for conversation_id in best:
            if len(found) >= limit:
                break
            async with self._sessions() as s:
                place = await self._place(s, person_id, conversation_id)
            still = None if place is None else await self._counts(place)
            if not still:
                unconfirmed += still is None
                continue
            async with self._sessions() as s:
                info = (await s.execute(text(
                    f"SELECT c.platform, c.chat_kind, c.title, {_FIRST}, {_LAST}"
                    " FROM conversations c WHERE c.id = :c"), {"c": conversation_id})).one()
            passage, matched = best[conversation_id]
            found.append(Found(conversation_id, info[0], info[1], title_of(info[2], info[3]),
                               _when(info[4], dialect), matched, " ".join(passage.split())))
        return Results(found, unconfirmed)

    async def took_part(self, person_id: str, conversation_id: str) -> bool | None:
        """Whether the conversation is the person's now: they spoke in it, and (a channel's) are still
        in its channel. None when the platform could not confirm the membership."""
        async with self._sessions() as s:
            found = await s.scalar(text(f"SELECT 1 FROM ({_MINE}) mine WHERE mine.conversation_id = :c"),
                                   {"c": conversation_id, "person": person_id})
            if found is None:
                return False
            place = await self._place(s, person_id, conversation_id)
        return False if place is None else await self._counts(place)

    async def read(self, conversation_id: str, offset: int, count: int) -> Window | None:
        """`count` messages of a conversation from `offset`, in the order they were written."""
        async with self._sessions() as s:
            dialect = s.bind.dialect.name
            info = (await s.execute(text("SELECT platform, chat_kind FROM conversations WHERE id = :c"),
                                    {"c": conversation_id})).one_or_none()
            if info is None:
                return None
            total = await s.scalar(text(
                "SELECT count(*) FROM messages WHERE conversation_id = :c AND role IN ('user', 'assistant')"),
                {"c": conversation_id})
            rows = (await s.execute(text(
                "SELECT role, sender_name, text, created_at FROM messages"
                " WHERE conversation_id = :c AND role IN ('user', 'assistant')"
                " ORDER BY created_at, id LIMIT :n OFFSET :o"), {"c": conversation_id, "n": count, "o": offset})).all()
        lines = [Said(r[0], r[1] or "", r[2] if len(r[2]) <= MAX_MESSAGE_CHARS else r[2][:MAX_MESSAGE_CHARS] + " …(cut)",
                      _when(r[3], dialect)) for r in rows]
        return Window(info[0], info[1], lines, int(total or 0))
