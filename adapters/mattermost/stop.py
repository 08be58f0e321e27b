"""The Stop control on a streaming reply: one interactive action, signed like every button of ours
(`adapters/mattermost/actions.py`). Pure.

The reply's text is patched on its own as it streams (`message` only), so the action rides in
the post's props and stays until `props: {}` takes it away when the reply is final.
"""

from __future__ import annotations

from typing import Any

from . import actions


def stop_props(*, url: str, key: bytes, binding_id: str, channel_id: str, run_id: str) -> dict[str, Any]:
    """`props` with a Stop button whose signed context names the run."""
    context = actions.context(key, "stop", binding_id=binding_id, channel_id=channel_id, stop_run=run_id)
    button = {"id": "stop", "type": "button", "name": "Stop", "style": "danger",
              "integration": {"url": url, "context": context}}
    return {"attachments": [{"fallback": "Stop", "actions": [button]}]}
