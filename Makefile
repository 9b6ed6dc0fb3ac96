# Everything installs into a project-local .venv; `make test` works on a fresh machine.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Tests run in 2 processes; one thread each keeps 2 cores from being oversubscribed.
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 DGLBACKEND=pytorch

MULTI30K ?= ../shared/data/multi30k
# A trained Multi30k run (examples/multi30k/cpu.sh makes one, averaged checkpoint included): `make bench`
# then also times bfloat16 decoding, with the recipe's decoding choices (docs/results.md).
MULTI30K_RUN ?= runs/multi30k-cpu

.PHONY: install test test-fast demo bench gpu-check docs lab clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip<25"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: install
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 --durations=10 tests

test-fast: install
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 -m "not slow" tests

demo: install
	BIN=$(BIN) bash examples/copy/demo.sh

bench: install
	$(BIN)/python benchmarks/sparse_attention.py
	$(BIN)/python benchmarks/training_throughput.py
	$(BIN)/python benchmarks/training_throughput.py --task multi30k $(if $(wildcard $(MULTI30K)),--data-dir $(MULTI30K))
	$(BIN)/python benchmarks/decoding.py
	$(BIN)/python benchmarks/tile_kernels.py
	$(if $(wildcard $(MULTI30K_RUN)/checkpoint_averaged.pt),$(BIN)/python benchmarks/precision.py --run $(MULTI30K_RUN) \
		--checkpoint averaged --alpha 1.4 --rounds 3)

# On a CUDA machine: the gpu-marked tests, then training and decoding throughput per attention
# backend against torch.nn.Transformer (benchmarks/results/gpu.json).
gpu-check: install
	$(TEST_ENV) $(BIN)/python -m pytest -m gpu -rs tests
	DGLBACKEND=pytorch $(BIN)/python benchmarks/gpu_check.py

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The notebooks in JupyterLab (an optional extra); their runs go to the ignored runs/notebooks.
lab: install
	$(BIN)/python -m pip install --quiet -e ".[notebook]"
	GRAPHFORMER_NOTEBOOK_DIR=$(CURDIR)/runs/notebooks $(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
