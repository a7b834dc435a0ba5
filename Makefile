# Two commands: `make run` opens the dashboard on the local engine, `make test` runs every test.
# Both create .venv on first use. TORCH picks the torch to install: the default is the CPU
# build that ships on these machines; on a GPU machine keep your CUDA build with
#   make run TORCH=torch        (or any spec pip understands)
PYTHON ?= python3.11
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/kvtui

test: $(STAMP)
	$(BIN)/ruff check tui tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The quick loop while editing: everything but the tests marked slow (servers, whole-app UI runs,
# recorded runs, checkpoints built with transformers). `make test` still runs everything.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

# Every benchmark's --quick figures, written to docs/benchmarks.md with date, host and commit.
bench: $(STAMP)
	$(BIN)/python bench/write_docs.py engine --quick
	$(BIN)/python bench/write_docs.py serve --quick
	$(BIN)/python bench/write_docs.py sim --quick
	$(BIN)/python bench/write_docs.py recorder --quick

clean:
	rm -rf $(VENV)
