"""Durable state: SQLAlchemy 2 async on SQLite (embedded default) or PostgreSQL (several replicas)."""
