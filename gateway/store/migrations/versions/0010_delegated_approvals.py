"""Approvals asked for by a delegate: who asked (shown on the card) and the parent's call it is inside.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.add_column(sa.Column("delegate", sa.String(200), nullable=True))
        t.add_column(sa.Column("parent_call_id", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as t:
        t.drop_column("parent_call_id")
        t.drop_column("delegate")
