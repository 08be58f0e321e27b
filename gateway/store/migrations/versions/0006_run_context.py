"""Capability state (durable state a capability keeps, by scope) and the audit of approval-mode switches.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "capability_state",
        sa.Column("capability", sa.String(100), primary_key=True),
        sa.Column("scope", sa.String(500), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "mode_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String(40), nullable=False, index=True),
        sa.Column("who", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(200), nullable=True),
        sa.Column("surface", sa.String(40), nullable=False),
        sa.Column("approve_all", sa.Boolean, nullable=False),
        sa.Column("ask_every_tool", sa.Boolean, nullable=False),
        sa.Column("at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mode_changes")
    op.drop_table("capability_state")
