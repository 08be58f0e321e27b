"""Scheduled tasks and their claimed occurrences (the schedules capability, admin schedules).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "scheduled_tasks",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("conversation_id", sa.String(40), nullable=False),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("origin", sa.String(10), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("cron", sa.String(100), nullable=True),
        sa.Column("at", TS, nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("catch_up", sa.Boolean, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("next_at", TS, nullable=True),
        sa.Column("creator_person_id", sa.String(40), nullable=True),
        sa.Column("creator_account", sa.String(200), nullable=True),
        sa.Column("creator_name", sa.String(200), nullable=False),
        sa.Column("last_run_id", sa.String(40), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_index("ix_scheduled_tasks_status_next_at", "scheduled_tasks", ["status", "next_at"])
    op.create_index("ix_scheduled_tasks_conversation_id", "scheduled_tasks", ["conversation_id"])
    op.create_table(
        "schedule_occurrences",
        sa.Column("task_id", sa.String(40), nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("late", sa.Boolean, nullable=False),
        sa.Column("claimed_by", sa.String(80), nullable=False),
        sa.Column("claimed_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("task_id", "due_at", name="pk_schedule_occurrences"),
    )


def downgrade() -> None:
    op.drop_table("schedule_occurrences")
    op.drop_table("scheduled_tasks")
