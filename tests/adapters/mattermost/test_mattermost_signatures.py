"""A click's context is anyone's to write: a forged signature of any text is a refusal, never an error.

`hmac.compare_digest` raises TypeError for str arguments that are not ASCII, and a lone surrogate
cannot be encoded at all; both answered 500 before (found by tests/chaos/test_fuzz_platforms.py).
"""

from __future__ import annotations

import pytest

from adapters.mattermost import cards, stop

KEY = b"k" * 32
FORGED = ["é" * 64, "\ud800", "", "0" * 64]


@pytest.mark.parametrize("sig", FORGED)
def test_a_forged_signature_of_any_text_is_refused(sig: str) -> None:
    where = {"binding_id": "mm", "channel_id": "c\ud800"}
    assert cards.verify(KEY, {"approval_id": "a", "decision": "approve", "nonce": "n", "sig": sig}, **where) is None
    assert stop.verify(KEY, {"stop_run": "r", "sig": sig}, **where) is None
    assert cards.memory_verify(KEY, {"memory": "m", "sig": sig}, **where) is None


def test_signed_contexts_still_verify() -> None:
    where = {"binding_id": "mm", "channel_id": "c1"}
    approve = cards.Decision("approve")
    assert cards.verify(KEY, {"approval_id": "a", "decision": "approve", "nonce": "n",
                              "sig": cards.sign(KEY, approval_id="a", decision=approve, nonce="n", **where)},
                        **where) == ("a", approve, "n")
    assert stop.verify(KEY, {"stop_run": "r", "sig": stop.sign(KEY, run_id="r", **where)}, **where) == "r"
    assert cards.memory_verify(KEY, {"memory": "m", "sig": cards.memory_sign(KEY, data="m", **where)}, **where) == "m"
