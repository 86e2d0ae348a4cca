# Two entry points on a fresh machine (see README):
#   make demo   sets up .venv and runs `veriloop demo` on the built-in default
#   make test   sets up .venv and runs the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast bench base clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements/cpu.txt
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[test]'
	touch $@

demo: setup
	$(BIN)/veriloop demo

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/run.py

# Remake the shipped base checkpoint (src/veriloop/assets/base) with the default SFT settings.
base: setup
	$(BIN)/veriloop sft --config configs/sft-base.yaml

clean:
	rm -rf $(VENV) runs .pytest_cache
