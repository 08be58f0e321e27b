"""Who decides through a door that is not a platform's own button: the HTTP API's principal."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """`ref` names who: a person id, `platform:account_id` or `platform:workspace:account_id`; None for
    the web binding's local person (whoever it is configured to be when the request arrives). `name`
    is how a card names them ("Approved by …"); the account's own name when None."""

    ref: str | None = None
    name: str | None = None
