"""A gated call made inside a sync delegate, as its parent's `task` call carries it to the card and back.

A delegate runs inside its parent's `task` tool call, so when one of its tools needs approval the
parent's run is what parks: `task` raises pydantic-ai's `ApprovalRequired` with the delegate's pending
calls in its metadata (`DELEGATED`), the card lists those calls (naming the delegate), and on resume the
parent's `task` call is approved with the people's decisions in `DeferredToolResults.metadata`
(`DECISIONS`), which `task` hands on to the delegate it resumes. Each approved call also carries what
the delegate's approval gate checks it with (`APPROVED`: its card item's approval id and the digest of
the arguments it was approved on, `gateway.approvals.arguments`), as it does for a call of the run
itself: the gate keys its at-most-once marker on the id, and refuses arguments that are not the
approved ones. At most once because a process killed after the delegate started the
call resumes it from the same decision again, and the call must not start twice. Shared by
`capabilities.subagents` (which makes and reads them) and `gateway.approvals.service` (which shows and answers them).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

DELEGATED = "delegated"  # ApprovalRequired.metadata key: the delegate's pending calls
DECISIONS = "decisions"  # DeferredToolResults.metadata key: {tool_call_id: True | denial message}
APPROVED = "approved"  # DeferredToolResults.metadata key: {tool_call_id: the gate's metadata}, approved calls


class DelegatedCall(BaseModel):
    """One pending call of a delegate (or of a delegate's delegate), as the card shows it."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str  # the call's id inside the delegate's own run
    tool_id: str  # the stable id the policy is keyed on
    tool_name: str
    capability: str
    args: Any = None  # as the delegate's tool would receive them (the model's own when no gate said); masked when shown
    arguments_digest: str | None = None  # what the decision is bound to (`gateway.approvals.arguments`)
    delegate: str  # who asked: "researcher", or "researcher › checker" when nested


def delegated_calls(metadata: dict[str, Any] | None) -> list[DelegatedCall] | None:
    """The delegate's pending calls a deferred `task` call carries; None for an ordinary gated call."""
    if not metadata or DELEGATED not in metadata:
        return None
    return [DelegatedCall.model_validate(c) for c in metadata[DELEGATED]]


def decisions_of(metadata: Any) -> dict[str, bool | str] | None:
    """The decisions an approved `task` call was resumed with; None when it was not resumed from a card."""
    if not isinstance(metadata, dict) or DECISIONS not in metadata:
        return None
    return dict(metadata[DECISIONS])


def approved_of(metadata: Any) -> dict[str, dict[str, Any]]:
    """What each approved call of a resumed `task` call is checked with by its gate, by the call's id."""
    if not isinstance(metadata, dict):
        return {}
    return dict(metadata.get(APPROVED) or {})
