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
