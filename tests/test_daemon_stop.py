"""A daemon part that fails to stop is named in the log (with what it raised), and the rest still stops."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from bindings.loader import load_config
from gateway import extensions
from gateway.daemon import Gateway


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
