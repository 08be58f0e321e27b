"""Full-text search in the database we already run: what both engines share.

SQLite uses FTS5 tables kept in step with their source tables by triggers; PostgreSQL uses a
generated `search_tsv` column with a GIN index. Both are created by migration 0008 and are not
in the ORM models (the code never writes them), so `DATABASE_ONLY` names them for the test that
compares the models to the migrations.

Queries are written the way PostgreSQL's `websearch_to_tsquery` reads them — words, "quoted
phrases", `or`, and a leading `-` to exclude — and `fts5_query` turns them into FTS5's syntax
with the same meaning, so the tool text can promise one behaviour on both engines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Tables (and their FTS5 shadow tables, which share the prefix) and indexes only the database knows.
DATABASE_ONLY = ("messages_fts", "knowledge_fts", "ix_messages_text_fts", "ix_knowledge_chunks_fts", "search_tsv")

# PostgreSQL configurations: conversations are matched whole-word and case-folded, never stemmed
# (evenness across languages); documents are stemmed as English.
MESSAGES_PG_CONFIG = "simple"
KNOWLEDGE_PG_CONFIG = "english"

_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')


# A query is the model's (or a person's) text: its size is capped before it reaches the engine,
# where thousands of terms (an FTS5 expression, a tsquery) cost seconds of the database's time.
MAX_QUERY_CHARS = 1000
MAX_TERMS = 32


class QueryError(ValueError):
    """A query that cannot be run as written (empty, only exclusions, or too large); the text says why."""


@dataclass(frozen=True)
class Term:
    text: str
    exclude: bool


def parse(query: str) -> list[list[Term]]:
    """Alternatives (joined by `or`), each a list of terms that must all hold."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query):,} characters long; at most {MAX_QUERY_CHARS:,} are searched")
    groups: list[list[Term]] = [[]]
    tokens = list(_TOKEN.finditer(query))
    for i, m in enumerate(tokens):
        if m.group(3) is not None:
            word = m.group(3)
            if word.lower() == "or" and groups[-1] and i < len(tokens) - 1:
                groups.append([])
                continue
            exclude = word.startswith("-") and len(word) > 1
            text = word[1:] if exclude else word
        else:
            exclude, text = m.group(1) == "-", m.group(2)
        if re.search(r"\w", text):
            groups[-1].append(Term(text, exclude))
    groups = [g for g in groups if g]
    if sum(len(g) for g in groups) > MAX_TERMS:
        raise QueryError(f"the query has {sum(len(g) for g in groups)} words; at most {MAX_TERMS} are searched: "
                         "keep the few that matter")
    if not groups:
        raise QueryError("the query has no words to look for")
    if any(all(t.exclude for t in g) for g in groups):
        raise QueryError("a leading - only excludes a word; add at least one word to look for")
    return groups


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def fts5_query(query: str) -> str:
    """The same query in FTS5 syntax: every term quoted (a phrase when it has several words)."""
    alternatives = []
    for group in parse(query):
        wanted = " AND ".join(_quoted(t.text) for t in group if not t.exclude)
        expr = f"({wanted})"
        for t in group:
            if t.exclude:
                expr = f"({expr} NOT {_quoted(t.text)})"
        alternatives.append(expr)
    return " OR ".join(alternatives)
