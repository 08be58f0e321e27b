"""fetch_file: a file someone attached in this conversation, copied into the sandbox workspace.

share_file carries a file one way, out of the workspace into the conversation; this is the other
way (the seed's "Reading a file back into the sandbox"): a CSV shared three turns ago becomes a
workspace file the agent can grep, edit and share again. The rules are the seed's:

- Names are resolved against what this conversation's messages carried (the gateway's record of
  each attachment, as `view_image` reads it), newest first; a name not shared here is not found,
  never a guess at a platform's storage. The bytes are fetched again through the adapter
  (`FetchesAttachments`, the bot's own credentials, the gateway's `attachment_max_bytes`).
- It needs a workspace: where this run has none (`session_scope: user` in a group) it is refused
  by name before anything is fetched, like every sandbox tool.
- Eight files a call, 64 MiB a file (and the gateway's attachment cap below that). A refusal names
  the file and its size, and nothing is written when one fires: a batch never lands half-copied.
- `dir` is inside the workspace (its top by default) and created by writing into it; one that
  climbs out (`..` above the top) or into an off-limits place is refused before a byte is written.
- A name is never reused: a file already in the workspace (or earlier in the same call) under that
  name is not overwritten; the newcomer lands under its own id (`q3-1a2b3c4d.csv`). The path in
  the answer is the one to use.
- The bytes go to the workspace, never into the conversation: the model is told paths and sizes.
  This workspace (the `state` backend) keeps text, so a file that is not UTF-8 text is refused by
  name, and an image is refused in favour of `view_image`, which is how a model looks at one.

The attachment's name is the platform's and the sender's choice, so it is only a suggestion: the
last component after any `/` or `\\`, control characters and anything but letters, digits and
`._-()` made `_`, no leading dots (no hidden files), at most 100 characters. It cannot leave the
workspace or the folder asked for, and the off-limits names (`.env`, `*.key`, `credentials*`, …)
are refused as they are for write_file.

Not side-effecting for approvals, like write_file: it reads what the conversation already shared
into scratch space. A binding that wants it gated sets `tool_approval: {fetch_file: required}`.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic_ai.tools import RunContext
from sqlalchemy.exc import OperationalError

from gateway.messages import Attachment
from gateway.outbound.adapter import AttachmentTooLarge, PlatformError
from gateway.outbound.files import size_text
from gateway.runs.turn import Turn
from gateway.store.capability_state import CapabilityState

from .failures import trouble
from .view_image import shared_earlier

MAX_FILES = 8
MAX_FILE_BYTES = 64 * 1024 * 1024
NAME_CHARS = 100
_UNSAFE = re.compile(r"[^\w.\-() ]")


class OpenWorkspace(Protocol):
    """What the tool needs of the sandbox's open workspace (`capabilities.sandbox._Access`)."""

    state: CapabilityState
    workspace: Any  # .scope (the capability-state scope), .audited
    config: Any  # .max_bytes

    async def files(self) -> dict[str, str]: ...

    async def audit(self, tool: str, path: str) -> None: ...

    def labelled(self, text: str) -> str: ...


def landing_name(raw: str) -> str:
    """A workspace file name made of an attachment's name. Pure; never empty, never a path."""
    base = raw.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", "".join(c if c.isprintable() else "_" for c in base)).strip().lstrip(".")
    if len(base) > NAME_CHARS:
        stem, ext = posixpath.splitext(base)
        base = stem[: NAME_CHARS - len(ext[:12])] + ext[:12]
    return base or "attachment"


def _own_name(name: str, ref: str, taken: set[str]) -> str:
    """`name` with the attachment's id (a hash of its platform reference) before the extension."""
    stem, ext = posixpath.splitext(name)
    tag = hashlib.sha256(ref.encode()).hexdigest()[:8]
    candidate, n = f"{stem}-{tag}{ext}", 1
    while candidate in taken:
        n += 1
        candidate = f"{stem}-{tag}-{n}{ext}"
    return candidate


def tool(open_workspace: Callable[[RunContext[Turn]], OpenWorkspace | str]) -> Callable[..., Awaitable[str]]:
    """The fetch_file tool on the workspace `open_workspace` gives each call (or its refusal)."""

    async def fetch_file(ctx: RunContext[Turn], names: list[str], dir: str = "") -> str:
        """Copy files someone attached in this conversation into your workspace, to work on them there.

        Use it when a file shared on an earlier message (a CSV, a log, notes) should be read in parts,
        searched, edited or shared again: afterwards read_file, grep and share_file work on it. To look
        at an image, use view_image instead (images are not copied). The files are fetched again from
        the platform; their contents are not shown to you here.

        Args:
            names: One to eight file names as the conversation shows them ("[Files shared with this
                message: q3.csv ...]"); the newest file of each name is taken. Required.
            dir: The workspace folder to put them in, e.g. "data"; default "" (the workspace's top).
                It is created if needed and cannot be outside the workspace.

        Returns:
            A line per file with the path it landed at (a name already in the workspace is kept, and
            the new file lands under its own id: use the path given) and its size, then a JSON line
            {"files": [{"name", "path", "bytes", "content_type"}]}. A name not shared here is an
            error listing the names that were; a file over 64 MiB or the gateway's cap, an image, a
            file that is not text, or a folder outside the workspace is refused by name, and then
            nothing is written.
        """
        from .sandbox import CAPABILITY, STORE_SILENT, normalize, off_limits  # the sandbox imports this module

        a = open_workspace(ctx)
        if isinstance(a, str):
            return a  # no workspace for this run: refused before anything is fetched
        turn = ctx.deps
        wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
        if not 1 <= len(wanted) <= MAX_FILES:
            return trouble(ctx, "mistake", f"give one to {MAX_FILES} file names, e.g. fetch_file(names=[\"q3.csv\"])")
        if turn.fetch_attachment is None:
            return trouble(ctx, "refusal", "Files cannot be fetched again on this platform: ask the person to paste "
                                           "the text, or write it with write_file. Nothing was written.")
        folder = normalize(dir)
        climbs = posixpath.normpath(dir.strip().replace("\\", "/") or ".").split("/")[0] == ".."
        if folder is None or climbs or (folder and off_limits(f"{folder}/x")):
            return trouble(ctx, "refusal", f"Refused: dir {dir!r} is not a folder inside the workspace (it may not "
                                           "climb out with .., nor be in the system tree or a credentials folder). "
                                           "Nothing was written.")
        try:
            shared = await shared_earlier(turn)
            stored = await a.files()
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        entries = []
        for name in wanted:
            entry = next((f for f in shared if f.get("name") == name), None)
            if entry is None:
                known = ", ".join(sorted({str(f.get("name")) for f in shared})[:20]) or "none"
                return trouble(ctx, "mistake", f"no file named {name!r} was shared in this conversation "
                                               f"(shared here: {known})")
            entries.append((name, entry))
        cap = MAX_FILE_BYTES
        fetched: list[tuple[str, str, str, str]] = []  # (name, content type, text, reference)
        for name, entry in entries:
            mime = str(entry.get("type") or "").split(";")[0].strip().lower()
            size = entry.get("size")
            if mime.startswith("image/"):
                return f"Not copied: {name} is an image ({mime}); look at it with view_image. Nothing was written."
            if isinstance(size, int) and size > cap:
                return (f"Not copied: {name} is {size_text(size)}; fetch_file takes files of at most "
                        f"{size_text(cap)}. Nothing was written.")
            try:
                data = await turn.fetch_attachment(Attachment(name, mime, size, ref=entry.get("ref")))
            except AttachmentTooLarge:
                shown = f" ({size_text(size)})" if isinstance(size, int) else ""
                return f"Not copied: {name}{shown} is larger than this gateway reads. Nothing was written."
            except PlatformError as e:
                return trouble(ctx, "transient", f"the platform did not give {name} back ({e}); nothing was written")
            if data is None:
                return f"Not copied: {name} can no longer be fetched from the platform. Nothing was written."
            if len(data) > cap:
                return (f"Not copied: {name} is {size_text(len(data))}; fetch_file takes files of at most "
                        f"{size_text(cap)}. Nothing was written.")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return (f"Not copied: {name} ({mime or 'unknown type'}) is not text, and this workspace keeps text "
                        "files only. Nothing was written.")
            fetched.append((name, mime, text, str(entry.get("ref") or name)))
        taken = set(stored) | {p for n in stored for p in _parents(n)}
        landed: list[tuple[str, str, str, str]] = []  # (name, path, content type, text)
        for name, mime, text, ref in fetched:
            base = landing_name(name)
            path = f"{folder}/{base}" if folder else base
            if path in taken or any(other.startswith(path + "/") for other in taken):
                path = _own_name(path, ref, taken)
            if off_limits(path):
                return trouble(ctx, "refusal", f"Refused: {name} would land at {path}, which is off limits "
                                               "(credentials and the system tree). Nothing was written.")
            if any(p in stored for p in _parents(path)):
                return trouble(ctx, "refusal", f"Refused: a file in the workspace is in the way of {path}: "
                                               "choose another dir. Nothing was written.")
            taken.add(path)
            landed.append((name, path, mime, text))
        used = sum(len(t.encode()) for t in stored.values())
        adding = sum(len(t.encode()) for _, _, _, t in landed)
        if used + adding > a.config.max_bytes:
            return a.labelled(f"Not copied: the workspace holds at most {a.config.max_bytes:,} bytes and {used:,} "
                              f"are used; these files need {adding:,}. Nothing was written.")
        try:
            for _, path, _, text in landed:
                await a.state.put(CAPABILITY, a.workspace.scope, path, text)
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        for _, path, _, _ in landed:
            await a.audit("fetch_file", path)
        lines = [f"{name} -> {path} ({len(text.encode()):,} bytes)" for name, path, _, text in landed]
        summary = {"files": [{"name": name, "path": path, "bytes": len(text.encode()), "content_type": mime}
                             for name, path, mime, text in landed]}
        return a.labelled("\n".join(lines) + "\n" + json.dumps(summary))

    return fetch_file


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
