"""Stream events: a web conversation's live events, kept a few minutes for the other replicas.

Written and read only on PostgreSQL (several replicas); created on SQLite too so that the
schema is one on both engines.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "stream_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String(40), nullable=False),
        sa.Column("origin", sa.String(80), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_stream_events_conversation_id_created_at", "stream_events", ["conversation_id", "created_at"])
    op.create_index("ix_stream_events_created_at", "stream_events", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_stream_events_created_at", "stream_events")
    op.drop_index("ix_stream_events_conversation_id_created_at", "stream_events")
    op.drop_table("stream_events")
