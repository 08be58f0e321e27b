# Two entry points that work on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/agent-gateway run --config config

check: $(STAMP)
	$(BIN)/agent-gateway check --config config

# The browser test needs Debian's chromium; install it once if it is missing.
test: $(STAMP)
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Every benchmark runs (BENCH_ARGS=--quick for the short versions); the exit status fails if any
# missed a target. bench/replicas.py needs the PostgreSQL the tests use (127.0.0.1:5432).
BENCH_ARGS ?=
bench: $(STAMP)
	s=0; for b in run platforms streaming replicas; do $(BIN)/python bench/$$b.py $(BENCH_ARGS) || s=1; done; \
	$(BIN)/python bench/stop.py || s=1; exit $$s

clean:
	rm -rf $(VENV) var
