#!/usr/bin/env bash
# The peers of benchmarks/peers.py (TRL's GRPOTrainer and its data stack) in an environment of their own,
# .venv-bench, so that they never become dependencies of veriloop nor change the tested set in .venv.
#
# torch is the CPU build of requirements/cpu.txt (a bare torch requirement would pull a CUDA build); the peers of
# requirements/bench.txt and veriloop's own requirements (pyproject.toml [project].dependencies) are installed under
# requirements/constraints.txt, so transformers and every package they share stay at the versions the test suite
# ran with; veriloop itself goes in editable, with --no-deps (its extras are not needed to benchmark).
#   bash scripts/setup_bench_env.sh && .venv-bench/bin/python benchmarks/peers.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BENCH_VENV:-.venv-bench}
PYTHON=${PYTHON:-python3}
rm -rf "$VENV"  # never a half-built environment: the marker below is written last
"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/pip" install -q -c requirements/constraints.txt)
"${pip[@]}" -r requirements/cpu.txt                # torch 2.13.0, CPU build
# veriloop's base requirements, read from pyproject.toml so that this list never drifts from it
mapfile -t deps < <("$VENV/bin/python" -c '
import tomllib
with open("pyproject.toml", "rb") as fh:
    print("\n".join(tomllib.load(fh)["project"]["dependencies"]))
')
"${pip[@]}" "${deps[@]}"
"${pip[@]}" -r requirements/bench.txt
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/python" -c "
import importlib.metadata as m
import torch, transformers, trl, accelerate, datasets, veriloop
print('bench-env:', ', '.join(f'{p} {m.version(p)}' for p in ('torch', 'transformers', 'trl', 'accelerate', 'datasets')),
      'in $VENV')
"
touch "$VENV/.installed"
