"""Knowledge collections' queries: documents by content hash, their chunks, and full-text search.

Chunks are indexed by the database itself (migration 0008): an FTS5 table kept in step by
triggers on SQLite (Porter-stemmed words), a generated `search_tsv` column (english) with a GIN
index on PostgreSQL, queried with `websearch_to_tsquery` and ranked with `ts_rank_cd`.
A search first asks for every word; when that finds nothing it asks for any of them, so a
question in plain words still finds the passages that share the most.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.clock import Clock
from gateway.store import driver
from gateway.store.fulltext import KNOWLEDGE_PG_CONFIG, Term, fts5_query, parse
from gateway.store.models import KnowledgeChunk, KnowledgeDocument

PASSAGE_CHARS = 1_500
# The configuration the stored vectors were made with (migration 0008), for the query.
_CFG = f"'{KNOWLEDGE_PG_CONFIG}'::regconfig"


@dataclass(frozen=True)
class Chunk:
    heading: str
    anchor: str
    text: str


@dataclass(frozen=True)
class Document:
    path: str
    content_hash: str
    title: str
    chunks: list[Chunk]


@dataclass(frozen=True)
class Passage:
    collection: str
    path: str
    title: str
    heading: str
    anchor: str
    text: str

    @property
    def citation(self) -> str:
        return f"{self.collection}/{self.path}" + (f"#{self.anchor}" if self.anchor else "")


def _any_of(query: str) -> str | None:
    """The same words, any of them (exclusions kept), or None when that is the same query."""
    groups = parse(query)
    terms: list[Term] = [t for g in groups for t in g]
    wanted = [t for t in terms if not t.exclude]
    if len(groups) == len(wanted):
        return None
    quoted = [f'"{t.text}"' if " " in t.text else t.text for t in wanted]
    return " or ".join(quoted) + "".join(f' -"{t.text}"' for t in terms if t.exclude)


class KnowledgeStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions, self._clock = sessions, clock

    async def hashes(self, collection: str) -> dict[str, str]:
        """Each indexed file's content hash, by path."""
        async with self._sessions() as s:
            rows = await s.execute(select(KnowledgeDocument.path, KnowledgeDocument.content_hash)
                                   .where(KnowledgeDocument.collection == collection))
            return {path: digest for path, digest in rows.all()}

    async def replace(self, collection: str, documents: Sequence[Document], removed: Sequence[str] = ()) -> None:
        """Write these documents' chunks in place of what was indexed for them, and drop `removed`, in one transaction."""
        now = self._clock.now()
        paths = [d.path for d in documents] + list(removed)
        async with self._sessions() as s, s.begin():
            if paths:
                old = select(KnowledgeDocument.id).where(KnowledgeDocument.collection == collection,
                                                         KnowledgeDocument.path.in_(paths))
                await s.execute(delete(KnowledgeChunk).where(KnowledgeChunk.document_id.in_(old)))
                await s.execute(delete(KnowledgeDocument).where(KnowledgeDocument.collection == collection,
                                                                KnowledgeDocument.path.in_(paths)))
            for doc in documents:
                row = KnowledgeDocument(collection=collection, path=doc.path, content_hash=doc.content_hash,
                                        title=doc.title[:500], indexed_at=now)
                s.add(row)
                await s.flush()
                s.add_all([KnowledgeChunk(document_id=row.id, seq=i, heading=c.heading[:500], anchor=c.anchor[:200],
                                          text=c.text) for i, c in enumerate(doc.chunks)])

    async def forget(self, keep: Sequence[str]) -> None:
        """Drop every collection not in `keep` (one removed from the config)."""
        names = {f"k{i}": collection for i, collection in enumerate(keep)}

        def program(q: driver.Statements) -> driver.Program[bool]:
            row = yield q.one("SELECT 1 FROM knowledge_documents"
                              + (f" WHERE collection NOT IN ({', '.join(':' + n for n in names)})" if names else "")
                              + " LIMIT 1", **names)
            return row is not None

        # Every start asks, and there is mostly nothing to drop: read on the driver, written only if there is.
        if not await driver.read(self._sessions.kw["bind"], program):
            return
        async with self._sessions() as s, s.begin():
            old = select(KnowledgeDocument.id).where(KnowledgeDocument.collection.not_in(list(keep)))
            await s.execute(delete(KnowledgeChunk).where(KnowledgeChunk.document_id.in_(old)))
            await s.execute(delete(KnowledgeDocument).where(KnowledgeDocument.collection.not_in(list(keep))))

    async def search(self, collections: Sequence[str], query: str, top_k: int) -> list[Passage]:
        """The best passages for `query` in these collections. Raises QueryError for a query that cannot match."""
        found = await self._search(collections, query, top_k)
        if not found and (loose := _any_of(query)) is not None:
            found = await self._search(collections, loose, top_k)
        return found

    async def _search(self, collections: Sequence[str], query: str, top_k: int) -> list[Passage]:
        async with self._sessions() as s:
            if s.bind.dialect.name == "sqlite":
                statement = text(
                    "SELECT d.collection, d.path, d.title, c.heading, c.anchor, c.text"
                    " FROM knowledge_fts JOIN knowledge_chunks c ON c.id = knowledge_fts.rowid"
                    " JOIN knowledge_documents d ON d.id = c.document_id"
                    " WHERE knowledge_fts MATCH :q AND d.collection IN :cols"
                    " ORDER BY bm25(knowledge_fts, 3.0, 1.0) LIMIT :k"
                ).bindparams(bindparam("cols", expanding=True))
                params = {"q": fts5_query(query), "cols": list(collections), "k": top_k}
            else:
                statement = text(
                    "SELECT d.collection, d.path, d.title, c.heading, c.anchor, c.text"
                    " FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id,"
                    f" websearch_to_tsquery({_CFG}, :q) q"
                    " WHERE c.search_tsv @@ q"
                    " AND d.collection IN :cols"
                    " ORDER BY ts_rank_cd(c.search_tsv, q) DESC,"
                    " c.id LIMIT :k"
                ).bindparams(bindparam("cols", expanding=True))
                parse(query)  # the same refusals on both engines
                params = {"q": query, "cols": list(collections), "k": top_k}
            rows = (await s.execute(statement, params)).all()
        return [Passage(r[0], r[1], r[2], r[3], r[4], r[5] if len(r[5]) <= PASSAGE_CHARS
                        else r[5][:PASSAGE_CHARS].rsplit(" ", 1)[0] + " …") for r in rows]
