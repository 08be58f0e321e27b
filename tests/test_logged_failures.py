"""Trouble the daemon goes on past is still said in the log: a part that fails to stop (the rest still
stops), a failed run's notice that could not be shown (the run still ends as failed)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bindings.loader import load_config
from gateway import adapter_registry, extensions
from gateway.daemon import Gateway
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.outbound.adapter import ReplyTarget
from gateway.runs.llm import register_model
from gateway.store import repo

from .conftest import running_gateway, wait_for, write_config
from .fakes.chat import FakeChatAdapter, fake_platforms


class _FailsToStop:
    async def stop(self) -> None:
        raise RuntimeError("the index file is gone")


async def test_a_part_that_fails_to_stop_is_logged_and_the_rest_still_stops(config_dir: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    extensions.register_checks()
    gw = Gateway(load_config(config_dir))
    await gw.start()
    url = gw.url
    gw.extensions.append(_FailsToStop())  # stopped first: parts stop in reverse order
    with caplog.at_level(logging.ERROR, logger="gateway"):
        await gw.stop()
    failed = [r for r in caplog.records if r.getMessage() == "stopping _FailsToStop"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert str(failed[0].exc_info[1]) == "the index file is gone"
    async with aiohttp.ClientSession() as s:  # the HTTP server, stopped after the parts, is gone
        with pytest.raises(aiohttp.ClientConnectionError):
            await s.get(f"{url}/healthz")


class _BrokenPosts(FakeChatAdapter):
    """An adapter whose posting fails with its own mistake (not a platform's refusal)."""

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        raise RuntimeError("the adapter lost its session")


def _failing_model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        raise ValueError("the model fell over")
        yield ""  # a generator

    return FunctionModel(stream_function=stream)


async def test_a_failure_notice_that_cannot_be_shown_is_logged_and_the_run_still_fails(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    register_model("logged-failure", _failing_model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "A", "model": "logged-failure"}},
                          bindings={"chat": {"platform": "slack", "agent": "assistant", "admission": {"dm": "open"},
                                             "slack": {"bot_token": "env:X_BOT", "app_token": "env:X_APP"}}})
    with fake_platforms("slack"), caplog.at_level(logging.WARNING, logger="gateway"):
        adapter_registry.register("slack", f"{__name__}:_BrokenPosts")
        async with running_gateway(config) as gw:
            result = await gw.submit(InboundMessage(
                platform="slack", binding_id="chat", workspace="T1", channel="D1", chat_kind=ChatKind.DM,
                sender=Sender("U1", "Ada"), text="hello", event_id="e1", message_id="1.0"))

            async def failed() -> bool:
                run = await gw.store.run(result.run_id or "")
                return run is not None and run.status == repo.FAILED

            await wait_for(failed, what="the run to end as failed")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("the failed notice was not shown")]
    assert said == ["the failed notice was not shown: RuntimeError: the adapter lost its session"]
