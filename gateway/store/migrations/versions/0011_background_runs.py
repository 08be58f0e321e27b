"""Background runs (subagents mode async) and the run kind that continues after one reports back.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(20), nullable=False, server_default="turn"))
    op.create_table(
        "background_runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("conversation_id", sa.String(40), nullable=False),
        sa.Column("parent_run_id", sa.String(40), nullable=False),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=False),
        sa.Column("delegate", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("transcript", sa.Text, nullable=False),
        sa.Column("requester_person_id", sa.String(40), nullable=True),
        sa.Column("requester_account", sa.String(200), nullable=True),
        sa.Column("requester_name", sa.String(200), nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("report_run_id", sa.String(40), nullable=True),
        sa.Column("stop_requested_by", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("lease_owner", sa.String(80), nullable=True),
        sa.Column("lease_expires", TS, nullable=True),
    )
    op.create_index("ix_background_runs_conversation_id_status", "background_runs", ["conversation_id", "status"])
    op.create_index("ix_background_runs_status", "background_runs", ["status"])
    op.create_index("ix_background_runs_parent_run_id", "background_runs", ["parent_run_id"])


def downgrade() -> None:
    op.drop_table("background_runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("kind")
