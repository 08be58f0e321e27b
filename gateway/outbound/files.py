"""Files into a conversation: one path for every file a reply or a tool posts, through a delivery row.

A file goes in two steps (`SendsFiles.upload`, then `share`), and its delivery row says how far it
got, so a run that is killed and resumed never shares a file twice and never loses one silently:

- no row: nothing was sent; upload, then share.
- "uploaded" (the platform's references kept): the bytes are there, nobody sees them yet; a resumed
  run shares them without uploading again.
- "sharing": the share call went out and no answer was recorded. It may have landed; sharing again
  could show the file twice, so it is not sent again, and the model is told so in words it can
  pass on (never a silent loss).
- final: shared; the message id is kept and a resumed run only says so.

A platform's 429 waits out its Retry-After and tries again (a 429 is a refusal: nothing was
shared); another refusal of a share is known not to have landed, so it is retried a few times too.
A file over the server's own size limit (`FileTooLarge`, at the upload or, where the share carries
the bytes, at the share) is refused in words at once: the same bytes would be refused again.
The row is keyed by the run and the files' names and contents, so the same files asked for again
in the same run (a replay after a restart) find it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.outbound.adapter import (
    Adapter,
    FileTooLarge,
    OutboundFile,
    PlatformError,
    RateLimited,
    ReplyTarget,
    SendsFiles,
    offered,
)
from gateway.store.repo import FILE_DELIVERY, Store

log = logging.getLogger("gateway.outbound.files")

ATTEMPTS = 5
MAX_WAIT = 120.0
UPLOADED, SHARING = "uploaded", "sharing"


class FileRefused(Exception):
    """The files cannot go to this conversation (too large, too many, no files here): `str()` says why,
    for the model."""


@dataclass(frozen=True, slots=True)
class Shared:
    """What became of one share, in words the model can use."""

    message_id: str | None
    note: str  # "shared chart.png (12 KB)", "… was already shared", "… may not have arrived"


def check(adapter: Adapter, files: Sequence[OutboundFile]) -> SendsFiles:
    """The sender for `files`, or FileRefused naming what does not fit this platform."""
    out = offered(adapter, SendsFiles)
    if out is None:
        raise FileRefused(f"{adapter.platform} cannot show files in a conversation; describe the result in text instead")
    limits = out.file_limits
    if not files:
        raise FileRefused("no file to share")
    if len(files) > limits.max_files:
        raise FileRefused(f"{adapter.platform} takes at most {limits.max_files} files in one message; "
                          f"{len(files)} were given")
    for f in files:
        cap = limits.max_bytes.get(f.kind, 0)
        if len(f.data) > cap:
            raise FileRefused(f"{f.name} is {size_text(len(f.data))}; {adapter.platform} takes {f.kind.value} files "
                              f"of at most {size_text(cap)}")
    return out


def delivery_key(run_id: str, files: Sequence[OutboundFile], what: str = "") -> str:
    """The delivery row's id (in `deliveries.run_id`, 40 characters): the run and what it shares, or
    `what` in place of the contents when the same request makes different bytes each time (a
    generated image drawn again after a restart is still the one the person approved)."""
    h = hashlib.sha256(run_id.encode())
    if what:
        h.update(b"\0key\0" + what.encode())
    else:
        for f in files:
            h.update(b"\0" + f.name.encode() + b"\0" + hashlib.sha256(f.data).digest())
    return FILE_DELIVERY + h.hexdigest()[:32]


async def share_files(adapter: Adapter, target: ReplyTarget, store: Store, run_id: str,
                      files: Sequence[OutboundFile], caption: str = "",
                      on_platform_error: Callable[[str], None] = lambda kind: None, *, what: str = "") -> Shared:
    """Post `files` into `target` once, whatever restarts happen (see the module docstring).

    Raises FileRefused for files this platform cannot take (nothing is sent), PlatformError when the
    platform kept refusing (nothing was shared: the model may try again)."""
    out = check(adapter, files)
    names = ", ".join(f"{f.name} ({size_text(len(f.data))})" for f in files)
    # Cut before rendering: a platform counts a caption's visible characters (Telegram's 1,024 after
    # its HTML is parsed), and a cut through rendered markup would leave a tag open.
    cap = out.file_limits.max_caption_chars
    caption = adapter.render(caption if len(caption) <= cap else caption[: cap - 1] + "…") if caption else ""
    key = delivery_key(run_id, files, what)
    rows = await store.deliveries(key)
    row = rows[0] if rows else None
    if row is not None and row.final:
        return Shared(row.platform_message_id, f"{names} was already shared in this conversation")
    state = json.loads(row.text) if row is not None else {}
    if state.get("stage") == SHARING:
        log.warning("a share of %s was under way when the gateway stopped; not shared again", names)
        return Shared(None, f"{names} may have been shared before the gateway restarted; it was not sent again, "
                            "so tell the person to say if they do not see it")
    refs: list[str] = state.get("refs") or []
    if len(refs) != len(files):
        try:
            refs = [await _patiently(lambda f=f: out.upload(target, f), "upload", on_platform_error, store.clock)
                    for f in files]
        except FileTooLarge as e:  # this server's own cap: nothing was shared, and trying again will not help
            raise _too_large(adapter, names, e) from None
        await store.save_delivery(key, 0, None, json.dumps({"stage": UPLOADED, "refs": refs}), False)
    shared = list(zip(files, refs, strict=True))

    async def share_once() -> str:
        await store.save_delivery(key, 0, None, json.dumps({"stage": SHARING, "refs": refs}), False)
        try:
            return await out.share(target, shared, caption)
        except PlatformError:  # refused: it did not land, so the next try (or a resumed run) may share it
            await store.save_delivery(key, 0, None, json.dumps({"stage": UPLOADED, "refs": refs}), False)
            raise

    try:
        message_id = await _patiently(share_once, "share", on_platform_error, store.clock)
    except FileTooLarge as e:  # where the share carries the bytes (Telegram's sendPhoto): refused, not shared
        raise _too_large(adapter, names, e) from None
    await store.save_delivery(key, 0, message_id, json.dumps({"stage": "shared", "refs": refs}), True)
    return Shared(message_id, f"shared {names} in the conversation")


def _too_large(adapter: Adapter, names: str, e: FileTooLarge) -> FileRefused:
    return FileRefused(f"{adapter.platform} refused {names} as too large ({e}); nothing was posted")


async def _patiently(call: Callable[[], object], what: str, on_platform_error: Callable[[str], None],
                     clock: Clock) -> str:
    """`call`, tried again after a 429's wait or a refusal's pause, both on `clock` (the store's is
    the gateway's: a test moves it)."""
    for attempt in range(ATTEMPTS):
        try:
            return await call()  # type: ignore[misc,no-any-return]
        except RateLimited as e:
            on_platform_error("rate_limited")
            wait = min(e.retry_after, MAX_WAIT)
            log.info("rate limited on a file %s; waiting %.1fs", what, wait)
            await clock.sleep(wait)
        except FileTooLarge:
            raise
        except PlatformError as e:
            on_platform_error("error")
            if attempt == ATTEMPTS - 1:
                raise
            log.warning("file %s refused (%s); trying again", what, e)
            await clock.sleep(min(2**attempt, 10) * 0.25)
    raise PlatformError(f"file {what}: still rate limited after {ATTEMPTS} tries")


def size_text(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"
