"""Memory: notes agents keep per person or per chat, and the audit of administrators' reads.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "memory_notes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("agent_id", sa.String(100), nullable=False),
        sa.Column("scope", sa.String(10), nullable=False),
        sa.Column("owner", sa.String(500), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("suppressed", sa.Boolean, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("agent_id", "scope", "owner", "name"),
        sa.Index(None, "scope", "owner"),
    )
    op.create_table(
        "memory_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("subject", sa.String(40), nullable=False, index=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_audit")
    op.drop_table("memory_notes")
