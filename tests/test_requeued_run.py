"""A message that arrives while an interrupted run waits to run again gets a run (and an answer) of its own.

Found by bench/chaos.py: a run killed after its answer was shown went back to the queue, and the
person's next message joined it as if it were still waiting to start. The run, run again,
answered once for both: the person saw no answer to the second message. Only runs that never
started take more messages.
"""

from __future__ import annotations

from pathlib import Path

from gateway.messages import ChatKind
from gateway.store import repo
from gateway.store.engine import open_store


async def test_a_message_never_joins_a_run_that_started_before(tmp_path: Path) -> None:
    async with open_store(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}") as store:
        who = await store.identify("slack", "T1", "U1", "Ada")
        conv = repo.ConversationRef(id="", key="slack:T1:C1:1.0", platform="slack", binding_id="slack",
                                    workspace="T1", channel="C1", thread="1.0", chat_kind=ChatKind.CHANNEL.value)

        async def say(event: str, text: str) -> repo.Ingested:
            nonlocal conv
            ingested = await store.ingest(binding_id="slack", event_ids=[event], conversation=conv, identity=who,
                                          account_id="U1", text=text, agent_id="assistant",
                                          platform_message_id=event, queue_limit=20)
            conv = ingested.conversation
            return ingested

        first = await say("1.0", "first")
        claimed = await store.claim_next_run(conv.id)
        assert claimed is not None and claimed.run.id == first.run_id
        # The process dies here; the next one puts the run back in the queue.
        assert await store.requeue_interrupted(at_start=True) == [conv.id]

        second = await say("2.0", "second")
        assert second.run_id != first.run_id
        again = await store.claim_next_run(conv.id)
        assert again is not None and again.run.id == first.run_id
        assert [line.text for line in again.prompt] == ["first"]
