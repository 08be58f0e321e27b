"""The lane's order (tests/support/longest_first.py) knows each test by its own name: the xdist group's
suffix is left off, an "@" inside a parameter's id is kept."""

from __future__ import annotations

from tests.support.longest_first import _key


def test_a_tests_time_is_kept_under_its_name_without_the_group_suffix_and_with_an_at_in_its_parameters() -> None:
    assert _key("tests/test_web_browser.py::test_chat@browser") == "tests/test_web_browser.py::test_chat"
    assert _key("tests/test_web_browser.py::test_chat[slow]@browser") == "tests/test_web_browser.py::test_chat[slow]"
    strip = "tests/adapters/mattermost/test_mattermost_normalize.py::test_strip_mention"
    # Before: each was cut at its first "@"; the first and third shared one time (their sum) under "...[".
    for nodeid in (f"{strip}[@agentbot-]", f"{strip}[hello @agentbot.-hello .]", f"{strip}[@agentbot, hello-hello]"):
        assert _key(nodeid) == nodeid
    assert _key(f"{strip}[@agentbot-]@browser") == f"{strip}[@agentbot-]"
