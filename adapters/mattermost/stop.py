"""The Stop control on a streaming reply: one interactive action, signed like a card's buttons. Pure.

The reply's text is patched on its own as it streams (`message` only), so the action rides in
the post's props and stays until `props: {}` takes it away when the reply is final.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from .cards import same_signature


def sign(key: bytes, *, binding_id: str, channel_id: str, run_id: str) -> str:
    msg = f"v1|stop|{binding_id}|{channel_id}|{run_id}".encode("utf-8", "surrogatepass")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def stop_props(*, url: str, key: bytes, binding_id: str, channel_id: str, run_id: str) -> dict[str, Any]:
    """`props` with a Stop button whose signed context names the run."""
    context = {"stop_run": run_id, "sig": sign(key, binding_id=binding_id, channel_id=channel_id, run_id=run_id)}
    button = {"id": "stop", "type": "button", "name": "Stop", "style": "danger",
              "integration": {"url": url, "context": context}}
    return {"attachments": [{"fallback": "Stop", "actions": [button]}]}


def verify(key: bytes, context: Any, *, binding_id: str, channel_id: str) -> str | None:
    """The run id when `context` is a Stop we signed for this channel, else None."""
    if not isinstance(context, Mapping):
        return None
    run_id, sig = context.get("stop_run"), context.get("sig")
    if not (isinstance(run_id, str) and isinstance(sig, str)):
        return None
    expected = sign(key, binding_id=binding_id, channel_id=channel_id, run_id=run_id)
    return run_id if same_signature(expected, sig) else None
