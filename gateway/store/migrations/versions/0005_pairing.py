"""Pairing: pending codes for unknown direct-message senders, paired accounts, wrong attempts.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pairing_requests",
        sa.Column("code", sa.String(16), primary_key=True),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("workspace", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(200), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False, index=True),
        sa.Column("notified_at", TS, nullable=False),
        sa.UniqueConstraint("binding_id", "account_id"),
    )
    op.create_table(
        "paired_accounts",
        sa.Column("binding_id", sa.String(100), primary_key=True),
        sa.Column("account_id", sa.String(200), primary_key=True),
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("workspace", sa.String(200), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("approved_by", sa.String(200), nullable=False),
        sa.Column("approved_at", TS, nullable=False),
    )
    op.create_table(
        "pairing_failures",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("failed_at", TS, nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("pairing_failures")
    op.drop_table("paired_accounts")
    op.drop_table("pairing_requests")
