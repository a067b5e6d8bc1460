# One command per job on a fresh machine:  make demo  |  make test
# Each creates .venv, installs the CPU PyTorch wheel pinned below first (never resolved freely: an
# unpinned torch pulls a multi-GB CUDA build), then bertonnx with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
MODEL_DIR ?= models/bert-base-uncased
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# Export bert-base-uncased (pretrained weights when the hub or cache has them, else seeded random weights
# with a loud warning), then run the module's walkthrough on it, torch-free.
demo: setup
	$(VENV)/bin/bertonnx export bert-base-uncased $(MODEL_DIR) --weights auto --force
	$(VENV)/bin/bertonnx walkthrough $(MODEL_DIR)

# Lint, type-check, then the whole suite including the slow (full-size and real-weights) tests.
test: setup lint
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) models .pytest_cache .ruff_cache .mypy_cache
