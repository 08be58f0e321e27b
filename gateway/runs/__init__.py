"""Runs: the conversation queue, the runner, the turn context tools receive, background and delegated runs, Stop, models."""
