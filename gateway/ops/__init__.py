"""Operating the daemon: the CLI, metrics, logs, systemd, retention, the admin's people and db commands."""
