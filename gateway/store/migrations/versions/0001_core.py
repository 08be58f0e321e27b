"""Core tables: people, accounts, conversations, messages, runs, the inbound ledger, deliveries.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "people",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("workspace", sa.String(200), nullable=False),
        sa.Column("account_id", sa.String(200), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("person_id", sa.String(40), sa.ForeignKey("people.id"), nullable=False, index=True),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("platform", "workspace", "account_id"),
    )
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("key", sa.String(500), nullable=False, unique=True),
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("workspace", sa.String(200), nullable=False),
        sa.Column("channel", sa.String(200), nullable=False),
        sa.Column("thread", sa.String(200), nullable=True),
        sa.Column("chat_kind", sa.String(10), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String(40), sa.ForeignKey("conversations.id"), nullable=False),
        sa.Column("run_id", sa.String(40), nullable=True, index=True),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("person_id", sa.String(40), nullable=True),
        sa.Column("account_id", sa.String(200), nullable=True),
        sa.Column("sender_name", sa.String(200), nullable=False),
        sa.Column("platform_message_id", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Index("ix_messages_conversation_id_id", "conversation_id", "id"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("conversation_id", sa.String(40), sa.ForeignKey("conversations.id"), nullable=False),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("agent_id", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("requester_person_id", sa.String(40), nullable=True),
        sa.Column("requester_account", sa.String(200), nullable=True),
        sa.Column("requester_name", sa.String(200), nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Index("ix_runs_conversation_id_status", "conversation_id", "status"),
        sa.Index("ix_runs_status", "status"),
    )
    op.create_table(
        "inbound_ledger",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("binding_id", sa.String(100), nullable=False),
        sa.Column("event_id", sa.String(300), nullable=False),
        sa.Column("received_at", TS, nullable=False),
        sa.UniqueConstraint("binding_id", "event_id"),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("platform_message_id", sa.String(200), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("run_id", "seq"),
    )
    op.create_table(
        "adapter_state",
        sa.Column("binding_id", sa.String(100), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("adapter_state", "deliveries", "inbound_ledger", "runs", "messages", "conversations", "accounts", "people"):
        op.drop_table(table)
