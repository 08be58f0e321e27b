"""The knowledge indexer: keeps each configured collection's chunks in the database, incrementally.

A daemon-lifetime part (started and stopped with the gateway, wired in gateway/extensions.py).
Every collection is indexed at start, again after a reload (the daemon calls `reloaded`), and every
`refresh_minutes`; in between it sleeps on neither a poll nor a timer unless a refresh is due. Only
files whose content hash changed are read and chunked; files gone from
the folder are dropped. Reading and chunking run in a worker thread; writes go through the async
engine in batches, so a large collection never holds the database for long.

Chunks follow headings: Markdown `#` headings, HTML `<h1>`–`<h6>`, a PDF page each, plain text
in paragraphs. A chunk's anchor is its heading's slug (GitHub's rule, `-1`, `-2` for repeats), so
a citation `collection/path#anchor` stays the same while the heading does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

from bindings import config_files
from gateway import markdown
from gateway.store.knowledge import Chunk, Document, KnowledgeStore
from gateway.tasks import cancel_and_wait

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig
    from bindings.models import KnowledgeCollection

log = logging.getLogger("capabilities.knowledge")

READABLE = {".md", ".markdown", ".txt", ".text", ".rst", ".html", ".htm", ".pdf"}
MAX_CHUNK = 2_000
MAX_FILE_BYTES = 20_000_000
BATCH = 100  # documents per write transaction

_FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _split(text: str) -> list[str]:
    """A section's text in pieces of at most MAX_CHUNK characters, cut at paragraph boundaries."""
    text = text.strip()
    if len(text) <= MAX_CHUNK:
        return [text] if text else []
    pieces, current = [], ""
    for para in re.split(r"\n\s*\n", text):
        while len(para) > MAX_CHUNK:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(para[:MAX_CHUNK])
            para = para[MAX_CHUNK:]
        if current and len(current) + len(para) + 2 > MAX_CHUNK:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
    if current.strip():
        pieces.append(current)
    return [p.strip() for p in pieces if p.strip()]


def chunk_markdown(text: str, fallback_title: str) -> tuple[str, list[Chunk]]:
    """Sections under each heading; the heading shown is its path (Guide › Install), the anchor its slug."""
    chunks: list[Chunk] = []
    trail: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    title = ""
    heading, anchor, body = "", "", []
    in_code = False

    def close() -> None:
        for piece in _split("\n".join(body)):
            chunks.append(Chunk(heading or title or fallback_title, anchor, piece))

    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        found = None if in_code else markdown.heading(line, indent=0)
        if found is None or not found[1]:
            body.append(line)
            continue
        close()
        level, name = found
        if level == 1 and not title:
            title = name
        trail = [(lv, h) for lv, h in trail if lv < level] + [(level, name)]
        heading = " › ".join(h for _, h in trail)
        base = slug(name)
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchor = base if count == 0 else f"{base}-{count}"
        body = []
    close()
    return title or fallback_title, chunks


class _HtmlText(HTMLParser):
    BLOCKS = {"p", "div", "li", "br", "tr", "section", "article", "pre", "table", "ul", "ol", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "nav", "footer"):
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self.BLOCKS:
            self.out.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "nav", "footer"):
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif re.fullmatch(r"h[1-6]", tag):
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.out.append(data.replace("\n", " "))


def html_to_markdown(source: str) -> tuple[str, str]:
    parser = _HtmlText()
    parser.feed(source)
    text = "".join(parser.out)
    text = "\n".join(line.strip() for line in text.splitlines())
    return parser.title.strip(), re.sub(r"\n{3,}", "\n\n", text)


def read_document(path: Path, relative: str, digest: str, data: bytes) -> Document | None:
    """One file (its bytes, as the safe reader read them) as chunks, or None when it holds no readable text."""
    suffix = path.suffix.lower()
    stem = path.stem
    if suffix == ".pdf":
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        meta = reader.metadata
        title = (meta.title if meta and meta.title else "") or stem
        chunks = [Chunk(f"page {n}", f"page={n}", piece) for n, page in enumerate(reader.pages, 1)
                  for piece in _split(page.extract_text() or "")]
        return Document(relative, digest, title, chunks) if chunks else None
    raw = data.decode("utf-8", errors="replace")
    if suffix in (".html", ".htm"):
        html_title, raw = html_to_markdown(raw)
        title, chunks = chunk_markdown(raw, html_title or stem)
        title = html_title or title
    elif suffix in (".md", ".markdown"):
        title, chunks = chunk_markdown(raw, stem)
    else:
        title, chunks = stem, [Chunk(stem, "", piece) for piece in _split(raw)]
    return Document(relative, digest, title, chunks) if chunks else None


def collection_root(config_dir: Path, spec: KnowledgeCollection) -> Path:
    root = Path(spec.path)
    return root if root.is_absolute() else config_dir / root


@dataclass
class Scan:
    changed: list[Document]
    removed: list[str]
    unchanged: int
    problems: list[str]


def indexable(path: Path) -> bool:
    """A name the indexer reads (a readable suffix, not hidden)."""
    return path.suffix.lower() in READABLE and not path.name.startswith(".")


def scan(root: Path, pattern: str, known: dict[str, str]) -> Scan:
    """Blocking: which files changed since `known` (path -> hash), read and chunked; which are gone."""
    changed: list[Document] = []
    problems: list[str] = []
    present: set[str] = set()
    unchanged = 0
    for entry in config_files.files(root, pattern):
        path = entry.path
        if not indexable(path):
            continue
        relative = path.relative_to(root).as_posix()
        try:
            if entry.refused is not None:
                raise config_files.FileRefused(path, entry.refused)
            data = config_files.read_bytes(root, path, max_bytes=MAX_FILE_BYTES)
        except config_files.FileRefused as e:
            problems.append(f"{relative}: {e.reason}; not indexed")
            continue
        except OSError as e:
            problems.append(f"{relative}: {e.strerror}")
            continue
        present.add(relative)
        digest = hashlib.sha256(data).hexdigest()
        if known.get(relative) == digest:
            unchanged += 1
            continue
        try:
            document = read_document(path, relative, digest, data)
        except Exception as e:  # a broken PDF or the like: one file, not the collection
            problems.append(f"{relative}: not readable ({type(e).__name__}: {e})")
            continue
        if document is not None:
            changed.append(document)
        else:
            present.discard(relative)
    removed = sorted(set(known) - present)
    return Scan(changed, removed, unchanged, problems)


@dataclass(frozen=True)
class Report:
    collection: str
    indexed: int
    removed: int
    unchanged: int
    problems: tuple[str, ...]


class KnowledgeIndexer:
    """Keeps the configured collections indexed; `refresh` indexes now (tests, the bench, admins)."""

    def __init__(self, config: Callable[[], LoadedConfig], store: KnowledgeStore) -> None:
        self._config, self.store = config, store
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._reloaded = asyncio.Event()  # set by `reloaded`: the next pass reads the new config
        self._seen: object = None
        self._due: dict[str, float] = {}
        self.ready: set[str] = set()  # collections indexed at least once under the current config

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="knowledge:indexer")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    def reloaded(self, config: LoadedConfig) -> None:
        """The daemon swapped its config (`Gateway.apply`): index what it names now, forget the rest."""
        self._reloaded.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._reloaded.clear()  # before the config is read: a reload during the pass wakes the next wait
            config = self._config()
            wait: float | None
            try:
                if config is not self._seen:
                    await self.refresh()
                else:
                    for name, spec in config.gateway.knowledge.collections.items():
                        if spec.refresh_minutes and loop.time() >= self._due.get(name, 0):
                            await self.refresh(name)
                wait = self._until_due(config, loop.time())
            except Exception:
                log.exception("indexing knowledge collections; trying again in a minute")
                self._seen = config
                wait = 60.0
            # Until the next refresh is due, or for ever when none is (refresh_minutes 0, no collection): a
            # reload cuts it short. A reload used to be found by looking every second.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._reloaded.wait()

    def _until_due(self, config: LoadedConfig, now: float) -> float | None:
        """Seconds until the first collection's refresh is due; None when none refreshes by itself."""
        due = [self._due.get(name, 0) for name, spec in config.gateway.knowledge.collections.items()
               if spec.refresh_minutes]
        return max(0.0, min(due) - now) if due else None

    async def refresh(self, name: str | None = None) -> list[Report]:
        """Index one collection, or all of them (and forget collections no longer configured)."""
        async with self._lock:
            config = self._config()
            collections = config.gateway.knowledge.collections
            if name is None:
                self._seen = config
                self.ready &= set(collections)
                await self.store.forget(list(collections))
            reports = []
            loop = asyncio.get_running_loop()
            for collection, spec in collections.items():
                if name is not None and collection != name:
                    continue
                reports.append(await self._index(collection, collection_root(config.directory, spec), spec.glob))
                self.ready.add(collection)
                self._due[collection] = loop.time() + spec.refresh_minutes * 60
            return reports

    async def _index(self, collection: str, root: Path, pattern: str) -> Report:
        known = await self.store.hashes(collection)
        found = await asyncio.to_thread(scan, root, pattern, known)
        for i in range(0, max(len(found.changed), 1), BATCH):
            batch = found.changed[i:i + BATCH]
            await self.store.replace(collection, batch, found.removed if i == 0 else ())
        for problem in found.problems:
            log.warning("knowledge collection %s: %s", collection, problem)
        if found.changed or found.removed:
            log.info("knowledge collection %s: %d indexed, %d removed, %d unchanged", collection,
                     len(found.changed), len(found.removed), found.unchanged)
        return Report(collection, len(found.changed), len(found.removed), found.unchanged, tuple(found.problems))
