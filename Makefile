# kubectl-triton: `make install` then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install test lint render bench fuzz clean

install: $(BIN)/kubectl-triton

$(BIN)/kubectl-triton: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@
	@echo "installed: $(BIN)/kubectl-triton (add $(abspath $(BIN)) to PATH for 'kubectl triton')"

# pytest exits 5 when it collects no test: that is a failure here too, so no special case is needed.
test: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check kubectl_triton tests bench

render: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/kubectl-triton render --all

bench: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/run.py

# Property-based tests with many more examples than `make test` runs.
fuzz: install
	KUBECTL_TRITON_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest -q tests -k fuzz -p no:cacheprovider

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
