"""Knowledge: full-text search over messages (conversation search) and document collections.

The full-text objects are dialect-specific and live only in the database (not in the models):
- SQLite: FTS5 external-content tables `messages_fts` and `knowledge_fts`, kept in step with
  `messages` and `knowledge_chunks` by triggers, so every write path (ORM or driver) indexes.
- PostgreSQL: a generated, stored `search_tsv` tsvector column with a GIN index, maintained by
  the database; 'simple' for messages (whole words, case-folded, not stemmed), 'english' for
  documents.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"

TS = sa.DateTime(timezone=True)

SQLITE_UP = [
    # unicode61: whole words, case-folded, no stemming; diacritics kept, as PostgreSQL's 'simple' does.
    "CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 0')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text); END",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    "CREATE VIRTUAL TABLE knowledge_fts USING fts5(heading, text, content='knowledge_chunks', "
    "content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER knowledge_fts_insert AFTER INSERT ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text); END",
    "CREATE TRIGGER knowledge_fts_delete AFTER DELETE ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_fts(knowledge_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text); "
    "END",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS knowledge_fts_delete",
    "DROP TRIGGER IF EXISTS knowledge_fts_insert",
    "DROP TABLE IF EXISTS knowledge_fts",
    "DROP TRIGGER IF EXISTS messages_fts_update",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TABLE IF EXISTS messages_fts",
]
POSTGRES_UP = [
    # Stored, so ranking reads the vector instead of parsing each matching row's text again.
    "ALTER TABLE messages ADD COLUMN search_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED",
    "CREATE INDEX ix_messages_text_fts ON messages USING gin (search_tsv)",
    "ALTER TABLE knowledge_chunks ADD COLUMN search_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, heading || ' ' || text)) STORED",
    "CREATE INDEX ix_knowledge_chunks_fts ON knowledge_chunks USING gin (search_tsv)",
]
POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS ix_knowledge_chunks_fts",
    "ALTER TABLE knowledge_chunks DROP COLUMN IF EXISTS search_tsv",
    "DROP INDEX IF EXISTS ix_messages_text_fts",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_tsv",
]


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("collection", sa.String(100), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("indexed_at", TS, nullable=False),
        sa.UniqueConstraint("collection", "path"),
    )
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("document_id", sa.Integer, sa.ForeignKey("knowledge_documents.id"), nullable=False, index=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("heading", sa.String(500), nullable=False),
        sa.Column("anchor", sa.String(200), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )
    # A person's conversations are found through their accounts' messages.
    op.create_index("ix_messages_account_id", "messages", ["account_id"])
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_UP if dialect == "sqlite" else POSTGRES_UP if dialect == "postgresql" else []:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_DOWN if dialect == "sqlite" else POSTGRES_DOWN if dialect == "postgresql" else []:
        op.execute(statement)
    op.drop_index("ix_messages_account_id", "messages")
    op.drop_table("knowledge_chunks")
    op.drop_table("knowledge_documents")
