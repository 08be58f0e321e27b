"""A small local spool on disk: what a platform's adapter acked while the database refused it.

The database is what is refusing, so this is not in it: one file per entry in a directory of its own
(beside the SQLite file, `spool_directory`). An entry is written to a temporary name, fsynced, renamed
into place and the directory fsynced, all before the caller acks: a stop, a crash or a `kill -9` after
the ack leaves either the whole entry or none (a temporary file, removed at the next load). The files
hold people's message text: mode 0600 in a 0700 directory, and nothing here logs what they hold.

Blocking file calls, meant for a worker thread (`asyncio.to_thread`): the caller bounds how long its
ack waits for them. What an entry means (its bounds, when to drop it) is the caller's policy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gateway.store.daemon_lock import sqlite_file

T = TypeVar("T")

ENTRY, PARTIAL, SET_ASIDE = ".json", ".tmp", ".unreadable"


def spool_directory(database_url: str, config_directory: Path) -> Path:
    """Where the spool lives: beside the SQLite file (`gateway.db.spool/`, on the disk the state is
    on); on PostgreSQL in systemd's state directory (`$STATE_DIRECTORY`, the shipped unit's
    `StateDirectory=`), else in the config directory."""
    file = sqlite_file(database_url)
    if file is not None:
        return file.with_name(file.name + ".spool")
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return (Path(state) if state else config_directory) / "gateway.spool"


class Spool:
    """One directory of entries, one JSON file each, named by a hash of the entry's key (a key is
    the platform's id, never trusted as a file name)."""

    def __init__(self, directory: Path, log: logging.Logger) -> None:
        self.directory, self._log = directory, log

    def _path(self, key: str) -> Path:
        return self.directory / (hashlib.sha256(key.encode()).hexdigest()[:32] + ENTRY)

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Durably write `record` under `key` (replacing one there). Raises OSError (a read-only disk,
        a full one): the caller keeps the entry in memory instead."""
        data = json.dumps(record, separators=(",", ":")).encode()
        # 0700 for the spool and its parent (the gateway's spool, one directory per binding in it).
        self.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        final = self._path(key)
        partial = final.with_name(f".{final.stem}.{uuid.uuid4().hex[:8]}{PARTIAL}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, final)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        self._sync_directory()  # the rename itself survives a power cut only once the directory is synced

    def remove(self, key: str) -> None:
        """The entry is done with (stored, or given up). One left behind by a failure here is read
        again at the next load: the caller's submit must be idempotent."""
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as e:
            self._log.warning("could not remove spool entry %s: %s", self._path(key).name, e)

    def load(self, parse: Callable[[dict[str, Any]], T]) -> list[T]:
        """Every whole entry, through `parse`. An unreadable one (cut short, not JSON, refused by
        `parse` with KeyError / TypeError / ValueError) is logged and set aside (renamed, never read
        again, kept for the operator); a temporary file (a crash mid-write, before its ack) is removed."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as e:
            self._log.warning("cannot read the spool %s: %s", self.directory, e)
            return []
        entries: list[T] = []
        for name in names:
            path = self.directory / name
            if name.endswith(PARTIAL):
                self._log.warning("spool entry %s was cut short by a crash while it was written: removed", name)
                path.unlink(missing_ok=True)
                continue
            if not name.endswith(ENTRY):
                continue
            try:
                record = json.loads(path.read_bytes())
                if not isinstance(record, dict):
                    raise TypeError("not an object")
                entries.append(parse(record))
            except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
                # The error's type only: a message could quote what the entry holds.
                aside = path.with_suffix(SET_ASIDE)
                self._log.warning("spool entry %s is unreadable (%s): skipped, set aside as %s",
                                  name, type(e).__name__, aside.name)
                try:
                    path.replace(aside)
                except OSError:
                    pass
        return entries

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
