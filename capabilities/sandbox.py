"""sandbox: files in a workspace that survives between turns (`ls`, `read_file`, `glob`, `grep`, `write_file`, `edit_file`;
`share_file` out into the conversation, `fetch_file` in from its attachments: capabilities/sandbox_read_back.py).

The `state` backend: a workspace is rows in this gateway's database (capability state, capability
"sandbox", one row per file: key = path, value = text), capped at `max_bytes` per workspace. There
is no shell: `execute` is declared (so a binding can already gate or rename it) but never offered,
and `include_execute: true` is refused at load until a container backend exists; `backend:
service` likewise. run_python computes and forgets; this remembers.

Whose workspace a run touches is `session_scope`, a data-sharing policy, resolved here from
server-side facts of the run (`workspace_for`), never from the model; no tool takes a scope:

- run: nobody shares it; a fresh workspace every turn.
- conversation (default): everyone in that chat. A Slack thread is its own conversation, so
  threads do not share; a DM is its own chat.
- channel: every thread of one channel; a DM has its own channel id, so people still get their own.
- user: one person (the linked person, across every surface they reach this agent on). Only in a
  one-to-one conversation (a DM, the web chat): in a group chat or channel the tools refuse, in a
  sentence, because a person's files would be read out where everyone in the channel hears the
  answer (the same rule memory follows: what is kept alone with somebody is not read back to a
  room). A run with nobody to attribute files to (an anonymous surface) is refused too.
- agent: everyone who talks to this agent, across the organization. It crosses a boundary between
  people, so it warns at load, every answer says whose workspace it is, and every access (tool,
  path, who, where) is recorded in the audit (`audit_log`) and logged.

Each key is prefixed with the agent's id: two agents never share a workspace.

Some paths are refused whatever the approval policy says (the seed's list): credentials
(`.env`, `*.pem`, `*.key`, `credentials*`, `.ssh/`, `.aws/`) and the system tree (`/etc`, `/usr`,
`/proc` and their siblings) cannot be read, written or edited; grep drops matches inside them;
ls and glob still show their names. Writing is not side-effecting for approvals (a workspace is
scratch space); a binding that wants it gated sets `tool_approval: {write_file: required}`.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import posixpath
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset
from sqlalchemy.exc import OperationalError

from gateway.outbound.adapter import OutboundFile, PlatformError
from gateway.outbound.files import FileRefused
from gateway.patterns import PatternRefused, compile_pattern, glob_match
from gateway.store.capability_state import CapabilityState
from gateway.runs.turn import Turn

from . import sandbox_read_back as read_back
from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

log = logging.getLogger("gateway.sandbox")

CAPABILITY = "sandbox"
AUDIT = "sandbox-audit"
MAX_PATH = 180  # the state row's key holds 200; a little room for what may prefix it later
LIST_CEILING = 100  # ls, glob and grep stop here and say so
READ_LINES = 2000
LINE_CHARS = 2000
GREP_LINE_CHARS = 300

Scope = Literal["run", "conversation", "channel", "user", "agent"]


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["state", "service"] = Field(
        default="state", description="state: files kept in this gateway's database (no shell); service: not available yet")
    connection_id: str | None = Field(default=None, description="service only: a registered sandbox connection")
    runtime: str | None = Field(default=None, description="service only: a runtime alias the connection allows")
    session_scope: Scope = Field(
        default="conversation",
        description="Who shares the workspace: run (nobody, fresh every turn), conversation (everyone in that chat; "
        "a Slack thread is a chat), channel (every thread of a channel; a DM is its own), user (one person, in "
        "one-to-one conversations only), agent (everyone who talks to this agent: warned and audited)",
    )
    include_execute: bool = Field(default=False, description="A shell (execute); needs a container backend, none yet")
    max_bytes: int = Field(default=5_000_000, ge=1_000, le=100_000_000,
                           description="Bytes of file text one workspace may hold")


def check(config: BaseModel) -> list[tuple[tuple[str | int, ...], str]]:
    assert isinstance(config, SandboxConfig)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if config.backend == "service":
        problems.append((("backend",), "backend: service needs a container sandbox, and this deployment has no "
                                       "sandbox connection yet: use backend: state (files, no shell)"))
    for name in ("connection_id", "runtime"):
        if getattr(config, name) is not None and config.backend == "state":
            problems.append(((name,), f"{name} is for backend: service; the state backend takes none"))
    if config.include_execute:
        problems.append((("include_execute",), "include_execute: true needs a container backend (a real shell), "
                                               "which this deployment does not have yet: remove it"))
    return problems


# --- whose workspace ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workspace:
    scope: str  # the capability-state scope: agent id / kind : owner
    label: str  # whose workspace it is, in words, for the model and the person
    audited: bool = False


@dataclass(frozen=True, slots=True)
class NoWorkspace:
    reason: str


NO_USER_IN_GROUP = (
    "Refused: this agent keeps one workspace per person (session_scope: user), and a person's files are only "
    "opened in a one-to-one conversation (a direct message or the web chat), never where a whole channel hears "
    "the answer. Nothing was read or written. Ask the person to continue in a direct message."
)
NO_USER_ANONYMOUS = (
    "Refused: this agent keeps one workspace per person (session_scope: user), and this conversation has nobody "
    "to attribute files to. Nothing was read or written."
)


def workspace_for(turn: Turn, scope: Scope) -> Workspace | NoWorkspace:
    """The one workspace this run may touch, from server-side facts of the run. Pure."""
    owner = turn.owner(CAPABILITY)  # lent to a delegate (share_with_delegates): the parent's workspace
    agent = owner.agent.id
    conv = turn.conversation
    if scope == "run":
        return Workspace(f"{agent}/run:{turn.scope(CAPABILITY, 'run')}",
                         "this turn's scratch workspace (gone after this reply)")
    if scope == "conversation":
        return Workspace(f"{agent}/conversation:{conv.id}", "this conversation's workspace: everyone in it sees these files")
    if scope == "channel":
        return Workspace(f"{agent}/channel:{conv.platform}:{conv.workspace}:{conv.channel}",
                         "this channel's workspace: every thread in it sees these files")
    if scope == "user":
        if turn.requester.person_id is None:
            return NoWorkspace(NO_USER_ANONYMOUS)
        if not turn.one_to_one:
            return NoWorkspace(NO_USER_IN_GROUP)
        return Workspace(f"{agent}/user:{turn.requester.person_id}",
                         f"{turn.requester.name or 'this person'}'s own workspace, on every surface they use")
    return Workspace(f"{agent}/agent", f"the workspace shared by everyone who talks to agent {agent!r}, "
                                       "across the organization", audited=True)


# --- paths --------------------------------------------------------------------------------

_SYSTEM = frozenset({"etc", "usr", "proc", "sys", "dev", "boot", "root", "bin", "sbin", "lib", "lib64", "var"})


def normalize(path: str) -> str | None:
    """A workspace path ('' is the root), or None when it is not one. Leading / and /workspace/ are accepted."""
    p = path.strip().replace("\\", "/")
    if any(ord(c) < 32 for c in p):
        return None
    p = posixpath.normpath("/" + p).lstrip("/")  # '..' cannot climb above the root
    if p in (".", ""):
        return ""
    if p == "workspace" or p.startswith("workspace/"):
        p = p[len("workspace/"):] if p != "workspace" else ""
    return p if len(p) <= MAX_PATH else None


def off_limits(path: str) -> bool:
    """Credentials and the system tree: never read, written or edited, whatever the approval policy says."""
    parts = path.split("/")
    if parts[0] in _SYSTEM:
        return True
    name = parts[-1].lower()
    return (name == ".env" or name.endswith((".pem", ".key")) or name.startswith("credentials")
            or ".ssh" in parts or ".aws" in parts)


# --- the tools ----------------------------------------------------------------------------

PATH_RULE = "a path inside the workspace, e.g. notes/draft.md (a leading / or /workspace/ is fine)"
REFUSED_PATH = ("Refused: {path} is off limits (credentials such as .env, *.pem, *.key, credentials*, .ssh/, .aws/ "
                "and the system tree /etc, /usr, /proc … cannot be read, written or edited). Use another name.")


STORE_SILENT = "the workspace store did not answer; try again"


@dataclass
class _Access:
    """One tool call's open workspace: the run, whose files it may touch, and the operations on them."""

    ctx: RunContext[Turn]
    state: CapabilityState
    workspace: Workspace
    config: SandboxConfig

    async def files(self) -> dict[str, str]:
        return await self.state.items(CAPABILITY, self.workspace.scope)

    async def put(self, name: str, content: str, stored: dict[str, str]) -> tuple[bool, str]:
        """Store the file if the workspace has room: (saved, the sentence about room)."""
        used = sum(len(t.encode()) for n, t in stored.items() if n != name)
        size = len(content.encode())
        if used + size > self.config.max_bytes:
            return False, (f"Not saved: the workspace holds at most {self.config.max_bytes:,} bytes and {used:,} are "
                           f"used by other files; {name} would need {size:,}. Shorten files (write_file with shorter "
                           "text) or keep less.")
        await self.state.put(CAPABILITY, self.workspace.scope, name, content)
        return True, f"{name} is {size:,} bytes; the workspace uses {used + size:,} of {self.config.max_bytes:,} bytes."

    async def missing(self, name: str, tool: str) -> str:
        names = sorted(await self.state.keys(CAPABILITY, self.workspace.scope))
        shown = ", ".join(names[:30]) or "none yet"
        return trouble(self.ctx, "mistake", f"There is no file {name!r} in the workspace. Files here: {shown}. "
                                            f"Call {tool} with one of those paths, or use glob to find one.")

    async def audit(self, tool: str, path: str) -> None:
        if not self.workspace.audited:
            return
        turn = self.ctx.deps
        entry = {"tool": tool, "path": path, "person": turn.requester.person_id, "name": turn.requester.name,
                 "conversation": turn.conversation.id, "run": turn.run_id, "at": turn.clock.now().isoformat()}
        log.info("sandbox access in an agent-wide workspace", extra={"sandbox": entry})
        key = f"{entry['at']}|{turn.run_id}|{self.ctx.tool_call_id or tool}"[:200]
        await self.state.put(AUDIT, turn.agent.id, key, json.dumps(entry))

    def labelled(self, text: str) -> str:
        return f"[{self.workspace.label}]\n{text}" if self.workspace.audited else text


async def audit_log(state: CapabilityState, agent_id: str) -> list[dict[str, Any]]:
    """Every access to an agent-wide workspace of `agent_id`, oldest first."""
    return [json.loads(v) for v in (await state.items(AUDIT, agent_id)).values()]


class WorkspaceTools:
    """The file tools on the one workspace `config.session_scope` gives each run: one method a tool.

    Every tool starts with the same preamble, so no tool checks a path its own way: `_open` (whose
    workspace, or the refusal), then `_folder` (a folder, "" the top) or `_file` (a file's name, never
    an off-limits one) on the path the model gave; `_one_file` also reads the file. The tools that
    move a file between the workspace and the conversation are together below `share_file`.
    """

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    def toolset(self) -> FunctionToolset[Turn]:
        return FunctionToolset([self.ls, self.read_file, self.glob, self.grep, self.write_file, self.edit_file,
                                self.share_file, read_back.tool(self._open)])

    # --- the preamble ---------------------------------------------------------------------

    def _open(self, ctx: RunContext[Turn]) -> _Access | str:
        found = workspace_for(ctx.deps, self.config.session_scope)
        if isinstance(found, NoWorkspace):
            return trouble(ctx, "refusal", found.reason)
        return _Access(ctx, ctx.deps.state, found, self.config)

    @staticmethod
    def _bad_path(ctx: RunContext[Turn], path: str, tool: str) -> str:
        return trouble(ctx, "mistake", f"{path!r} is not a workspace path: use {PATH_RULE}, at most {MAX_PATH} "
                                       f"characters. For example {tool}(path=\"notes/draft.md\").")

    def _folder(self, ctx: RunContext[Turn], path: str, tool: str) -> tuple[_Access, str] | str:
        """(the workspace, a folder's name: "" is the top) for a tool that looks at a folder; else what to answer."""
        a = self._open(ctx)
        if isinstance(a, str):
            return a
        folder = normalize(path)
        return (a, folder) if folder is not None else self._bad_path(ctx, path, tool)

    def _file(self, ctx: RunContext[Turn], path: str, tool: str) -> tuple[_Access, str] | str:
        """(the workspace, a file's name) for a tool that touches one file; else what to answer (a mistake,
        or a refusal for an off-limits path)."""
        a = self._open(ctx)
        if isinstance(a, str):
            return a
        name = normalize(path)
        if not name:
            return self._bad_path(ctx, path, tool)
        if off_limits(name):
            return trouble(ctx, "refusal", REFUSED_PATH.format(path=name))
        return a, name

    async def _one_file(self, ctx: RunContext[Turn], path: str, tool: str) -> tuple[_Access, str, str] | str:
        """(the workspace, the file's name, its text) for a tool that reads one file; else what to answer."""
        opened = self._file(ctx, path, tool)
        if isinstance(opened, str):
            return opened
        a, name = opened
        try:
            text = await a.state.get(CAPABILITY, a.workspace.scope, name)
            if text is None:
                return await a.missing(name, tool)
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        return a, name, text

    # --- looking ---------------------------------------------------------------------------

    async def ls(self, ctx: RunContext[Turn], path: str = "") -> str:
        """List the files and folders directly inside a folder of your workspace, with each file's size.

        The workspace keeps files across turns (who shares it is this agent's setting, and the
        answer says so when it is shared beyond this conversation). ls looks one level deep; to find
        files anywhere below a folder use glob, and to search inside files use grep.

        Args:
            path: The folder to list; default "" (the workspace's top). A leading / or /workspace/ is fine.

        Returns:
            One line per entry, "name/" for a folder and "name (N bytes)" for a file, sorted by name;
            at most 100 lines, then a line saying how many more there are. "The workspace is empty"
            or "No folder named …" when there is nothing there.
        """
        opened = self._folder(ctx, path, "ls")
        if isinstance(opened, str):
            return opened
        a, folder = opened
        try:
            stored = await a.files()
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        await a.audit("ls", folder)
        if folder in stored:
            return a.labelled(f"{folder} is a file ({len(stored[folder].encode())} bytes); read it with read_file.")
        prefix = f"{folder}/" if folder else ""
        entries: dict[str, str] = {}
        for name, text in stored.items():
            if not name.startswith(prefix):
                continue
            head, sep, _ = name[len(prefix):].partition("/")
            entries[head + sep] = f"{head}/" if sep else f"{head} ({len(text.encode())} bytes)"
        if not entries:
            return a.labelled("The workspace is empty." if not stored else f"No folder named {folder!r} here.")
        lines = [entries[k] for k in sorted(entries)]
        more = len(lines) - LIST_CEILING
        lines = lines[:LIST_CEILING] + ([f"({more} more not shown; list a subfolder)"] if more > 0 else [])
        return a.labelled("\n".join(lines))

    async def glob(self, ctx: RunContext[Turn], pattern: str) -> str:
        """Find files in your workspace whose paths match a pattern, in every folder below.

        Unlike ls, glob searches recursively: `**/*.md` finds Markdown files at any depth, `*.csv`
        only at the top. To search inside files, use grep.

        Args:
            pattern: A path pattern: `*` and `?` match within one folder name, `**/` any folders;
                e.g. `**/*.md`, `reports/2024-*.csv`. Required.

        Returns:
            Matching paths with their sizes, one per line, sorted; at most 100, then a line saying
            how many more matched. "No file matches" when none does.
        """
        a = self._open(ctx)  # a pattern, not a path: it names no file to check
        if isinstance(a, str):
            return a
        if not pattern.strip():
            return trouble(ctx, "mistake", "pattern is empty: e.g. glob(pattern=\"**/*.md\").")
        try:
            stored = await a.files()
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        await a.audit("glob", pattern)
        wanted = normalize(pattern) or ""
        hits = [f"{n} ({len(t.encode())} bytes)" for n, t in stored.items() if glob_match(wanted, n)]
        if not hits:
            return a.labelled(f"No file matches {pattern!r}.")
        more = len(hits) - LIST_CEILING
        return a.labelled("\n".join(hits[:LIST_CEILING] + ([f"({more} more matched; narrow the pattern)"] if more > 0 else [])))

    async def grep(self, ctx: RunContext[Turn], pattern: str, path: str = "",
                   ignore_case: bool = False) -> str:
        """Search the text of the files in your workspace for a regular expression.

        Use it to find where something is written; to find files by name, use glob.

        Args:
            pattern: A regular expression (RE2 syntax: as Python's, without backreferences or
                lookaround), e.g. `total|sum` or `TODO`; at most 1000 characters. Required.
            path: Search only this file or the files under this folder; default "" (everywhere).
            ignore_case: Match regardless of case; default false.

        Returns:
            One line per matching line, its path, line number and text joined by colons (the text
            cut at 300 characters), in path order; at most 100 lines, then a line saying how many more matched. "No match" when
            none. Lines inside off-limits files (credentials, the system tree) are never returned.
        """
        opened = self._folder(ctx, path, "grep")
        if isinstance(opened, str):
            return opened
        a, where = opened
        try:
            rx = compile_pattern(pattern, ignore_case=ignore_case)
        except PatternRefused as e:
            return trouble(ctx, "mistake", f"{pattern[:200]!r} is not a regular expression grep can run ({e}); "
                                           "escape special characters, e.g. grep(pattern=\"total\\\\(s\\\\)\").")
        try:
            stored = await a.files()
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        await a.audit("grep", where)
        hits: list[str] = []
        total = 0
        for name, text in stored.items():
            if where and name != where and not name.startswith(where + "/"):
                continue
            if off_limits(name):
                continue  # filtered, not refused: a search over everything must not return a line from one
            for number, line in enumerate(text.splitlines(), start=1):
                if rx.search(line):
                    total += 1
                    if len(hits) < LIST_CEILING:
                        cut = line if len(line) <= GREP_LINE_CHARS else line[:GREP_LINE_CHARS] + " …(cut)"
                        hits.append(f"{name}:{number}: {cut}")
        if not hits:
            return a.labelled(f"No match for {pattern!r}.")
        more = total - len(hits)
        return a.labelled("\n".join(hits + ([f"({more} more matching lines; narrow path or pattern)"] if more > 0 else [])))

    async def read_file(self, ctx: RunContext[Turn], path: str, offset: Annotated[int, Field(ge=1)] = 1,
                        limit: Annotated[int, Field(ge=1, le=READ_LINES)] = READ_LINES) -> str:
        """Read a text file from your workspace.

        Use it to pick up a draft or notes kept in an earlier turn, or a file you just wrote. To
        find a file, use ls or glob; to find a passage, grep.

        Args:
            path: The file, e.g. notes/draft.md. Required.
            offset: The first line to show, counting from 1; default 1.
            limit: How many lines to show; default and at most 2000.

        Returns:
            A line naming the file, its size and which lines are shown, then the text itself (each
            line cut at 2,000 characters). When the file has more lines than shown, a last line says
            how to read on with offset. A missing file is an error listing files that do exist; an
            off-limits path (credentials, the system tree) is refused.
        """
        found = await self._one_file(ctx, path, "read_file")
        if isinstance(found, str):
            return found
        a, name, text = found
        await a.audit("read_file", name)
        lines = text.splitlines()
        if offset > max(len(lines), 1):
            return trouble(ctx, "mistake", f"{name} has {len(lines)} lines, so there is no line {offset}: "
                                           f"call read_file(path=\"{name}\") to read it from the start.")
        shown = lines[offset - 1:offset - 1 + limit]
        body = "\n".join(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " …(line cut)" for line in shown)
        last = offset - 1 + len(shown)
        head = f"{name} ({len(text.encode())} bytes, {len(lines)} lines; showing {offset}-{last}):"
        tail = f"\n(lines {last + 1}-{len(lines)} not shown; call read_file(path=\"{name}\", offset={last + 1}))" \
            if last < len(lines) else ""
        return a.labelled(f"{head}\n{body}{tail}")

    # --- changing ------------------------------------------------------------------------

    async def write_file(self, ctx: RunContext[Turn], path: str, content: str) -> str:
        """Create a file in your workspace or replace its whole text; it is kept for later turns.

        Use it to keep a draft, notes, a table you computed, anything worth picking up later. To
        change part of a file, use edit_file instead. Who else sees the file depends on this agent's
        workspace setting; the answers say so when it is shared beyond this conversation.

        Args:
            path: The file, e.g. drafts/summary.md; folders need not exist first. Required.
            content: The file's whole new text. Required.

        Returns:
            A sentence saying the file was created or replaced, its size and how much of the
            workspace's room is used; a sentence saying the workspace is full when the text would
            not fit. An off-limits path (credentials, the system tree) is refused.
        """
        opened = self._file(ctx, path, "write_file")
        if isinstance(opened, str):
            return opened
        a, name = opened
        try:
            stored = await a.files()
            if any(other.startswith(name + "/") for other in stored):
                return trouble(ctx, "mistake", f"{name!r} is a folder here; write to a file inside it, "
                                               f"e.g. {name}/notes.md")
            parents = ["/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)]
            if clash := next((p for p in parents if p in stored), None):
                return trouble(ctx, "mistake", f"{clash!r} is a file, so it cannot hold {name!r}: choose another path")
            existed = name in stored
            saved, room = await a.put(name, content, stored)
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        await a.audit("write_file", name)
        if not saved:
            return a.labelled(room)
        return a.labelled(f"{'Replaced' if existed else 'Created'} {name}. {room}")

    async def edit_file(self, ctx: RunContext[Turn], path: str, old_text: str, new_text: str,
                        replace_all: bool = False) -> str:
        """Change part of a file in your workspace: replace an exact passage with new text.

        Use it for a correction or an addition to a file you keep; to rewrite a file from scratch,
        use write_file. Read the file first so old_text matches exactly.

        Args:
            path: The file, e.g. drafts/summary.md. Required.
            old_text: The exact passage to replace, copied from read_file, spacing included. Required.
            new_text: What replaces it; empty to remove the passage. Required.
            replace_all: Replace every occurrence instead of requiring exactly one; default false.

        Returns:
            A sentence saying how many passages were replaced and the file's new size. A missing
            file, a passage that does not occur, or one that occurs more than once (without
            replace_all) is an error saying how to call again; an off-limits path is refused; a
            sentence says so when the workspace would be over its size limit.
        """
        opened = self._file(ctx, path, "edit_file")
        if isinstance(opened, str):
            return opened
        a, name = opened
        if not old_text:
            return trouble(ctx, "mistake", "old_text is empty: copy the exact passage to replace from read_file.")
        try:
            stored = await a.files()
            text = stored.get(name)
            if text is None:
                return await a.missing(name, "edit_file")
            count = text.count(old_text)
            if count == 0:
                return trouble(ctx, "mistake", f"old_text does not occur in {name}. Read it with "
                                               f"read_file(path=\"{name}\") and copy the passage exactly.")
            if count > 1 and not replace_all:
                return trouble(ctx, "mistake", f"old_text occurs {count} times in {name}: include more of the "
                                               "surrounding text so it occurs once, or pass replace_all=true.")
            saved, room = await a.put(name, text.replace(old_text, new_text), stored)
        except OperationalError:
            return trouble(ctx, "transient", STORE_SILENT)
        await a.audit("edit_file", name)
        if not saved:
            return a.labelled(room)
        replaced = count if replace_all else 1
        return a.labelled(f"Replaced {replaced} passage{'s' if replaced != 1 else ''} in {name}. {room}")

    # --- between the workspace and the conversation ---------------------------------------
    # The tool that brings a file in (an attachment of this conversation copied into the workspace),
    # fetch_file, is capabilities/sandbox_read_back.py's, on this workspace (`_open`): see `toolset`.

    async def share_file(self, ctx: RunContext[Turn], path: str) -> str:
        """Post a file of your workspace into this conversation, under its name, for the person to open or download.

        Use it when the person asked for a file ("give me that as a CSV") or a result reads better as a
        download than as text in the reply. Write the file first (write_file); for numbers to look at,
        create_chart draws them instead. People in this conversation see the file as soon as it is posted.

        Args:
            path: The workspace file to post, e.g. out/signups.csv. Required. Its name is what people see.

        Returns:
            A sentence saying the file was posted (its name and size), or why not (a missing file lists
            the files that do exist, an off-limits path is refused, and a file over what this platform
            takes is named with both sizes).
        """
        found = await self._one_file(ctx, path, "share_file")
        if isinstance(found, str):
            return found
        a, name, text = found
        media_type = mimetypes.guess_type(name)[0] or "text/plain"
        file = OutboundFile(posixpath.basename(name), text.encode(), media_type)
        try:
            shared = await ctx.deps.share_files([file], "", "")
        except FileRefused as e:
            return f"{name} was not posted: {e}."
        except PlatformError as e:
            return trouble(ctx, "transient", f"the platform did not take {name} ({e})")
        await a.audit("share_file", name)
        return f"{shared.note[:1].upper()}{shared.note[1:]}."


def toolset(config: SandboxConfig) -> FunctionToolset[Turn]:
    """The six file tools on the one workspace `config.session_scope` gives each run (and share_file, fetch_file)."""
    return WorkspaceTools(config).toolset()


def instructions_for(turn: Turn, scope: Scope) -> str:
    found = workspace_for(turn, scope)
    if isinstance(found, NoWorkspace):
        return ("You have workspace file tools, but this conversation has no workspace for you: the tools will say "
                "why. Do not promise to keep files here.")
    return (f"You have a workspace that keeps files between turns (ls, read_file, glob, grep, write_file, edit_file; "
            f"share_file posts one here, fetch_file copies in a file people attached): "
            f"{found.label}. There is no shell. Keep drafts and work in progress there.")


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, SandboxConfig)
    if check(ctx.config):
        return None  # refused at load; never offered half-built
    scope = ctx.config.session_scope

    # Of the run's deps, never of the build: one built capability serves every run of the agent (`shared`).
    def instructions(run: RunContext[Turn]) -> str:
        return instructions_for(run.deps, scope)

    return simple(instructions=instructions, toolsets=[toolset(ctx.config)])


def validate_config(config: Any, report: Any) -> None:
    """Warn at load about agent-wide workspaces: they cross a boundary between people."""
    for agent_id, agent in config.agents.items():
        for i, entry in enumerate(agent.capabilities):
            if entry.id == CAPABILITY and isinstance(entry.config, dict) and entry.config.get("session_scope") == "agent":
                report(f"agent:{agent_id}", ("capabilities", i, "config", "session_scope"),
                       "agent shares one workspace with everyone who talks to this agent, across the "
                       "organization: a person may see files somebody else wrote. Every access is audited.",
                       warning=True)


register(CapabilityDecl(
    id=CAPABILITY,
    name="Files & shell",
    category="analysis",
    tools=(
        ToolDecl("ls", summary="List a folder of the workspace."),
        ToolDecl("read_file", summary="Read a file of the workspace."),
        ToolDecl("glob", summary="Find workspace files by path pattern, recursively."),
        ToolDecl("grep", summary="Search the text of workspace files."),
        ToolDecl("write_file", summary="Create or replace a workspace file."),
        ToolDecl("edit_file", summary="Replace an exact passage of a workspace file."),
        ToolDecl("share_file", side_effecting=True,
                 summary="Post a workspace file into the conversation (people see it at once: gated)."),
        ToolDecl("fetch_file", summary="Copy files attached in this conversation into the workspace."),
        ToolDecl("execute", side_effecting=True,
                 summary="Run a shell command (declared, not offered: needs a container backend)."),
    ),
    build=build,
    config_model=SandboxConfig,
    check=check,
    scopes=("sandbox:execute",),
    # Whose workspace (and the line saying so) is worked out from the run's deps at each request and call.
    shared=True,
    description=(
        "A workspace of files that survives between turns, kept in this gateway's database (state backend, no "
        "shell). session_scope decides who shares it: run, conversation (default), channel, user (one-to-one "
        "only), agent (warned at load, audited)."
    ),
))
