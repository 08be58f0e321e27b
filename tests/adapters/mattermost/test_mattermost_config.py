"""The mattermost: section of a binding file, and the shipped example, through the real loader."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from bindings.loader import ConfigError, load_config
from bindings.models import BindingSpec
from tests.conftest import write_config

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "examples" / "mattermost.yaml"


def test_the_example_binding_loads(tmp_path: Path) -> None:
    config_dir = write_config(tmp_path / "config")
    shutil.copy(EXAMPLE, config_dir / "bindings" / "mattermost.yaml")
    loaded = load_config(config_dir)
    section = loaded.bindings["mattermost"].mattermost
    assert section is not None and section.url == "https://chat.example.com"
    assert section.token.describe() == "env:MATTERMOST_BOT_TOKEN"


def test_the_url_is_the_servers_base_url() -> None:
    spec = BindingSpec(platform="mattermost", agent="a", mattermost={"url": "https://chat.example.com/api/v4/",
                                                                    "token": "env:T"})
    assert spec.mattermost is not None and spec.mattermost.url == "https://chat.example.com"
    with pytest.raises(ValidationError, match="http:// or https://"):
        BindingSpec(platform="mattermost", agent="a", mattermost={"url": "chat.example.com", "token": "env:T"})


def test_a_missing_token_is_reported_with_its_place(tmp_path: Path) -> None:
    config_dir = write_config(tmp_path / "config", bindings={
        "mm": {"platform": "mattermost", "agent": "assistant", "mattermost": {"url": "https://chat.example.com"}}})
    with pytest.raises(ConfigError) as info:
        load_config(config_dir)
    assert "bindings/mm.yaml" in str(info.value) and "token" in str(info.value)
