"""Which veriloop files one GRPO step runs code in, and the hops between them (docs/concepts/architecture.md).

python scripts/step_trace.py [--json]

Builds the default GRPO trainer on the built-in model (8 prompts x 4 completions, 64 new tokens: rewards that vary,
so the update runs), runs one step untraced (warm-up), then traces the second with ``sys.setprofile`` in every
thread: a *file* is a veriloop source file one of whose functions ran during the step; a *hop* is a distinct
(caller file -> callee file) pair, one veriloop function calling one of another file.  It prints the files, in the
order first entered, and the hops.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from pathlib import Path

import veriloop

PACKAGE = Path(veriloop.__file__).resolve().parent


def _ours(filename: str) -> str | None:
    try:
        return str(Path(filename).resolve().relative_to(PACKAGE))
    except ValueError:
        return None


def trace_step(trainer, step: int) -> tuple[list[str], set[tuple[str, str]]]:
    files: dict[str, None] = {}
    hops: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _ours(frame.f_code.co_filename)
        if callee is None:
            return
        files.setdefault(callee, None)
        caller = frame.f_back
        while caller is not None and _ours(caller.f_code.co_filename) is None:
            caller = caller.f_back  # through torch, the standard library...: the veriloop function that led here
        if caller is not None and _ours(caller.f_code.co_filename) != callee:
            hops.add((_ours(caller.f_code.co_filename), callee))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        trainer.train_step(step)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return list(files), hops


def main() -> int:
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        options = {
            "run_dir": f"{tmp}/run",
            "steps": 2,
            "rollout.prompts_per_step": 8,
            "rollout.group_size": 4,
            "sampling.max_new_tokens": 64,
            "threads": 1,
        }
        trainer = Trainer(build_config(TrainConfig, {}, options), progress=False)
        trainer.train_step(1)
        files, hops = trace_step(trainer, 2)
        trainer.close()
    if "--json" in sys.argv:
        print(json.dumps({"files": files, "hops": sorted(hops)}, indent=1))
    else:
        print(f"one GRPO step runs code in {len(files)} veriloop files, with {len(hops)} hops between them")
        for f in files:
            print(f"  {f}")
        for a, b in sorted(hops):
            print(f"  {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
