"""A gated call's arguments: the text a decider reads, and the digest a decision is bound to.

The gate (`capabilities/approval_gate.py`) sees a call's arguments as the tool will receive them
(validated: defaults filled in, types coerced) both when it parks the run and when the approved call
runs again on resume. It digests them at both moments: the card stores the digest beside the full
text, the decision carries it back (`approved_metadata`), and a call whose arguments no longer match
is refused (`mismatch`) rather than run on a decision somebody made about other arguments.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic_core import to_jsonable_python

# `ApprovalRequired.metadata` keys the gate sets when it parks a call.
ARGUMENTS = "arguments"  # the validated arguments, JSON-able
DIGEST = "arguments_digest"  # sha256 of their canonical JSON
# `DeferredToolResults.metadata` key of an approved call: the card item it was decided on.
APPROVAL_ID = "approval_id"

_SECRET_KEY = re.compile(r"(token|secret|passw|api[_-]?key|authorization|credential|cookie)", re.I)


def jsonable(args: str | dict[str, Any] | None) -> Any:
    """Arguments as plain JSON values (a model's raw JSON string is parsed; text that is not JSON stays text)."""
    if isinstance(args, str):
        try:
            return json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return args
    return to_jsonable_python(args or {}, fallback=str)


def canonical(args: Any) -> str:
    """One spelling of a value: sorted keys, no spaces, Unicode as is."""
    return json.dumps(jsonable(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(args: Any) -> str:
    return hashlib.sha256(canonical(args).encode("utf-8", "surrogatepass")).hexdigest()


def parked_metadata(args: dict[str, Any]) -> dict[str, Any]:
    """What the gate attaches to the call it parks: the arguments the tool would receive, and their digest."""
    value = jsonable(args)
    return {ARGUMENTS: value, DIGEST: digest(value)}


def approved_metadata(approval_id: str, arguments_digest: str | None) -> dict[str, Any]:
    """What an approved call is resumed with: its card item, and the digest the decision was made on."""
    return {APPROVAL_ID: approval_id, DIGEST: arguments_digest}


def mismatch(metadata: Any, tool_args: dict[str, Any]) -> bool:
    """Whether an approved call's arguments are not the ones its decision was made on (or it carries no
    digest to compare with: a decision that cannot be checked is not applied)."""
    expected = metadata.get(DIGEST) if isinstance(metadata, dict) else None
    return not isinstance(expected, str) or expected != digest(tool_args)


def redact(value: Any) -> Any:
    """Values under secret-looking keys masked: the card is read in a shared chat."""
    if isinstance(value, dict):
        return {k: ("***" if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def shown(args: Any) -> str:
    """The card's text of the arguments: pretty-printed, secrets masked, never cut (each platform shows
    what it can and says where the rest is)."""
    value = jsonable(args)
    if isinstance(value, str):
        return value
    return json.dumps(redact(value), indent=2, ensure_ascii=False, default=str)
