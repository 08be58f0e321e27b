"""Alembic environment: always handed a live connection by `gateway.store.engine.migrate`."""

from alembic import context

from gateway.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
