"""Approvals: cards, gated calls with their decisions, per-conversation approval modes.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "approval_cards",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("run_id", sa.String(40), nullable=False, index=True),
        sa.Column("conversation_id", sa.String(40), nullable=False),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("card_ref", sa.String(200), nullable=True),
        sa.Column("deciders", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False, index=True),
    )
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("card_id", sa.String(40), sa.ForeignKey("approval_cards.id"), nullable=False, index=True),
        sa.Column("run_id", sa.String(40), nullable=False, index=True),
        sa.Column("conversation_id", sa.String(40), nullable=False, index=True),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("tool_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("capability", sa.String(100), nullable=False),
        sa.Column("arguments", sa.Text, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("decided_by", sa.String(200), nullable=True),
        sa.Column("decided_by_account", sa.String(200), nullable=True),
        sa.Column("decided_at", TS, nullable=True),
        sa.Column("surface", sa.String(40), nullable=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "conversation_modes",
        sa.Column("conversation_id", sa.String(40), primary_key=True),
        sa.Column("approve_all", sa.Boolean, nullable=False),
        sa.Column("ask_every_tool", sa.Boolean, nullable=False),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column("changed_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("conversation_modes")
    op.drop_table("approvals")
    op.drop_table("approval_cards")
