# Two entry points that work on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-chaos durations check bench clean install lock

# Bytecode is kept (in __pycache__/, ignored by git), whatever the environment says: with
# PYTHONDONTWRITEBYTECODE set (as on the CI machine), every process the suite starts (each daemon,
# each CLI call) compiled the project's ~150 modules again (0.15-0.2 s of CPU each), and each xdist
# worker rewrote every test module's asserts again. An installed daemon has its bytecode (pip writes it).
unexport PYTHONDONTWRITEBYTECODE

# Every dependency at the version requirements-test.lock pins, hashes checked (so CI and every
# machine test the same code), then the project itself without resolving anything again.
$(STAMP): pyproject.toml requirements-test.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements-test.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# Production: the runtime only (no pytest, no playwright), at requirements.lock's versions, into
# $(VENV) (docs/operations.md: /opt/agent-gateway/.venv, which the systemd unit runs).
install:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements.lock
	$(BIN)/pip install -q --no-deps .

# Renew the lock files after a change to pyproject.toml's dependencies: versions already pinned
# stay unless pyproject.toml excludes them (UPGRADE=--upgrade moves everything to the newest allowed).
UPGRADE ?=
lock: $(STAMP)
	$(BIN)/pip install -q uv
	$(BIN)/uv pip compile -q pyproject.toml $(UPGRADE) --no-strip-extras --generate-hashes --python $(BIN)/python \
		--custom-compile-command "make lock" -o requirements.lock
	$(BIN)/uv pip compile -q pyproject.toml --extra test $(UPGRADE) --no-strip-extras --generate-hashes --python $(BIN)/python \
		--custom-compile-command "make lock" -o requirements-test.lock

run: $(STAMP)
	$(BIN)/agent-gateway run --config config

check: $(STAMP)
	$(BIN)/agent-gateway check --config config

# Two lanes (docs/testing.md). `make test`, the inner loop: everything but the fault lane, plus its
# smoke (tests marked chaos_smoke), on parallel workers. Most tests wait on loopback I/O, not the
# CPU, so there are more workers than cores (on the 2-core CI machine, quiet, from a fresh clone:
# 4 workers 5:16, 6 workers 4:51, the CPU then ~85 % busy); tests that share a resource carry an xdist_group.
# `make test-chaos`: the whole fault lane (tests/chaos), the real daemon killed, starved, flooded.
# A hang fails its test (pytest-timeout, pyproject's `timeout`), not the lane.
WORKERS ?= 6
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup
PYTEST_ARGS ?=
# pytest exits 5 when it collected nothing: a lane whose marker selects nothing must not pass.
NOT_EMPTY := rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc

# The browser test needs Debian's chromium, and tests/test_mcp_everything.py the MCP reference
# server from npm (pinned there and here; node 20 runs it); each is installed once if it is missing.
MCP_EVERYTHING := @modelcontextprotocol/server-everything@2026.8.31
MCP_EVERYTHING_DIR := .cache/mcp-everything
test: $(STAMP)
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	@grep -qs '"version": "$(lastword $(subst @, ,$(MCP_EVERYTHING)))"' $(MCP_EVERYTHING_DIR)/node_modules/@modelcontextprotocol/server-everything/package.json \
		|| npm install -s --no-audit --no-fund --prefix $(MCP_EVERYTHING_DIR) $(MCP_EVERYTHING)
	$(PYTEST) -m "not chaos or chaos_smoke" $(PYTEST_ARGS); $(NOT_EMPTY)

test-chaos: $(STAMP)
	$(PYTEST) -m chaos --timeout 600 $(PYTEST_ARGS); $(NOT_EMPTY)

# Both lanes, each test's time written to tests/durations.json, which hands the longest out first
# (tests/support/longest_first.py): run it again when tests come and go, and commit the file.
durations: $(STAMP)
	$(PYTEST) -m "not chaos or chaos_smoke" --record-durations; $(NOT_EMPTY)
	$(PYTEST) -m "chaos and not chaos_smoke" --timeout 600 --record-durations; $(NOT_EMPTY)

# Every benchmark runs (BENCH_ARGS=--quick for the short versions); the exit status fails if any
# missed a target. bench/replicas.py needs the PostgreSQL the tests use (127.0.0.1:5432).
BENCH_ARGS ?=
bench: $(STAMP)
	s=0; for b in run platforms streaming replicas startup; do $(BIN)/python bench/$$b.py $(BENCH_ARGS) || s=1; done; \
	$(BIN)/python bench/stop.py || s=1; exit $$s

clean:
	rm -rf $(VENV) var .cache
