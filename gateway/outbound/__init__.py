"""Replies out: the adapter contract, delivery, native streams, budgets, the typing indicator, orphaned posts."""
