"""Patterns a model or a person wrote: matched in time linear in the text, never by backtracking.

Python's `re` backtracks: `(a+)+$` over 26 `a`s and a `!` takes seconds, each extra `a` doubles
it, and the event loop (every chat, /stop, SIGTERM) waits for it. So a pattern from the model or
from chat is compiled here, by RE2 (google-re2), whose automaton reads each character a bounded
number of times. RE2 refuses what needs backtracking (backreferences, lookaround); the refusal
is the pattern's mistake, told as such. The pattern is capped in length and RE2's compiled
program in memory, so neither the pattern nor its repetition counts can buy unbounded work.

Globs are matched here too, without a regular expression: `**` is matched segment by segment
with a table (a path of n segments against a glob of m segments costs at most n*m steps), so six
`**/` in a row over a deep path is as cheap as one (docs/security.md, "Patterns and other work on
the event loop").
"""

from __future__ import annotations

import fnmatch
from functools import lru_cache
from typing import Protocol

import re2

MAX_PATTERN_CHARS = 1000
# RE2's budget for one compiled pattern (its default is 8 MiB); `(x{1,999}){1,999}` needs more
# and is refused rather than built.
MAX_PROGRAM_BYTES = 1 << 20


class Matcher(Protocol):
    def search(self, text: str) -> object | None: ...


class PatternRefused(ValueError):
    """The pattern cannot be run: its text says why and what to write instead."""


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> Matcher:
    """A linear-time matcher for `pattern` (RE2 syntax, close to Python's), or PatternRefused."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefused(f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} are searched")
    return _compiled(pattern, ignore_case)


@lru_cache(maxsize=256)
def _compiled(pattern: str, ignore_case: bool) -> Matcher:
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # RE2 would print the pattern to stderr, past the log's formatter
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        raise PatternRefused(_why(str(e))) from None


def _why(error: str) -> str:
    reason = error.strip("b'\"")
    if "invalid perl operator: (?<" in reason or "invalid perl operator: (?=" in reason or "(?!" in reason:
        return f"{reason} (lookahead and lookbehind are not supported: match the text itself instead)"
    if "invalid escape sequence: \\" in reason and reason[-1:].isdigit():
        return f"{reason} (backreferences such as \\1 are not supported)"
    if "pattern too large" in reason:
        return f"{reason} (the pattern's repetitions expand too far: use smaller counts)"
    return reason


# --- globs ----------------------------------------------------------------------------------

MAX_GLOB_CHARS = 1000


def glob_match(pattern: str, path: str) -> bool:
    """Whether `path` ('a/b/c.md') matches `pattern`: `**` spans any number of folders (none too),
    `*` and `?` stay within one name, `[abc]` is a set; matched against the whole path."""
    if len(pattern) > MAX_GLOB_CHARS:
        raise PatternRefused(f"the glob is {len(pattern)} characters long; at most {MAX_GLOB_CHARS} are matched")
    return _glob_segments(tuple(_split(pattern)), tuple(path.split("/")))


def _split(pattern: str) -> list[str]:
    parts: list[str] = []
    for part in pattern.split("/"):
        if part == "**" and parts and parts[-1] == "**":
            continue  # `**/**` is one `**`
        parts.append(part)
    return parts


def _glob_segments(glob: tuple[str, ...], names: tuple[str, ...]) -> bool:
    # reach[j]: the first j names are matched by the glob segments seen so far. One row per
    # glob segment, one step per name: no backtracking, whatever the glob.
    reach = [True] + [False] * len(names)
    for part in glob:
        if part == "**":
            for j in range(1, len(names) + 1):
                reach[j] = reach[j] or reach[j - 1]
            continue
        if "**" in part:  # `a**b` inside one name: as `*` (it cannot span a folder there)
            part = part.replace("**", "*")
        after = [False] * (len(names) + 1)
        for j in range(len(names)):
            if reach[j] and _name_match(part, names[j]):
                after[j + 1] = True
        reach = after
        if not any(reach):
            return False
    return reach[len(names)]


def _name_match(part: str, name: str) -> bool:
    """One glob segment against one name: `*`, `?` and `[...]` by a two-pointer scan (linear in
    practice: it backtracks to the last `*` only, never nests)."""
    if not any(c in part for c in "*?["):
        return part == name
    return _wildcard(_tokens(part), name)


def _tokens(part: str) -> list[str]:
    """The segment as single-character tokens: '*', '?', a '[...]' set, or a literal character."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "[":
            end = part.find("]", i + 2)
            if end != -1:
                out.append(part[i : end + 1])
                i = end + 1
                continue
        out.append(c)
        i += 1
    return out


def _one(token: str, char: str) -> bool:
    if token == "?":
        return True
    if len(token) > 1:  # a set, as fnmatch reads it (`[!x]` negates)
        return fnmatch.fnmatchcase(char, token)
    return token == char


def _wildcard(tokens: list[str], name: str) -> bool:
    t = n = 0
    star, resume = -1, 0
    while n < len(name):
        if t < len(tokens) and tokens[t] != "*" and _one(tokens[t], name[n]):
            t += 1
            n += 1
        elif t < len(tokens) and tokens[t] == "*":
            star, resume = t, n
            t += 1
        elif star != -1:
            t, resume = star + 1, resume + 1
            n = resume
        else:
            return False
    while t < len(tokens) and tokens[t] == "*":
        t += 1
    return t == len(tokens)
