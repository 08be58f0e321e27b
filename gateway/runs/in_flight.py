"""The runs this process is driving: each one's cancellation token and who pressed Stop on it.

One piece for the runner's turns and the background runs: a Stop cancels the run's token and
records who pressed it, so the run ends as "stopped by …" rather than as cut by a shutdown.
A Stop of a run claimed here but not started yet (its worker waits for a slot, or fetches its files)
is kept: the run's token is cancelled as it starts, so pydantic-ai never asks its model.
"""

from __future__ import annotations

import contextlib

from pydantic_ai import CancellationToken


class InFlight:
    def __init__(self) -> None:
        self._tokens: dict[str, CancellationToken] = {}
        self._stopped_by: dict[str, str] = {}  # run id -> who pressed Stop (a stop, not a shutdown)

    def start(self, run_id: str) -> CancellationToken:
        token = self._tokens[run_id] = CancellationToken()
        if run_id in self._stopped_by:  # stopped between its claim and its start
            token.cancel()
        return token

    def done(self, run_id: str) -> None:
        self._tokens.pop(run_id, None)
        self._stopped_by.pop(run_id, None)

    def stop(self, run_id: str, who: str, *, claimed: bool = False) -> bool:
        """A person's Stop for a run in flight here, or (`claimed`) claimed here and not started yet: it then
        starts stopped. False when it is neither."""
        token = self._tokens.get(run_id)
        if token is None and not claimed:
            return False
        self._stopped_by.setdefault(run_id, who)
        if token is not None:
            token.cancel()
        return True

    def stopped_by(self, run_id: str) -> str | None:
        return self._stopped_by.get(run_id)

    def cancel_all(self) -> int:
        """Ask every run in flight to stop (the gateway stopping: nobody's Stop); how many there were."""
        for token in list(self._tokens.values()):
            with contextlib.suppress(Exception):
                token.cancel()
        return len(self._tokens)

    def ids(self) -> list[str]:
        return list(self._tokens)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._tokens
