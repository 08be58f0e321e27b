"""How long a test's wait may take before the test fails.

Every wait in the suite ends when what it waits for happens; this bound only decides when to give
up. It is generous because the suite runs on parallel workers on a small, shared machine, where a
step that takes 50 ms alone can take seconds; a hang is caught sooner or later by pytest-timeout.
"""

PATIENCE = 30.0

# A test's `ManualClock(autojump=AUTOJUMP)` moves itself to its next timer once nothing has touched
# it for this many seconds of real time (docs/testing.md, "Waiting in a test").
AUTOJUMP = 0.01
