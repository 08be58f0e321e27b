"""The shipped example binding is valid as written (with its environment variables set)."""

from pathlib import Path

from ruamel.yaml import YAML

from bindings.models import BindingSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "examples" / "slack.yaml"


def test_example_binding_parses() -> None:
    data = YAML(typ="safe", pure=True).load(EXAMPLE.read_text())
    spec = BindingSpec.model_validate({"id": "slack", **data})
    assert spec.slack is not None and spec.slack.mode == "socket"
    assert not spec.slack.bot_token.is_literal and not spec.slack.app_token.is_literal  # type: ignore[union-attr]


def test_api_url_must_be_http_and_gets_a_trailing_slash() -> None:
    import pytest
    from pydantic import ValidationError

    base = {"platform": "slack", "agent": "a", "slack": {"bot_token": "env:T", "app_token": "env:A"}}
    spec = BindingSpec.model_validate({**base, "slack": {**base["slack"], "api_url": "https://slack-gov.com/api"}})
    assert spec.slack is not None and spec.slack.api_url == "https://slack-gov.com/api/"
    with pytest.raises(ValidationError, match="http"):
        BindingSpec.model_validate({**base, "slack": {**base["slack"], "api_url": "slack.com/api"}})
