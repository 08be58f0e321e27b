"""An MCP tool's progress notifications as the Slack thread's status line while the tool runs."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import running_gateway, write_config
from tests.fakes.slack import FakeSlack
from tests.support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from tests.test_mcp import SERVER

from .conftest import eventually


async def test_a_long_tools_progress_is_the_threads_status(tmp_path: Path, fake_slack: FakeSlack) -> None:
    slack = {"bot_token": "env:TEST_SLACK_BOT_TOKEN", "app_token": "env:TEST_SLACK_APP_TOKEN",
             "signing_secret": "env:TEST_SLACK_SIGNING_SECRET", "mode": "socket", "api_url": fake_slack.api_url}
    cfg = write_config(tmp_path / "config", agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": [
        {"name": "tracker", "command": sys.executable, "args": [str(SERVER), "--extras"], "tools": {"slow": "allow"}}]}},
        bindings={"acme": {"platform": "slack", "agent": "ops", "slack": slack}},
        gateway={"plugins": ["tests.support.plugin_mcp"]})
    async with running_gateway(cfg) as gw:
        await eventually(lambda: gw.adapters["acme"].health().connected)
        await eventually(lambda: gw.mcp.existing("ops", "tracker").state == "up", timeout=30)
        root, _ = await fake_slack.say("C0GEN", "U0ADA", "<@U0BOT> tracker_slow api")
        await fake_slack.wait_for(lambda: any(m.text == "[tracker_slow success: api done]"
                                              for m in fake_slack.bot_messages("C0GEN")))
        shown = [c.args["status"] for c in fake_slack.calls_to("assistant.threads.setStatus")
                 if c.args["thread_ts"] == root.ts]
        assert [s for s in shown if s.startswith("tracker:")] == [
            "tracker: 20 % (crunching)", "tracker: 40 % (crunching)", "tracker: 60 % (crunching)",
            "tracker: 80 % (crunching)", "tracker: 100 %"]
        assert shown.index("using tracker_slow…") < shown.index("tracker: 20 % (crunching)")
