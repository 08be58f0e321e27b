"""The one reader for files under the config: knowledge collections, context folders, skills.

These folders are often a docs repository, and a repository can commit a symlink:
`docs/leak.txt -> /proc/self/environ` once put the daemon's every key and token into the search
index and from there into the model's context. So nothing under the config is read with a
plain `open`: each file is resolved (every symlink and `..` followed) and refused when it lands
outside its folder's root, in the kernel's pseudo-filesystems (/proc, /sys, /dev), or on
anything but a regular file (a FIFO would block the reader for ever, a device streams without
end). The file is then opened without following a link and checked again on the open
descriptor, so a link swapped in between is refused too. A refusal names the file and the
reason, for `agent-gateway check` and the daemon's log (docs/security.md, "Files under the config").

Blocking I/O: callers run it in a thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))


class FileRefused(OSError):
    """A file under the config that is not read; `reason` says why, for the admin."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def confine(root: Path, path: Path) -> Path:
    """`path` resolved, if it is a regular file inside `root`; FileRefused otherwise."""
    base = root.resolve()
    link = " (a symlink)" if path.is_symlink() else ""
    try:
        target = path.resolve(strict=True)
    except FileNotFoundError:
        raise FileRefused(path, f"a link to {os.readlink(path)!s}, which does not exist" if link
                          else "no such file") from None
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise FileRefused(path, f"cannot be resolved ({e})") from None
    if any(target == p or target.is_relative_to(p) for p in _PSEUDO):
        raise FileRefused(path, f"resolves to {target}, a system pseudo-file{link}")
    if not target.is_relative_to(base):
        raise FileRefused(path, f"resolves to {target}, outside {base}{link}")
    mode = target.stat().st_mode
    if not stat.S_ISREG(mode):
        raise FileRefused(path, f"is {_kind(mode)}, not a regular file")
    return target


def read_bytes(root: Path, path: Path, *, max_bytes: int | None = None) -> bytes:
    """The file's bytes, read only if `confine` lets it through (and at most `max_bytes`)."""
    target = confine(root, path)
    # O_NOFOLLOW: the final name cannot be a link now; O_NONBLOCK: a FIFO swapped in does not hang.
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(path, f"is {_kind(info.st_mode)}, not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileRefused(path, f"is larger than {max_bytes:,} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read() if max_bytes is None else f.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)


def read_text(root: Path, path: Path, *, max_bytes: int | None = None, errors: str = "strict") -> str:
    return read_bytes(root, path, max_bytes=max_bytes).decode("utf-8", errors=errors)


@dataclass(frozen=True)
class Entry:
    path: Path  # as found under the root (not resolved)
    refused: str | None  # why it is not read, or None


def files(root: Path, pattern: str = "**/*") -> Iterator[Entry]:
    """Every non-directory entry under `root` matching `pattern`, sorted, each with its refusal if any.

    Directories are walked without following links out (pathlib's `**` does not enter a linked
    folder); a link to a folder is reported, not entered."""
    for path in sorted(root.glob(pattern)):
        if path.is_dir() and not path.is_symlink():
            continue
        try:
            confine(root, path)
        except FileRefused as e:
            yield Entry(path, e.reason)
            continue
        except OSError as e:
            yield Entry(path, f"cannot be read ({e.strerror})")
            continue
        yield Entry(path, None)
