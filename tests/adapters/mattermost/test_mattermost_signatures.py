"""A click's context is anyone's to write: a forged signature of any text is a refusal, never an error.

`hmac.compare_digest` raises TypeError for str arguments that are not ASCII, and a lone surrogate
cannot be encoded at all; both answered 500 before (found by tests/chaos/test_fuzz_platforms.py).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest

from adapters.mattermost import actions

KEY = b"k" * 32
FORGED = ["é" * 64, "\ud800", "", "0" * 64]
WHERE = {"binding_id": "mm", "channel_id": "c\ud800"}


@pytest.mark.parametrize("sig", FORGED)
def test_a_forged_signature_of_any_text_is_refused(sig: str) -> None:
    assert actions.verify(KEY, {"approval_id": "a", "decision": "approve", "nonce": "n", "sig": sig}, **WHERE) is None
    assert actions.verify(KEY, {"stop_run": "r", "nonce": "n", "sig": sig}, **WHERE) is None
    assert actions.verify(KEY, {"memory": "m", "nonce": "n", "sig": sig}, **WHERE) is None


def test_signed_contexts_verify_for_their_channel_only() -> None:
    for kind, values in (("approval", {"approval_id": "a", "decision": "approve"}), ("stop", {"stop_run": "r"}),
                         ("memory", {"memory": "m|x"})):
        ctx = actions.context(KEY, kind, **WHERE, **values)  # type: ignore[arg-type]
        signed = actions.verify(KEY, ctx, **WHERE)
        assert signed is not None and signed.kind == kind and signed.values == tuple(values.values())
        assert actions.verify(KEY, ctx, binding_id="mm", channel_id="other") is None
        assert actions.verify(KEY, {**ctx, "nonce": "another"}, **WHERE) is None


def test_a_stop_signature_does_not_pass_for_a_memory_button() -> None:
    """Every kind signs what it is: the same value under another kind's field is not ours."""
    ctx = actions.context(KEY, "stop", **WHERE, stop_run="r")
    assert actions.verify(KEY, {"memory": "r", "nonce": ctx["nonce"], "sig": ctx["sig"]}, **WHERE) is None


def test_an_approval_card_signed_before_the_shared_scheme_still_verifies() -> None:
    """Cards outlive an upgrade (a parked run waits for days): their v2 signature is kept as it was."""
    old = hmac.new(KEY, "v2|mm|c1|a|approve|n".encode(), hashlib.sha256).hexdigest()
    signed = actions.verify(KEY, {"approval_id": "a", "decision": "approve", "nonce": "n", "sig": old},
                            binding_id="mm", channel_id="c1")
    assert signed == actions.Signed("approval", ("a", "approve"), "n")
