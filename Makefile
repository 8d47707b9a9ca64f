# mmst developer entry points. `make demo` and `make test` are the two commands users need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
PYTEST_ARGS ?=
SHELL := bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: setup test lint demo bench clean-venv

## setup: create .venv, install mmst editable with [dev,hf] extras (idempotent; seconds when nothing changed)
setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# torch comes first, pinned to the CPU build (2.13.0); then the project, its dev extras and the hf extra
	@# (transformers: the tests build tiny pretrained encoders; nothing is downloaded).
	@$(PY) -m pip install -q "torch==2.13.0"
	@$(PY) -m pip install -q -e ".[dev,hf]" 2>&1 | { grep -vE "^WARNING: Location|BuildBackendWarning|^ *(!!|\*+|corresp|with strategy|Please be careful|name as your package)|^ *$$" || true; }
	@touch $(STAMP)
	@echo "setup: .venv ready ($$($(PY) -c 'import torch; print("torch", torch.__version__)'))"

## lint: ruff over the whole tree
lint: setup
	$(VENV)/bin/ruff check .

## test: setup, the system packages of the tests (espeak-ng, chromium, chromium-driver, fonts-noto-cjk),
## ruff, then the pytest suite
test: setup
	@bash tools/ensure_system_packages.sh test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

## demo: setup, espeak-ng, then the quickstart recipe (synthetic corpus -> train xs -> evaluate k=1,3,5)
demo: setup
	@bash tools/ensure_system_packages.sh demo
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash recipes/synthetic/run.sh

## bench: every benchmark, results in docs/results/*.json (render the docs: python tools/render_docs.py)
bench: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash bench/run_all.sh

clean-venv:
	rm -rf $(VENV)
