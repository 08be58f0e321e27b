"""The adapter contract (gateway/outbound/adapter.py): every adapter does what `Adapter` requires, and
offers a feature exactly where it declares it.

A declared feature is implemented (not the protocol's empty body inherited); an undeclared one is not
half-offered (no method of it lying about, which nothing would call); and the core uses a feature
only where it was declared: a Stop control shows on a reply only where the adapter opted in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from adapters.base import BaseAdapter
from adapters.mattermost.adapter import MattermostAdapter
from adapters.slack.adapter import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from adapters.web.adapter import WebAdapter
from gateway import adapter_registry
from gateway.messages import ChatKind, InboundMessage, Sender
from gateway.outbound.adapter import FEATURES, Adapter, ReplyTarget, ShowsStopControl, features_of, offered
from gateway.runs.llm import register_model
from gateway.store import repo

from ..conftest import running_gateway, wait_for, write_config
from ..fakes.chat import FakeChatAdapter, fake_platforms

# What each platform offers, as its class line declares it: a change here is a change of product.
DECLARED: dict[type, set[str]] = {
    SlackAdapter: {"StreamsNatively", "ShowsStatus", "ShowsStopControl", "FinalEditTakesStop", "PostsMemoryCards",
                   "AnswersDirectory", "FetchesAttachments", "FindsOwnPosts", "FindsOwnCards", "SpeaksAs", "SendsFiles",
                   "ConfirmsMembership", "AsksQuestions"},
    TelegramAdapter: {"StreamsNatively", "ShowsStopControl", "FinalEditTakesStop", "PostsMemoryCards",
                      "AnswersDirectory", "FetchesAttachments", "SendsFiles", "ConfirmsMembership", "AsksQuestions"},
    MattermostAdapter: {"ShowsStopControl", "FinalEditTakesStop", "PostsMemoryCards", "AnswersDirectory",
                        "FetchesAttachments", "FindsOwnPosts", "SendsFiles", "ConfirmsMembership"},
    WebAdapter: {"PostsReportCards", "PostsMemoryCards", "ShowsStatus", "ShowsStopControl", "SendsFiles"},
}


def _members(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def _required() -> set[str]:
    return {name for name in vars(Adapter) if not name.startswith("_")} | set(Adapter.__annotations__)


def _defined_by(cls: type, name: str) -> type | None:
    """The class in `cls`'s MRO whose body defines `name`."""
    return next((k for k in cls.__mro__ if name in vars(k)), None)


@pytest.mark.parametrize("cls", list(DECLARED), ids=lambda c: c.__name__)
def test_each_adapter_declares_what_it_offers_and_implements_what_it_declares(cls: type) -> None:
    assert features_of(cls) == DECLARED[cls]
    for name in _required() - {"platform", "binding_id", "limits"}:
        assert _defined_by(cls, name) not in (None, Adapter), f"{cls.__name__} does not implement {name}"
    for feature in FEATURES:
        for name in _members(feature):
            owner = _defined_by(cls, name)
            if feature.__name__ in DECLARED[cls]:
                # Implemented by the adapter, not the protocol's empty body that naming it inherited.
                assert owner is not None and owner not in FEATURES, f"{cls.__name__} declares {feature.__name__} " \
                                                                    f"but does not implement {name}"
            else:
                assert owner is None, f"{cls.__name__} has {name} ({feature.__name__}) without declaring it"


def test_the_shared_lifecycle_offers_no_feature_by_default() -> None:
    """`BaseAdapter` once had a no-op `stop_control`, so every platform 'had' a Stop control."""
    class Bare(BaseAdapter):
        platform = "bare"

        async def _open(self) -> None: ...

        async def _connect_once(self) -> None: ...

    assert features_of(Bare) == set()
    assert all(_defined_by(Bare, name) is None for feature in FEATURES for name in _members(feature))
    assert offered(object.__new__(Bare), ShowsStopControl) is None


CONTROLS: list[tuple[str, str, bool]] = []  # (adapter class, run id, present)


class _StopMethodUndeclared(FakeChatAdapter):
    """Has a `stop_control` method but never declared the feature: the core must not use it."""

    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        CONTROLS.append((type(self).__name__, run_id, present))


class _StopDeclared(FakeChatAdapter, ShowsStopControl):
    async def stop_control(self, target: ReplyTarget, message_id: str, run_id: str, present: bool) -> None:
        CONTROLS.append((type(self).__name__, run_id, present))


def _streaming_model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "A streamed "
        yield "answer."

    return FunctionModel(stream_function=stream)


@pytest.mark.parametrize("adapter_class", [_StopMethodUndeclared, _StopDeclared], ids=lambda c: c.__name__)
async def test_a_stop_control_shows_only_where_the_adapter_opted_in(tmp_path: Path, adapter_class: type) -> None:
    register_model("contract-stream", _streaming_model)
    config = write_config(tmp_path / "config", agents={"assistant": {"name": "A", "model": "contract-stream"}},
                          bindings={"chat": {"platform": "slack", "agent": "assistant", "admission": {"dm": "open"},
                                             "slack": {"bot_token": "env:X_BOT", "app_token": "env:X_APP"}}})
    CONTROLS.clear()
    with fake_platforms("slack"):
        adapter_registry.register("slack", f"{__name__}:{adapter_class.__name__}")
        async with running_gateway(config) as gw:
            result = await gw.submit(InboundMessage(
                platform="slack", binding_id="chat", workspace="T1", channel="D1", chat_kind=ChatKind.DM,
                sender=Sender("U1", "Ada"), text="hello", event_id="e1", message_id="1.0"))
            assert result.accepted and result.run_id is not None

            async def ended() -> bool:
                run = await gw.store.run(result.run_id or "")
                return run is not None and run.status == repo.FINISHED

            await wait_for(ended, what="the run to finish")
            adapter: Any = gw.adapters["chat"]
            assert [text for _, text in adapter.posts.values()] == ["A streamed answer."]
    if adapter_class is _StopDeclared:
        assert CONTROLS == [("_StopDeclared", result.run_id, True), ("_StopDeclared", result.run_id, False)]
    else:
        assert CONTROLS == []
