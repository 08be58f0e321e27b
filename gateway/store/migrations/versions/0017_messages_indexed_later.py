"""SQLite: a message is indexed for full-text search after its transaction, not inside it.

0008's trigger indexed every message in the transaction that wrote it, and FTS5 flushes a segment
of its own at each commit: 21-23 % of the store's CPU per message (bench/README.md, Round 10),
twice a message (the person's message, the reply). Now the insert trigger only notes the message's
id in `messages_fts_pending` (a plain table, written in the same transaction: a crash loses no
note), and `gateway.store.message_index` indexes what is noted in batches, from the daemon's
sweep and before every conversation search (so a search still finds a message stored a moment
before it). A noted message is not in the index yet, so deleting or editing one only changes the
note; the index is asked to forget only what it holds.

PostgreSQL is unchanged: its generated tsvector column is computed with the row, and the GIN
index already defers its own insertions (fastupdate).

Revision ID: 0017
Revises: 0016
"""

from alembic import op

revision = "0017"
down_revision = "0016"

_NOT_NOTED = "WHERE NOT EXISTS (SELECT 1 FROM messages_fts_pending WHERE id = old.id)"

SQLITE_UP = [
    "CREATE TABLE messages_fts_pending (id INTEGER PRIMARY KEY)",
    "DROP TRIGGER messages_fts_insert",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT OR IGNORE INTO messages_fts_pending (id) VALUES (new.id); END",
    # Forgotten by the index only if it was indexed (FTS5 must be told exactly what it holds).
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    f"INSERT INTO messages_fts (messages_fts, rowid, text) SELECT 'delete', old.id, old.text {_NOT_NOTED}; "
    "DELETE FROM messages_fts_pending WHERE id = old.id; END",
    # An edited message is noted again: the next batch indexes its new text.
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN "
    f"INSERT INTO messages_fts (messages_fts, rowid, text) SELECT 'delete', old.id, old.text {_NOT_NOTED}; "
    "INSERT OR IGNORE INTO messages_fts_pending (id) VALUES (new.id); END",
]
SQLITE_DOWN = [
    # 0008 indexes in the message's transaction: what is still noted is indexed first.
    "INSERT INTO messages_fts (rowid, text) SELECT m.id, m.text FROM messages_fts_pending p JOIN messages m ON m.id = p.id",
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE messages_fts_pending",
    # 0008's triggers, restated rather than imported: a migration stays as it was written.
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text); END",
]


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_DOWN:
            op.execute(statement)
