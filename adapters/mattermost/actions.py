"""The signed context every Mattermost button carries (an approval, Stop, a `/memory` card's), and its check. Pure.

Buttons are `props.attachments[].actions[]` whose `integration.url` is the gateway's own public
callback; the server posts the action's `context` back verbatim on a click. So every context is
signed the same way: an HMAC, under a key derived from the bot token, over the binding, the channel,
what the button does and a random nonce. A request whose signature does not match gets 401 and runs
nothing.

The signature cannot cover the clicker (one post shows the same buttons to everyone), and a click
body's `user_id` is whatever its sender wrote; so the adapter asks the server who may have clicked
(`adapters/mattermost/adapter.py`, `_vouched`) and binds each nonce to the first user who presents it:
a context replayed under another user's id does nothing. Every render (`reissue`, or a card drawn
again) gives the buttons fresh nonces, so someone else's refused click leaves the others a button
they can still press.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["approval", "stop", "memory"]
# What each kind of button names, in signing order; the first field tells the kinds apart.
FIELDS: dict[Kind, tuple[str, ...]] = {"approval": ("approval_id", "decision"), "stop": ("stop_run",),
                                       "memory": ("memory",)}


@dataclass(frozen=True, slots=True)
class Signed:
    """A context we signed for this binding and channel: what the button does, and its nonce."""

    kind: Kind
    values: tuple[str, ...]
    nonce: str


def action_key(bot_token: str, binding_id: str) -> bytes:
    """The signing key: derived from the bot token, so every replica agrees without shared state
    and nobody without the token (who could do anything anyway) can forge a click."""
    return hmac.new(bot_token.encode(), b"agent-gateway/mattermost/actions/" + binding_id.encode(), hashlib.sha256).digest()


def _message(kind: Kind, binding_id: str, channel_id: str, values: tuple[str, ...], nonce: str) -> bytes:
    if kind == "approval":
        # The scheme approval cards were signed with before Stop and /memory shared it: a card posted
        # before an upgrade keeps working after it (cards outlive restarts; Stop and /memory do not).
        return f"v2|{binding_id}|{channel_id}|{values[0]}|{values[1]}|{nonce}".encode("utf-8", "surrogatepass")
    # JSON, not joined text: a value holding the separator cannot pass for another kind's fields.
    return json.dumps(["v3", kind, binding_id, channel_id, *values, nonce]).encode()


def sign(key: bytes, kind: Kind, *, binding_id: str, channel_id: str, values: tuple[str, ...], nonce: str) -> str:
    return hmac.new(key, _message(kind, binding_id, channel_id, values, nonce), hashlib.sha256).hexdigest()


def new_nonce() -> str:
    return secrets.token_urlsafe(12)


def context(key: bytes, kind: Kind, *, binding_id: str, channel_id: str, **values: str) -> dict[str, str]:
    """A button's context: its fields, a fresh nonce and the signature over them."""
    nonce = new_nonce()
    ordered = tuple(values[name] for name in FIELDS[kind])
    return {**values, "nonce": nonce,
            "sig": sign(key, kind, binding_id=binding_id, channel_id=channel_id, values=ordered, nonce=nonce)}


def same_signature(expected: str, given: str) -> bool:
    """Constant-time, and False (not TypeError) for a forged signature that is not ASCII:
    `hmac.compare_digest` refuses to compare such strings, and a click body is anyone's to write."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def verify(key: bytes, ctx: Any, *, binding_id: str, channel_id: str) -> Signed | None:
    """What the button does when `ctx` is a context we signed for this binding and channel, else None."""
    if not isinstance(ctx, Mapping):
        return None
    kind = next((k for k, names in FIELDS.items() if names[0] in ctx), None)
    if kind is None:
        return None
    values, nonce, sig = tuple(ctx.get(n) for n in FIELDS[kind]), ctx.get("nonce"), ctx.get("sig")
    if not (all(isinstance(v, str) for v in values) and isinstance(nonce, str) and isinstance(sig, str)):
        return None
    expected = sign(key, kind, binding_id=binding_id, channel_id=channel_id, values=values, nonce=nonce)  # type: ignore[arg-type]
    return Signed(kind, values, nonce) if same_signature(expected, sig) else None  # type: ignore[arg-type]


def _contexts(props: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every signed context among a post's buttons, as rendered."""
    return [action["integration"]["context"] for a in props.get("attachments") or []
            for action in a.get("actions") or []
            if "nonce" in (action.get("integration") or {}).get("context", {})]


def nonces(props: Mapping[str, Any]) -> list[str]:
    """The nonces of a post's buttons, as rendered."""
    return [c["nonce"] for c in _contexts(props)]


def reissue(props: Mapping[str, Any], *, key: bytes, binding_id: str, channel_id: str) -> dict[str, Any]:
    """The same buttons with fresh nonces (and so fresh signatures): what a post is given after a
    click used one of them."""
    fresh = copy.deepcopy(dict(props))
    for ctx in _contexts(fresh):
        kind = next(k for k, names in FIELDS.items() if names[0] in ctx)
        ctx["nonce"] = new_nonce()
        ctx["sig"] = sign(key, kind, binding_id=binding_id, channel_id=channel_id,
                          values=tuple(ctx[n] for n in FIELDS[kind]), nonce=ctx["nonce"])
    return fresh
