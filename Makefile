# One command per job on a fresh machine:  make demo  |  make test
# Each creates .venv, installs PyTorch's CPU build pinned below first (from PyTorch's CPU index when it
# answers, else the plain pin; see tools/install_torch.py: an unpinned or PyPI torch on Linux is a
# multi-GB CUDA build), then bertonnx with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
MODEL_DIR ?= models/bert-base-uncased
PYTEST_ARGS ?=
# What a runtime-only user gets: `pip install .` (no extras) in its own venv, plus pytest.
RUNTIME_VENV ?= .venv-runtime
RUNTIME_WORK ?= .cache/runtime-only

.PHONY: setup demo test test-fast test-runtime-only lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) tools/install_torch.py --pin '$(TORCH_PIN)' --index '$(TORCH_CPU_INDEX)'
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# Export bert-base-uncased (pretrained weights when the hub or cache has them, else seeded random weights
# with a loud warning), then run the module's walkthrough on it, torch-free.
demo: setup
	$(VENV)/bin/bertonnx export bert-base-uncased $(MODEL_DIR) --weights auto --force
	$(VENV)/bin/bertonnx walkthrough $(MODEL_DIR)
	@echo "bertonnx is installed in $(VENV)/bin: run $(VENV)/bin/bertonnx, or activate the venv first (. $(VENV)/bin/activate)"

# Lint, type-check, then the whole suite including the slow (full-size and real-weights) tests, with a
# progress line per test file and a line when a long fixture (an export) starts.
test: setup lint
	$(PY) -m pytest -ra --durations=15 $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The torch_free tests against the installed package in a fresh runtime-only venv, with whatever
# tokenizers and onnxruntime versions the resolver picks. Exports come from the main venv: the tiny one
# is written here, the bert-base one is $(MODEL_DIR) when `make demo` made it (else slow tests are left out).
test-runtime-only: setup
	rm -rf $(RUNTIME_VENV) $(RUNTIME_WORK)
	$(PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RUNTIME_VENV)/bin/python -m pip install --quiet . pytest
	@$(RUNTIME_VENV)/bin/python -c "import sys, numpy, onnxruntime, tokenizers; \
		print('runtime-only venv: python', sys.version.split()[0], '| tokenizers', tokenizers.__version__, \
		'| onnxruntime', onnxruntime.__version__, '| numpy', numpy.__version__)"
	$(PY) -m tests.write_tiny_export $(RUNTIME_WORK)/tiny
	mkdir -p $(RUNTIME_WORK)/suite
	cp -R tests README.md docs pyproject.toml $(RUNTIME_WORK)/suite/
	cd $(RUNTIME_WORK)/suite && BERTONNX_TEST_INSTALLED=1 \
		BERTONNX_TEST_TINY_EXPORT=$(abspath $(RUNTIME_WORK)/tiny/model) \
		$(if $(wildcard $(MODEL_DIR)/bertonnx.json),BERTONNX_TEST_BERT_BASE_EXPORT=$(abspath $(MODEL_DIR))) \
		$(abspath $(RUNTIME_VENV))/bin/python -m pytest -ra -p no:cacheprovider \
		-m "torch_free$(if $(wildcard $(MODEL_DIR)/bertonnx.json),, and not slow)" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(RUNTIME_VENV) models .cache/runtime-only .pytest_cache .ruff_cache .mypy_cache
