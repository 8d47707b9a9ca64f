# mmst developer entry points. `make demo` and `make test` are the two commands users need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
PYTEST_ARGS ?=
# two pytest-xdist workers keep both cores busy (docs/development.md); PYTEST_XDIST="-n 0" runs in one process
PYTEST_XDIST ?= -n 2 --dist loadgroup
# Python caches the byte code of what it imports (__pycache__): where PYTHONDONTWRITEBYTECODE is set (as on some
# CI and sandbox machines) it never does, and every process compiled torch again (import torch._dynamo, which
# every training process pays through its optimizer: 10 s instead of 4). Commands run by make write the cache.
unexport PYTHONDONTWRITEBYTECODE
SHELL := bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: setup test lint demo bench clean-venv

## setup: create .venv, install mmst editable with [dev,hf] extras (idempotent; seconds when nothing changed)
setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# torch comes first, pinned to the CPU build (2.13.0); then the project, its dev extras and the hf extra
	@# (transformers: the tests build tiny pretrained encoders; nothing is downloaded). --no-compile: pip
	@# compiles every file of every package on one core, which was most of the install time; Python compiles
	@# what is imported, when it is first imported (see PYTHONDONTWRITEBYTECODE above).
	@$(PY) -m pip install -q --no-compile "torch==2.13.0"
	@$(PY) -m pip install -q --no-compile -e ".[dev,hf]" 2>&1 | { grep -vE "^WARNING: Location|BuildBackendWarning|^ *(!!|\*+|corresp|with strategy|Please be careful|name as your package)|^ *$$" || true; }
	@touch $(STAMP)
	@echo "setup: .venv ready ($$($(PY) -c 'import torch; print("torch", torch.__version__)'))"

## lint: ruff over the whole tree
lint: setup
	$(VENV)/bin/ruff check .

## test: setup, the system packages of the tests (espeak-ng, chromium, chromium-driver, fonts-noto-cjk),
## ruff, then the pytest suite
test: setup
	@bash tools/ensure_system_packages.sh test
	@# simulstream 1.0.0 (FBK): tests/test_streamlaal.py checks mmst's StreamLAAL against its scorer. --no-deps:
	@# the scorer needs only mmst's dependencies (mweralign, pyyaml); its own list pulls librosa and numba.
	@$(PY) -m pip install -q --no-compile --no-deps "simulstream==1.0.0" 2>&1 | { grep -vE "^WARNING: Location" || true; }
	$(VENV)/bin/ruff check .
	@# --durations: every run lists its slowest tests; the budget is 12 min of pytest on 2 cores (docs/development.md)
	@t0=$$(date +%s); rc=0; $(VENV)/bin/python -m pytest -q --durations=25 $(PYTEST_XDIST) $(PYTEST_ARGS) || rc=$$?; \
	  echo "make test: pytest took $$(( $$(date +%s) - t0 )) s wall (budget: 720 s on 2 cores; docs/development.md)"; \
	  exit $$rc

## demo: setup, espeak-ng, then the quickstart recipe (synthetic corpus -> train xs -> evaluate k=1,3,5).
## The seconds of setup and of the whole command go to exp/synthetic/.done/{setup,total}
## (tools/collect_quickstart.py records them beside the stage times).
DEMO_EXP := exp/synthetic
demo:
	@t0=$$(date +%s); $(MAKE) --no-print-directory setup; bash tools/ensure_system_packages.sh demo; \
	  mkdir -p $(DEMO_EXP)/.done; echo $$(( $$(date +%s) - t0 )) > $(DEMO_EXP)/.done/setup; \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash recipes/synthetic/run.sh --exp-dir $(DEMO_EXP); \
	  echo $$(( $$(date +%s) - t0 )) > $(DEMO_EXP)/.done/total; \
	  echo "make demo: $$(cat $(DEMO_EXP)/.done/total) s wall, setup included ($$(cat $(DEMO_EXP)/.done/setup) s)"

## bench: every benchmark, results in docs/results/*.json (render the docs: python tools/render_docs.py)
bench: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash bench/run_all.sh

clean-venv:
	rm -rf $(VENV)
