"""Secret references: config names where a secret lives, never the secret itself.

`env:NAME`, `file:/path` and `credential:NAME` (systemd LoadCredential, read from
`$CREDENTIALS_DIRECTORY`) are references. A bare string is accepted as a literal so a first
try works, but `check` warns about it. The resolved value is wrapped so that `repr`, `str`
and logging never show it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

_PREFIXES = ("env:", "file:", "credential:")


class SecretError(Exception):
    """A reference that cannot be resolved (missing variable, unreadable file)."""


class Secret:
    """A resolved secret value. Its text comes out only through `.reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretRef(str):
    """A config value naming a secret. Validated as a string; resolved on use."""

    @property
    def is_literal(self) -> bool:
        return not self.startswith(_PREFIXES)

    def describe(self) -> str:
        """Safe to log: the reference, or '<literal>' for an inline secret."""
        return "<literal>" if self.is_literal else str(self)

    def __repr__(self) -> str:
        return f"SecretRef({self.describe()!r})"

    def resolve(self) -> Secret:
        kind, _, name = self.partition(":")
        if kind == "env":
            value = os.environ.get(name)
            if value is None:
                raise SecretError(f"environment variable {name} is not set")
            return Secret(value)
        if kind == "file":
            return Secret(_read(Path(name)))
        if kind == "credential":
            directory = os.environ.get("CREDENTIALS_DIRECTORY")
            if not directory:
                raise SecretError(f"credential:{name} needs systemd's LoadCredential (CREDENTIALS_DIRECTORY is unset)")
            return Secret(_read(Path(directory) / name))
        return Secret(str(self))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            cls._validate,
            core_schema.str_schema(min_length=1),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda v: v.describe()),
        )

    @classmethod
    def _validate(cls, value: str) -> SecretRef:
        ref = cls(value)
        if not ref.is_literal and not ref.partition(":")[2]:
            raise ValueError(f"{value!r} names no secret: write env:NAME, file:/path or credential:NAME")
        return ref


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise SecretError(f"cannot read {path}: {e.strerror}") from None
