# Two commands: `make run` opens the dashboard on the local engine, `make test` runs every test.
# Both create .venv on first use; `make run` installs only what running needs, `make test` adds the
# developer tools. TORCH picks the torch to install: the default is the CPU
# build that ships on these machines; on a GPU machine keep your CUDA build with
#   make run TORCH=torch        (or any spec pip understands)
PYTHON ?= python3.11
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test test-fast test-loaded lint bench clean setup gpu-check

setup: $(STAMP)

# What running needs: torch (the build TORCH names) and kvtui with its runtime dependencies; no test
# or lint tool and no ray, so `make run` on a fresh clone is minutes shorter and gigabytes smaller.
$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

# The developer tools on top (pytest, ruff, mypy, import-linter, transformers, ray): what `make test` runs.
$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(DEV_STAMP)

run: $(STAMP)
	$(BIN)/kvtui

test: $(DEV_STAMP)
	$(BIN)/ruff check tui tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The quick loop while editing: everything but the tests marked slow (servers, whole-app UI runs,
# recorded runs, checkpoints built with transformers). `make test` still runs everything.
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

# `make test` on a busy machine: one busy-loop process per core for the whole run (killed however the
# run ends). No test may depend on the machine being quiet; timings belong in bench/ (bench/timing.py).
test-loaded: $(DEV_STAMP)
	@hogs=""; for i in $$(seq $$(nproc)); do $(BIN)/python -c "while True: pass" & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	$(MAKE) --no-print-directory test

# Every benchmark's --quick figures, written to docs/benchmarks.md with date, host and commit.
bench: $(DEV_STAMP)
	$(BIN)/python bench/write_docs.py engine --quick
	$(BIN)/python bench/write_docs.py serve --quick
	$(BIN)/python bench/write_docs.py sim --quick
	$(BIN)/python bench/write_docs.py timing --quick
	$(BIN)/python bench/write_docs.py sim_step --quick
	$(BIN)/python bench/write_docs.py harden --quick
	$(BIN)/python bench/write_docs.py ux --quick
	$(BIN)/python bench/write_docs.py calib --quick
	$(BIN)/python bench/write_docs.py recorder --quick
	$(BIN)/python bench/write_docs.py edges --quick
	$(BIN)/python bench/write_docs.py sweep_cut --quick

# The first run on a real GPU (bench/gpu_check.py): the machine's own Python (PYTHON=...), wheels
# brought along in WHEELS=DIR; writes gpu-check.json. Without a GPU it stops in one line.
gpu-check:
	PYTHONPATH=. $(or $(PYTHON),python3) bench/gpu_check.py --out gpu-check.json $(if $(WHEELS),--wheels $(WHEELS),)

clean:
	rm -rf $(VENV)
