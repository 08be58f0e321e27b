"""knowledge: search the team's documents and cite what was used.

Collections are named in gateway.yaml (`knowledge.collections`: a folder and a glob, refreshed
on reload and every `refresh_minutes`); an agent's entry binds them by name. The model asks
what to search, never where: the collections come from the entry, so an agent cannot reach one
nobody bound to it. Bound with no collections, the capability attaches nothing.

Indexing (capabilities/knowledge_index.py) and search (gateway/store/knowledge.py) use the
database we already run: SQLite FTS5 on the embedded default, tsvector + GIN with
websearch_to_tsquery / ts_rank_cd on PostgreSQL, chunked by heading.

Our own rather than a harness piece: the harness has no document-collection search over a
database; its `repo_context` injects a repository's agent files, which is what `context` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset
from sqlalchemy.exc import OperationalError

from bindings import config_files
from gateway.store.fulltext import QueryError
from gateway.runs.turn import Turn

from .failures import trouble
from .knowledge_index import KnowledgeIndexer, collection_root, indexable
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

if TYPE_CHECKING:
    from bindings.loader import LoadedConfig

TOP_K_CEILING = 50


class KnowledgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    collections: list[str] = Field(default_factory=list,
                                   description="names from gateway.yaml knowledge.collections; none: not attached")
    default_top_k: int = Field(default=5, ge=1, le=TOP_K_CEILING,
                               description="passages returned when the model does not ask for a number")


def validate_config(config: LoadedConfig, report: Callable[[str, tuple[str | int, ...], str], None]) -> None:
    """Load-time check: bound collections exist in gateway.yaml, and their folders exist."""
    configured = config.gateway.knowledge.collections
    for name, spec in configured.items():
        root = collection_root(config.directory, spec)
        if not root.is_dir():
            report("gateway", ("knowledge", "collections", name, "path"), f"no folder {root}")
            continue
        # What the indexer's safe reader will refuse, named now: a link out of the folder, /proc, a FIFO.
        for entry in config_files.files(root, spec.glob):
            if entry.refused is not None and indexable(entry.path):
                report("gateway", ("knowledge", "collections", name, "path"),
                       f"{entry.path.relative_to(root).as_posix()}: {entry.refused}; not indexed", True)
    for agent_id, agent in config.agents.items():
        for i, entry in enumerate(agent.capabilities):
            if entry.id != "knowledge":
                continue
            try:
                cfg = KnowledgeConfig.model_validate(entry.config)
            except ValidationError:
                continue  # the registry reports it
            for j, name in enumerate(cfg.collections):
                if name not in configured:
                    known = ", ".join(sorted(configured)) or "none (add them under knowledge.collections in gateway.yaml)"
                    report(f"agent:{agent_id}", ("capabilities", i, "config", "collections", j),
                           f"no knowledge collection {name!r}; configured: {known}")


def _toolset(indexer: KnowledgeIndexer, cfg: KnowledgeConfig) -> FunctionToolset[Turn]:
    collections = list(dict.fromkeys(cfg.collections))

    async def search_documents(ctx: RunContext[Turn], query: str,
                               top_k: Annotated[int, Field(ge=1, le=TOP_K_CEILING)] | None = None) -> str:
        """Search the organization's documents for passages relevant to a question.

        Use it before answering from what the team has written down (policies, guides, how-tos),
        then answer from the passages and quote each one's citation in brackets after what you
        took from it. You choose what to search, not where: the collections are fixed for you.
        Words are matched by their stem ("install" finds "installing"); "quoted phrases", `or`,
        and a leading - to exclude a word work. When every word finds nothing, any of them is tried.

        Args:
            query: Keywords or a short question, e.g. "vacation policy carry over". Required.
            top_k: How many passages to return, best first; default 5 unless configured, at most 50.

        Returns:
            Numbered passages, best first, each with its citation, its file and heading, then its text
            (a passage over 1,500 characters is cut, ending with …). A sentence saying nothing matched,
            or that the documents are still being indexed.
        """
        try:
            found = await indexer.store.search(collections, query, top_k or cfg.default_top_k)
        except QueryError as e:
            return trouble(ctx, "mistake", f"{e}. For example: search_documents(query=\"expense report deadline\").")
        except OperationalError:
            return trouble(ctx, "transient", "the document index did not answer; try again")
        if not found:
            pending = [c for c in collections if c not in indexer.ready]
            if pending:
                return (f"Nothing found yet: {', '.join(pending)} {'is' if len(pending) == 1 else 'are'} still being "
                        "indexed. Try again in a minute.")
            return f"Nothing in the documents matched {query!r}. Try other words, or fewer of them."
        out = []
        for i, p in enumerate(found, 1):
            out.append(f"[{i}] cite as [{p.citation}] — {p.path} — {p.heading}\n{p.text}")
        return "\n\n".join(out)

    return FunctionToolset([search_documents])


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, KnowledgeConfig)
    if not ctx.config.collections:
        return None  # a search that always finds nothing is worse than none
    indexer = ctx.part("knowledge", KnowledgeIndexer)
    return simple(toolsets=[_toolset(indexer, ctx.config)])


register(CapabilityDecl(
    id="knowledge",
    name="Knowledge search",
    category="knowledge",
    tools=(ToolDecl("search_documents", summary="Search the organization's documents for passages relevant to a "
                                                "question."),),
    build=build,
    config_model=KnowledgeConfig,
    scopes=("knowledge:read",),
    shared=True,  # the collections are the config's, the index the daemon's; nothing of a run is kept
    description=("Searches the document collections (gateway.yaml knowledge.collections) the entry binds, and "
                 "cites file and heading. Bound with no collections it is not attached."),
))
