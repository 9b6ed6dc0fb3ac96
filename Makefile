# Everything installs into project-local venvs; `make test-all` works on a fresh machine.
# Two stacks (README): the reference one, .venv (Python 3.11, torch 2.2.1, DGL 2.1.0), and the
# current one, .venv-current (Python 3.12, the torch of setup.cfg's `current` extra, no DGL).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# pyenv's shims answer for every version's command but run only the selected ones, so a
# python3.12 that cannot run is looked for among pyenv's versions.
PYTHON_CURRENT ?= $(shell python3.12 -c "" 2>/dev/null && echo python3.12 || \
	ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
VENV_CURRENT  := .venv-current
BIN_CURRENT   := $(VENV_CURRENT)/bin
STAMP_CURRENT := $(VENV_CURRENT)/.installed-stamp
# Tests run in 2 processes; one thread each keeps 2 cores from being oversubscribed.
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 DGLBACKEND=pytorch

MULTI30K ?= ../shared/data/multi30k
# A trained Multi30k run (examples/multi30k/cpu.sh makes one, averaged checkpoint included): `make bench`
# then also times bfloat16 decoding, with the recipe's decoding choices (docs/results.md).
MULTI30K_RUN ?= runs/multi30k-cpu

.PHONY: install install-current lint format test test-current test-all test-fast test-fast-current demo bench gpu-check gpu-wheels docs lab clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip<25"
	$(BIN)/python -m pip install --quiet -e ".[dev,dgl]"
	touch $(STAMP)

install-current: $(STAMP_CURRENT)

$(STAMP_CURRENT): setup.cfg pyproject.toml
	@test -n "$(PYTHON_CURRENT)" || { echo "no Python 3.12 found: install one or give PYTHON_CURRENT=..."; exit 2; }
	test -x $(BIN_CURRENT)/python || $(PYTHON_CURRENT) -m venv $(VENV_CURRENT)
	$(BIN_CURRENT)/python -m pip install --quiet --upgrade pip
	$(BIN_CURRENT)/python -m pip install --quiet -e ".[dev,current]"
	touch $(STAMP_CURRENT)

# The linter and the formatter's check, then both stacks, one after the other (CI runs this).
test-all: lint test test-current

LINTED := graphformer tests benchmarks examples notebooks docs

lint: install
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

format: install
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

test: install
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 --durations=10 tests

test-current: install-current
	$(TEST_ENV) $(BIN_CURRENT)/python -m pytest -n 2 --durations=10 tests

# The HTML animation player in a headless Chromium, on both stacks; fails without the browser
# (as root: apt-get install chromium chromium-driver).
.PHONY: test-player
test-player: install install-current
	CI=1 $(TEST_ENV) $(BIN)/python -m pytest tests/viz/test_player.py
	CI=1 $(TEST_ENV) $(BIN_CURRENT)/python -m pytest tests/viz/test_player.py

test-fast: install
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 -m "not slow" tests

test-fast-current: install-current
	$(TEST_ENV) $(BIN_CURRENT)/python -m pytest -n 2 -m "not slow" tests

demo: install
	BIN=$(BIN) bash examples/copy/demo.sh

bench: install
	$(BIN)/python -m benchmarks.sparse_attention
	$(BIN)/python -m benchmarks.training_throughput
	$(BIN)/python -m benchmarks.training_throughput --task multi30k $(if $(wildcard $(MULTI30K)),--data-dir $(MULTI30K))
	$(BIN)/python -m benchmarks.edge_cost
	$(BIN)/python -m benchmarks.edge_cost --task multi30k --steps 3 $(if $(wildcard $(MULTI30K)),--data-dir $(MULTI30K))
	$(BIN)/python -m benchmarks.threads
	$(BIN)/python -m benchmarks.decoding
	$(BIN)/python -m benchmarks.tile_kernels
	$(BIN)/python -m benchmarks.sample_graphs
	$(if $(wildcard $(MULTI30K_RUN)/checkpoint_averaged.pt),$(BIN)/python -m benchmarks.precision --run $(MULTI30K_RUN) \
		--checkpoint averaged --alpha 1.4 --rounds 3)

# On the lent GPU machine, with its own python3 and torch (no venv, no package index):
# `make gpu-check OUT=DIR` runs the gpu-marked tests, training, decoding and long-sequence
# attention against torch.nn.Transformer and SDPA, and syncs per step, each stage under its own
# time limit, rewriting DIR/gpu.json after every stage (benchmarks/gpu_check.py). Without a GPU
# the same command is its rehearsal: every stage on the CPU at a tiny size.
PYTHON_GPU ?= python3
GPU_WHEELS ?= build/gpu-wheels
OUT ?= benchmarks/results/gpu
gpu-check:
	$(PYTHON_GPU) -m benchmarks.gpu_check --out $(OUT) --wheels $(GPU_WHEELS)

# Here, with network: the wheels of what graphformer needs and the GPU machine's image lacks.
# Only sacremoses: its needs (click, joblib, regex, tqdm) and pyyaml are on that image
# (/work/.library/device/KINDS.md). Carry $(GPU_WHEELS) with the call.
GPU_WHEEL_PACKAGES ?= sacremoses==0.2.0
gpu-wheels:
	rm -rf $(GPU_WHEELS)
	$(PYTHON_GPU) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 -d $(GPU_WHEELS) $(GPU_WHEEL_PACKAGES)

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The notebooks in JupyterLab (an optional extra); their runs go to the ignored runs/notebooks.
lab: install
	$(BIN)/python -m pip install --quiet -e ".[notebook]"
	GRAPHFORMER_NOTEBOOK_DIR=$(CURDIR)/runs/notebooks $(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

clean:
	rm -rf $(VENV) $(VENV_CURRENT) *.egg-info .pytest_cache
