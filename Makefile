# The two commands of the README: `make sandbox` runs the service, `make test` runs every test.
# Both create the virtual environment in .venv and install the pinned dependencies first.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed-stamp

.PHONY: sandbox test lint bench bench-events bench-bulk install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

sandbox: $(STAMP)
	$(BIN)/wagate serve --sandbox

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/send_path.py

bench-events: $(STAMP)
	$(BIN)/python bench/events_delivery.py

bench-bulk: $(STAMP)
	$(BIN)/python bench/bulk.py
