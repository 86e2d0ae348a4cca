"""Where a GRPO step's time goes, against the FLOP floor of each phase (the peers' contract workload).

    python benchmarks/step_profile.py [--size 4.5M] [--steps 6] [--eos suppressed|natural] [--threads 2]
        [--option key=value ...] [--json F]

Builds the contract model of ``benchmarks/peers.py`` (random-init Llama, 8 prompts x 8 completions, up to 64 new
tokens, token-mean loss, no KL, one pass, AdamW; ``--eos suppressed``, the default, pins every completion at 64
tokens with ``sampling.min_new_tokens``), runs ``Trainer.train_step`` in this process and times each phase with
wrappers around the functions that do it: generate (the rollout engine's call), verify, the learner's forward
(``completion_logprobs``), backward, the optimizer step (gradient clipping and AdamW) and the rest of the step
(bookkeeping: records, advantages, metrics).  Step 1 warms up; the table gives the median of steps 2..N.

The floor of a phase is its matmul FLOPs at this machine's measured fp32 matmul rate (``torch.mm`` of the model's
own shapes, the same threads): forward ``2 x P x tokens`` plus attention ``4 x layers x hidden x sum(L_q x L_k)``,
backward twice the forward, generation ``2 x P`` per generated token plus its attention, where ``P`` counts the
parameters every token multiplies (all but the embedding table).  A phase far above its floor is overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402  (the contract: model, tokenizer, problems, options)


class Timers:
    """Seconds spent inside wrapped callables, per step."""

    def __init__(self):
        self.now: dict[str, float] = {}

    def wrap(self, owner, name: str, phase: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kw):
            started = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                self.now[phase] = self.now.get(phase, 0.0) + time.perf_counter() - started

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        out, self.now = self.now, {}
        return out


def matmul_rate(hidden: int, inter: int, threads: int) -> float:
    """GFLOP/s of fp32 ``torch.mm`` at the model's shapes (4096 rows), best of 5."""
    import torch

    torch.set_num_threads(threads)
    best = 0.0
    for k, n in ((hidden, 3 * hidden), (hidden, 2 * inter), (inter, hidden)):
        a, b = torch.randn(4096, k), torch.randn(k, n)
        torch.mm(a, b)
        for _ in range(5):
            started = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * 4096 * k * n / (time.perf_counter() - started) / 1e9)
    return best


def floors(model: dict, rows: int, prompt: float, completion: float, rate: float) -> dict[str, float]:
    """Seconds each phase would take at ``rate`` GFLOP/s: (generate, forward, backward)."""
    h, layers, vocab = model["hidden"], model["layers"], 512
    dense = model["params"] - vocab * h  # every token multiplies all but the embedding table
    length = prompt + completion
    attn_train = 4 * layers * h * rows * length * length / 2  # causal: half the L x L scores
    forward = 2 * dense * rows * length + attn_train
    gen = 2 * dense * rows * (prompt + completion) + 4 * layers * h * rows * (completion * (prompt + completion / 2))
    return {"generate": gen / rate / 1e9, "forward": forward / rate / 1e9, "backward": 2 * forward / rate / 1e9}


def run(a) -> dict:
    import torch

    from veriloop.config import build_config
    from veriloop.rollout import engine as engine_module
    from veriloop.training import learner as learner_module
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    timers = Timers()
    timers.wrap(engine_module.LocalEngine, "run", "generate")
    timers.wrap(learner_module, "completion_logprobs", "forward")
    timers.wrap(learner_module, "backward_scaled", "backward")
    timers.wrap(learner_module.Learner, "optimizer_step", "optimizer")
    with tempfile.TemporaryDirectory(prefix="step-profile-") as tmp:
        model = peers.build_model(a.size, Path(tmp) / a.size, a.seed)
        data = Path(tmp) / "problems.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in peers.problems(1024, a.seed)))
        a.model_dir, a.data = model["dir"], str(data)
        options, _ = peers.veriloop_options(a, f"{tmp}/run")
        for item in a.option:
            key, _, value = item.partition("=")
            options[key] = value
        trainer = Trainer(build_config(TrainConfig, {}, options), progress=False)
        steps = []
        try:
            for step in range(1, a.steps + 1):
                started = time.perf_counter()
                row = trainer.train_step(step)
                wall = time.perf_counter() - started
                phases = timers.take()
                phases["verify"] = row["time_verify_s"]
                phases["rest"] = wall - sum(phases.values())
                steps.append({"wall": wall, "tokens": row["sampled_tokens"], **phases})
        finally:
            trainer.close()
    import resource

    rate = matmul_rate(model["hidden"], model["intermediate"], a.threads)
    timed = steps[1:]
    median = {k: statistics.median(s.get(k, 0.0) for s in timed) for k in timed[0]}
    completion = median["tokens"] / (peers.PROMPTS_PER_STEP * peers.GROUP)
    floor = floors(model, peers.PROMPTS_PER_STEP * peers.GROUP, model["prompt_tokens_mean"], completion, rate)
    return {"model": {k: v for k, v in model.items() if k != "dir"}, "options": options | {"policy": "(built)"},
            "threads": torch.get_num_threads(), "matmul_gflops": rate, "steps": steps, "median": median,
            "floor": floor, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # fmt: skip


def print_table(r: dict) -> None:
    m, floor = r["median"], r["floor"]
    print(f"# {r['model']['size']} ({r['model']['params']:,} parameters), {r['threads']} threads, fp32 matmul "
          f"{r['matmul_gflops']:.0f} GFLOP/s measured; median of steps 2..{len(r['steps'])}; "
          f"{m['tokens']:.0f} tokens generated per step; peak RSS {r['peak_rss_mib']:.0f} MiB")  # fmt: skip
    print("\n| phase | seconds | share | floor s | x floor |\n|---|---:|---:|---:|---:|")
    for phase in ("generate", "verify", "forward", "backward", "optimizer", "rest", "wall"):
        if phase not in m:
            continue
        fl = floor.get(phase)
        over = f"{m[phase] / fl:.1f}" if fl else ""
        print(f"| {phase} | {m[phase]:.3f} | {m[phase] / m['wall']:.0%} | {f'{fl:.3f}' if fl else ''} | {over} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="4.5M", choices=list(peers.SIZES))
    p.add_argument("--steps", type=int, default=6, help="steps; step 1 warms up and is not in the medians")
    p.add_argument("--eos", choices=["natural", "suppressed"], default="suppressed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", default=[], help="a veriloop option over the contract's, key=value")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps must be >= 2")
    result = run(a)
    print_table(result)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
