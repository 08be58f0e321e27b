"""web_fetch: read the page at a URL as Markdown, through pydantic-ai's SSRF-guarded download.

The fetch is pydantic-ai's own (`common_tools.web_fetch.WebFetchLocalTool` over
`_ssrf.safe_download`): it pins the address it resolved into the request, re-validates every
redirect hop (the domain filters included), bounds the body while it streams and refuses the
encodings that cannot be bounded. Nothing here re-implements that. What this module adds:

- the tool's text (what it does, when, its argument, what comes back, how it fails);
- how trouble reaches the model (capabilities/failures.py): a private, loopback, link-local or
  cloud-metadata address is a retry prompt that says why (never an empty page, and without the
  library's hint about a download option the model does not have); a domain the agent may not
  read is a refusal, as text; a page that failed to load is a retry prompt;
- the domain filters' spelling: an entry is stored lower-case, without the root dot, IDNA-encoded,
  and every equivalent spelling (IDNA 2003, which the resolver uses, IDNA 2008/UTS 46, Unicode) is
  handed to the filter, so `exämple.com` cannot slip past `xn--exmple-cua.com`;
- `method: native | auto` through pydantic-ai's `WebFetch` capability (the provider fetches),
  left out of a run whose conversation asks before every tool, since such a call never waits.

The filters answer "which sites may this agent read", not "can it reach our network": that is
safe_download's address check, which no config can loosen. `_test_allow_local` is the one way to
let it reach loopback, and only a test assigns it.
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

import httpx2
import idna
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_ai import ModelRetry
from pydantic_ai.capabilities import AbstractCapability, WebFetch
from pydantic_ai.common_tools.web_fetch import WebFetchLocalTool, WebFetchResult
from pydantic_ai.messages import BinaryContent
from pydantic_ai.native_tools import AbstractNativeTool, WebFetchTool
from pydantic_ai.tools import RunContext, Tool

from bindings.models import CapabilityEntry
from gateway.runs.turn import Turn

from .failures import trouble
from .registry import BuildContext, CapabilityDecl, ToolDecl, register, simple

# Tests serve pages on loopback; this lets safe_download reach them (cloud-metadata addresses stay
# refused even then). No config field, environment variable or API sets it: only a test does.
_test_allow_local: bool = False

TIMEOUT_SECONDS = 30
T = TypeVar("T", bound=AbstractNativeTool)
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


def _host_entry(value: str) -> str:
    """One allowed/blocked entry in the one spelling DNS is asked for, or a ValueError saying why not."""
    raw = value.strip()
    if not raw:
        raise ValueError("an empty entry matches no host: remove it")
    if "*" in raw:
        raise ValueError(f"{value!r} is a wildcard: entries match a host exactly, so list each host "
                         "(e.g. example.com and www.example.com)")
    if (address := _ip(raw)) is not None:
        return address
    if "://" in raw or re.match(r"^[a-z][a-z0-9+.-]*:(?!\d*$)", raw, re.I):
        raise ValueError(f"{value!r} has a scheme: write the bare hostname (e.g. example.com)")
    if "/" in raw or "?" in raw or "#" in raw:
        raise ValueError(f"{value!r} has a path: entries are bare hostnames and match every page on the host")
    if "@" in raw or any(c.isspace() for c in raw):
        raise ValueError(f"{value!r} is not a bare hostname (e.g. example.com)")
    if ":" in raw:
        raise ValueError(f"{value!r} has a port: entries match the host on every port; write the bare hostname")
    host = raw.rstrip(".").lower()
    # IDNA 2008 (UTS 46), as browsers and libidn2 ask DNS; Python's resolver uses IDNA 2003, whose
    # spelling `spellings` adds at build time (`faß.de` is xn--fa-hia.de to one and fass.de to the other).
    encoded = _encode_2008(host) or _encode_2003(host)
    if encoded is None:
        raise ValueError(f"{value!r} is not a hostname DNS can resolve")
    if not all(_LABEL.match(label) for label in encoded.split(".")):
        raise ValueError(f"{value!r} is not a hostname DNS can resolve")
    return encoded


def _ip(raw: str) -> str | None:
    try:
        return ipaddress.ip_address(raw.strip("[]")).compressed
    except ValueError:
        return None


def spellings(entries: list[str]) -> list[str]:
    """Every spelling of each stored entry that names the same host, for an exact-match filter."""
    out: dict[str, None] = {}
    for entry in entries:
        out[entry] = None
        try:
            unicode = idna.decode(entry)
        except (idna.IDNAError, UnicodeError):
            try:
                unicode = entry.encode("ascii").decode("idna")
            except UnicodeError:
                unicode = entry
        for form in (unicode, _encode_2003(unicode), _encode_2008(unicode)):
            if form:
                out[form] = None
    return list(out)


def _encode_2003(host: str) -> str | None:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def _encode_2008(host: str) -> str | None:
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        return None


def _unique(entries: list[str]) -> list[str]:
    return list(dict.fromkeys(entries))


HostEntry = Annotated[str, AfterValidator(_host_entry)]


class WebFetchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: Literal["local", "native", "auto"] = Field(
        default="local",
        description="local: this deployment fetches (the same on every model); native: the model provider fetches, "
        "only on models that support it; auto: native where the model has it, local elsewhere",
        json_schema_extra={"x-enum-labels": {"local": "This deployment", "native": "Model provider",
                                             "auto": "Provider where supported"}},
    )
    deadline_seconds: float = Field(
        default=30, ge=1, le=300,
        description="The whole fetch (redirects, headers, body) must finish within this many seconds, however "
                    "steadily the server trickles bytes",
    )
    max_content_chars: int = Field(
        default=50_000, ge=1_000, le=200_000, description="A page longer than this is cut (ignored by native)"
    )
    allowed_domains: list[HostEntry] | None = Field(
        default=None, description="Bare hostnames the agent may fetch, matched exactly; unset means any"
    )
    blocked_domains: list[HostEntry] | None = Field(
        default=None, description="Bare hostnames the agent may never fetch, matched exactly; wins over allowed"
    )

    @field_validator("allowed_domains", mode="after")
    @classmethod
    def _allow_something(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("an empty allowlist would refuse every page: list the hosts, or leave allowed_domains unset")
        return None if v is None else _unique(v)

    @field_validator("blocked_domains", mode="after")
    @classmethod
    def _empty_denies_nothing(cls, v: list[str] | None) -> list[str] | None:
        return _unique(v) if v else None  # [] says "no denied hosts", which is what unset means


def approval_required(entry: CapabilityEntry, tool_id: str) -> tuple[str | int, ...] | None:
    """Where the entry asks for approval of `tool_id`, or None when it does not."""
    setting = entry.tool_approval.get(tool_id, "default")
    if setting == "required":
        return ("tool_approval", tool_id)
    if setting == "default" and entry.approval == "required":
        return ("approval",)
    return None


def check_entry(entry: CapabilityEntry, config: BaseModel) -> list[tuple[tuple[str | int, ...], str]]:
    assert isinstance(config, WebFetchConfig)
    where = approval_required(entry, "web_fetch")
    if where is None or config.method == "local":
        return []
    why = ("the model provider runs the fetch" if config.method == "native" else
           "with auto, the model provider runs the fetch on every model that has one, and which do can change")
    return [(where, f"approval can never be asked for web_fetch with method: {config.method}: {why}, out of "
                    "the gate's reach. Set method: local, or drop the approval requirement")]


DOC = """Read the page at a URL, as Markdown.

Use it to read a page whose address you have: a link from web_search, from the conversation or from
another page. It reads one page and does not search: to find pages, use web_search when you have it.
PDFs and images come back as the file itself, which you read directly.
{filters}
Args:
    url: The full http:// or https:// address of the page, e.g. https://example.com/docs/page.
        Required, no default.

Returns:
    The page's url, its title (empty when it has none) and its content as Markdown. Content
    longer than {limit:,} characters is cut there and ends with "[Content truncated]". A PDF or
    an image comes back as the file. A page that has not finished loading after {deadline:g} s is given
    up, and you are told so. When the page cannot be read (an error status, a timeout, a private,
    loopback, link-local or cloud-metadata address, directly or through a redirect) you are told
    why and may try another URL; an address this agent may not read is refused with a sentence
    saying so.
"""


def _filters_text(config: WebFetchConfig) -> str:
    parts = []
    if config.allowed_domains is not None:
        parts.append(f"Only these hosts may be read: {', '.join(config.allowed_domains)}.")
    if config.blocked_domains is not None:
        parts.append(f"These hosts may never be read: {', '.join(config.blocked_domains)}.")
    return (" ".join(parts) + "\n") if parts else ""


_PRIVATE = re.compile(r"(private/internal IP address|cloud metadata service) \(([^)]*)\)")
_NOT_ALLOWED = re.compile(r"Domain '([^']*)' is not in the allowed domains list")
_BLOCKED = re.compile(r"Domain '([^']*)' is blocked")


def _report(ctx: RunContext[Turn], url: str, error: ModelRetry) -> str:
    """The library's failure, as a retry prompt that says why, or as a refusal."""
    text = re.sub(r"\s*Use force_download=.*$", "", str(error), flags=re.S)
    cause = error.__cause__
    if (m := _PRIVATE.search(text)) is not None:
        return trouble(ctx, "mistake", f"{url} was not fetched: it leads, directly or through a redirect, to "
                                       f"{m.group(2)}, a private, loopback, link-local or cloud-metadata address, "
                                       "which this deployment never fetches. Fetch a public http(s) URL instead.")
    if (m := _NOT_ALLOWED.search(text)) is not None:
        return trouble(ctx, "refusal", f"{url} was not fetched: this agent may not read pages on {m.group(1)}.")
    if (m := _BLOCKED.search(text)) is not None:
        return trouble(ctx, "refusal", f"{url} was not fetched: this agent may not read pages on {m.group(1)}.")
    if isinstance(cause, httpx2.RequestError):
        return trouble(ctx, "transient", f"{text}. The site did not answer in time or refused the connection; "
                                         "try again, or another URL.")
    return trouble(ctx, "mistake", text)


def local_tool(config: WebFetchConfig) -> Tool[Turn]:
    """The web_fetch tool this deployment runs, its description built from this entry's config."""
    allowed = spellings(config.allowed_domains) if config.allowed_domains is not None else None
    blocked = spellings(config.blocked_domains) if config.blocked_domains is not None else None

    async def web_fetch(ctx: RunContext[Turn], url: str) -> WebFetchResult | BinaryContent | str:
        fetch = WebFetchLocalTool(max_content_length=config.max_content_chars, allow_local_urls=_test_allow_local,
                                  timeout=TIMEOUT_SECONDS, allowed_domains=allowed, blocked_domains=blocked)
        try:
            # The library's timeout is per read: a server sending a byte a second never trips it.
            # The deadline is on the whole fetch (docs/security.md, "Time limits").
            async with asyncio.timeout(config.deadline_seconds):
                page = await fetch(url)
        except ModelRetry as e:
            return _report(ctx, url, e)
        except TimeoutError:
            return trouble(ctx, "transient", f"{url} was not fetched: the page did not finish loading within "
                                             f"{config.deadline_seconds:g} s, the wall-clock limit on one fetch "
                                             "(the whole download, however slowly it arrives). Try again later, "
                                             "or another URL.")
        if isinstance(page, dict):  # the library hands the <title> over as written: entities and all
            page["title"] = html.unescape(page["title"])
        return page

    web_fetch.__doc__ = DOC.format(limit=config.max_content_chars, deadline=config.deadline_seconds,
                                   filters=_filters_text(config))
    return Tool(web_fetch, name="web_fetch")


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    config = ctx.config
    assert isinstance(config, WebFetchConfig)
    if config.method == "local":
        return simple(tools=[local_tool(config)])
    # Refused at load; refused again here, because a gate that could never fire must never run.
    if approval_required(ctx.entry, "web_fetch") is not None:
        ctx.turn.notices.append(f"web_fetch is off: it needs approval, which method: {config.method} cannot ask for")
        return None
    return WebFetch(native=unless_asking_every_tool(native_tool(config)),
                    local=local_tool(config) if config.method == "auto" else False,
                    allowed_domains=config.allowed_domains, blocked_domains=config.blocked_domains)


def native_tool(config: WebFetchConfig) -> WebFetchTool:
    filters = {"allowed_domains": config.allowed_domains, "blocked_domains": config.blocked_domains}
    return WebFetchTool(**{k: v for k, v in filters.items() if v is not None})


def unless_asking_every_tool(tool: T) -> Callable[[RunContext[Turn]], Awaitable[T | None]]:
    """The provider's tool, left out of a run whose conversation says "ask before every tool".

    That mode gates every call, and a call the provider runs could never wait for it. With
    `auto` the local tool, which the gate does hold, takes its place; with `native` there is none.
    """

    async def native(ctx: RunContext[Turn]) -> T | None:
        return None if (await ctx.deps.modes()).ask_every_tool else tool

    return native


register(CapabilityDecl(
    id="web_fetch", name="Web fetch", category="research",
    tools=(ToolDecl("web_fetch", summary="Read the full page at a URL, as Markdown"),),
    build=build, config_model=WebFetchConfig, scopes=("web:fetch",), check_entry=check_entry,
    # The tool is the config's; the conversation's modes are read per call, and the build's notice is told to every run.
    shared=True,
    description="Reads a page as Markdown (PDFs and images as files) through pydantic-ai's SSRF-guarded download: "
    "private, loopback, link-local and cloud-metadata addresses are refused on every redirect hop.",
))
