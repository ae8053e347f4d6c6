# The two commands of the README: `make sandbox` runs the service, `make test` runs every test.
# Both create the virtual environment in .venv and install the pinned dependencies first.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed-stamp
# Command-line tools the tests run whose own dependencies clash with ours (openapi-python-client pins
# an older typer), kept in a virtual environment of their own.
TOOLS ?= .venv-tools
TOOLS_STAMP = $(TOOLS)/.installed-stamp

.PHONY: sandbox test test-fast lint bench bench-send bench-statuses bench-events bench-bulk bench-floor bench-scale bench-backlog install fuzz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(TOOLS_STAMP): Makefile
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet openapi-python-client==0.29.1
	touch $(TOOLS_STAMP)

install: $(STAMP) $(TOOLS_STAMP)

sandbox: $(STAMP)
	$(BIN)/wagate serve --sandbox

# The modules not marked `alone` first, on three processes (pytest-xdist, whole modules per process:
# each has its own databases, simulator and ports), then those that measure time, rates or memory,
# one at a time, then the few marked `solo` (races by fractions of a second, the whole crash); every
# part runs. About 10, 8 and 2.5 minutes on this 2-core machine (CONTRIBUTING.md, "How long").
# ALONE_WORKERS=3 spreads the alone tier over three (about 4 minutes instead of 8), but on this
# machine their races then failed about once a run (a lock wait, a kill's aftermath), so CI runs one.
TEST_WORKERS ?= 3
ALONE_WORKERS ?= 0
test: $(STAMP) $(TOOLS_STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone and not solo"; parallel=$$?; \
	$(BIN)/pytest -n $(ALONE_WORKERS) --dist load -m "alone and not solo"; alone=$$?; \
	$(BIN)/pytest -m solo; solo=$$?; \
	exit $$(( parallel || alone || solo ))

# The inner loop: SQLite only, no browser, no process of its own, nothing marked slow (a few minutes).
FAST_WORKERS ?= 4
test-fast: $(STAMP)
	CI= $(BIN)/pytest -n $(FAST_WORKERS) --dist loadfile -m "not alone and not solo and not slow" -k "not postgresql"

# The generated-input tests of `make test`, twenty times as long (docs/reliability.md, "Bad input").
fuzz: $(STAMP)
	WAGATE_FUZZ_EXAMPLES=$${WAGATE_FUZZ_EXAMPLES:-20} $(BIN)/pytest -p no:cacheprovider --timeout 3600 \
		tests/api/test_openapi_contract.py tests/api/test_header_fuzz.py tests/whatsapp/test_webhook_fuzz.py \
		tests/dashboard/test_dashboard_fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# Every target of DESIGN.md on SQLite and PostgreSQL in one table (runs the benchmarks below; a few minutes).
bench: $(STAMP)
	$(BIN)/python bench/targets.py

bench-send: $(STAMP)
	$(BIN)/python bench/send_path.py

bench-statuses: $(STAMP)
	$(BIN)/python bench/statuses.py

bench-events: $(STAMP)
	$(BIN)/python bench/events_delivery.py

bench-bulk: $(STAMP)
	$(BIN)/python bench/bulk.py

# The floor under the accepted-send ratio: no framework, the driver alone (docs/performance.md).
bench-floor: $(STAMP)
	$(BIN)/python bench/floor.py

# A lane's claim behind a channel's bulk backlog of 1,000-300,000 rows (docs/performance.md).
bench-backlog: $(STAMP)
	$(BIN)/python bench/backlog.py

# Scale-out on PostgreSQL (1-3 API processes, 1-2 workers; docs/performance.md).
bench-scale: $(STAMP)
	$(BIN)/python bench/scale.py
