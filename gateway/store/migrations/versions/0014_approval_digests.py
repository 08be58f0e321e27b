"""Approval items keep the digest of the arguments a decision is bound to (and their full text).

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.add_column(sa.Column("arguments_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.drop_column("arguments_digest")
