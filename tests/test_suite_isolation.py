"""What one in-process test leaves behind does not outlive it: a stopped gateway is freed with its test, not
kept for the rest of the worker's tests (tests/conftest.py: aiohttp's cache of the apps it served is dropped
when a test ends, `leftovers_released`; `running_gateway` gives a `ManualClock` its `idle` back at stop)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import aiohttp
from pydantic_ai.models.function import FunctionModel

from gateway.clock import ManualClock
from gateway.daemon import Gateway
from gateway.runs.llm import register_model

from .conftest import leftovers_released, running_gateway, write_config


async def _served_on_a_scripted_model(directory: Path) -> weakref.ref[Gateway]:
    """A gateway on a `ManualClock` and a registered model that holds that clock (as a test's script does),
    which served one request, then stopped; nothing of this frame is left once it returns."""
    clock = ManualClock()
    register_model("isolation-scripted", lambda: FunctionModel(stream_function=None, model_name=str(clock)))
    config = write_config(directory, agents={"assistant": {"name": "A", "model": "isolation-scripted"}})
    async with running_gateway(config, clock=clock) as gw, aiohttp.ClientSession(gw.url) as s:
        assert (await s.post("/api/v1/conversations", json={})).status == 201
    return weakref.ref(gw)


async def test_a_stopped_gateway_that_served_a_request_on_a_scripted_model_is_freed_when_its_test_ends(
        tmp_path: Path) -> None:
    with leftovers_released():
        freed = await _served_on_a_scripted_model(tmp_path / "c")
    gc.collect()
    assert freed() is None
