"""People: one-time link codes (stored hashed) and the audit of links and unlinks.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "link_codes",
        sa.Column("code_hash", sa.String(64), primary_key=True),
        sa.Column("person_id", sa.String(40), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False, index=True),
    )
    op.create_table(
        "people_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("person_id", sa.String(40), nullable=False, index=True),
        sa.Column("account", sa.String(500), nullable=False),
        sa.Column("at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("people_audit")
    op.drop_table("link_codes")
