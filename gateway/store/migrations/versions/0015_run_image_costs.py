"""Runs keep what their generated images cost: how many were drawn and their price in US dollars.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("images", sa.Integer, nullable=False, server_default="0"))
        t.add_column(sa.Column("image_cost_usd", sa.Float, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.drop_column("image_cost_usd")
        t.drop_column("images")
