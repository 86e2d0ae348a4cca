"""Where a GRPO step's time goes, against the FLOP floor of each phase (the peers' contract workload).

    python benchmarks/step_profile.py [--size 4.5M] [--steps 6] [--eos suppressed|natural] [--threads 2]
        [--option key=value ...] [--json F] [--quick]

Builds the contract model of ``benchmarks/peers.py`` (random-init Llama, 8 prompts x 8 completions, up to 64 new
tokens, token-mean loss, no KL, one pass, AdamW; ``--eos suppressed``, the default, pins every completion at 64
tokens with ``sampling.min_new_tokens``), runs ``Trainer.train_step`` in this process and times each phase with
wrappers around the functions that do it: generate (the rollout engine's call), verify, the learner's forward
(``completion_logprobs``), backward, the optimizer step (gradient clipping and AdamW) and the rest of the step
(bookkeeping: records, advantages, metrics).  Step 1 warms up; the table gives the median of steps 2..N.

The floor of a phase is its matmul FLOPs at this machine's measured fp32 matmul rate (``torch.mm`` of the model's
own shapes, the same threads; 4096 rows for the update, 64 rows, a decode step's, for generation): forward
``2 x P x tokens`` plus attention ``4 x layers x hidden x sum(L_q x L_k)``, backward twice the forward, generation
``2 x P`` per generated token plus its attention, where ``P`` counts the parameters every token multiplies (all but
the embedding table).  A phase far above its floor is overhead.  The header also gives the shares of one sampler
call's time in ``aten::mm`` and ``aten::bmm`` (torch profiler).  ``--quick``: ``peers.py``'s quick workload (2 prompts
x 2 completions of up to 8 tokens), 2 steps, one thread.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402  (the contract: model, tokenizer, problems, options)
from common import result_args, save, stamp_line  # noqa: E402


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


def matmul_rate(hidden: int, inter: int, threads: int, rows: int = 4096, vocab: int = 0) -> float:
    """GFLOP/s of fp32 ``torch.mm`` at the model's shapes with ``rows`` rows (4096: the update's scale; 64: a
    decode step's), best of 5 per shape, the mean over the shapes weighted by their FLOPs; ``vocab`` adds the LM
    head's shape (a production vocabulary's head is most of a step's FLOPs)."""
    import torch

    torch.set_num_threads(threads)
    flops, seconds = 0.0, 0.0
    for k, n in ((hidden, 3 * hidden), (hidden, 2 * inter), (inter, hidden), *([(hidden, vocab)] if vocab else [])):
        m = min(rows, 128) if n == vocab else rows  # the head in chunks of rows, as the learner runs it
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        repeats = max(1, 2**22 // (m * k * n // 1024))
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(repeats):
                torch.mm(a, b)
            best = min(best, (time.perf_counter() - started) / repeats)
        flops, seconds = flops + 2 * rows * k * n, seconds + best * rows / m
    return flops / seconds / 1e9


def sampler_op_shares(a, policy_dir: str) -> dict[str, float]:
    """Shares of one sampler call's CPU time (torch profiler, self time) in its matmuls: ``aten::mm`` (the
    projections and the LM head) and ``aten::bmm`` (attention over the cache)."""
    from torch.profiler import ProfilerActivity, profile

    from veriloop.models.loading import load_policy
    from veriloop.rollout.sampler import SamplingParams, generate

    policy = load_policy(policy_dir)
    prompts = [policy.tokenizer(p["prompt"]).input_ids for p in peers.problems(peers.PROMPTS_PER_STEP, a.seed)]
    minimum = peers.NEW_TOKENS if a.eos == "suppressed" else 0
    params = SamplingParams(temperature=1.0, max_new_tokens=peers.NEW_TOKENS, min_new_tokens=minimum)

    def once():
        return generate(
            policy.model,
            prompts,
            params,
            eos_id=policy.end_ids,
            pad_id=peers.PAD,
            row_seeds=list(range(len(prompts) * peers.GROUP)),
            n=peers.GROUP,
        )

    once()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        once()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    return {
        name: sum(e.self_cpu_time_total for e in events if e.key == name) / total for name in ("aten::mm", "aten::bmm")
    }


def floors(model: dict, rows: int, prompt: float, completion: float, rate: float, decode_rate: float):
    """Seconds each phase would take at ``rate`` GFLOP/s (generation: at ``decode_rate``, its matmuls' rate
    at 64 rows): generate, forward, backward.  The body's matmuls run at every position; the LM head's only where
    a token is predicted: at the completion's positions in the update, once per sampled token in generation (the
    prompt's last position, then each decode step)."""
    h, layers, vocab = model["hidden"], model["layers"], model.get("vocab", 512)
    head = vocab * h
    body = model["params"] - head * (1 if model.get("tied") else 2)  # the embedding table multiplies nothing
    length = prompt + completion
    attn_train = 4 * layers * h * rows * length * length / 2  # causal: half the L x L scores
    forward = 2 * body * rows * length + 2 * head * rows * completion + attn_train
    gen = (
        2 * body * rows * length
        + 2 * head * rows * completion
        + 4 * layers * h * rows * (completion * (prompt + completion / 2))
    )
    return {"generate": gen / decode_rate / 1e9, "forward": forward / rate / 1e9, "backward": 2 * forward / rate / 1e9}


def run(a) -> dict:
    import torch

    from veriloop.config import build_config
    from veriloop.rollout import engine as engine_module
    from veriloop.training.config import TrainConfig
    from veriloop.training.loop import learner as learner_module
    from veriloop.training.trainer import Trainer

    timers = Timers()
    timers.wrap(engine_module.LocalEngine, "run", "generate")
    timers.wrap(learner_module, "completion_logprobs", "forward")
    timers.wrap(learner_module, "backward_scaled", "backward")
    timers.wrap(learner_module.LocalLearner, "optimizer_step", "optimizer")
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
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the training's, before the profile
        shares = sampler_op_shares(a, model["dir"])
    rows = peers.PROMPTS_PER_STEP * peers.GROUP
    vocab = model.get("vocab", 0) if model.get("vocab", 512) > 512 else 0  # the contract's head is a rounding error
    rate = matmul_rate(model["hidden"], model["intermediate"], a.threads, vocab=vocab)
    decode_rate = matmul_rate(model["hidden"], model["intermediate"], a.threads, rows=rows, vocab=vocab)
    timed = steps[1:]
    median = {k: statistics.median(s.get(k, 0.0) for s in timed) for k in timed[0]}
    completion = median["tokens"] / (peers.PROMPTS_PER_STEP * peers.GROUP)
    floor = floors(
        model, peers.PROMPTS_PER_STEP * peers.GROUP, model["prompt_tokens_mean"], completion, rate, decode_rate
    )
    return {
        "model": {k: v for k, v in model.items() if k != "dir"},
        "options": options | {"policy": "(built)"},
        "threads": torch.get_num_threads(),
        "matmul_gflops": rate,
        "decode_matmul_gflops": decode_rate,
        "sampler_op_shares": shares,
        "steps": steps,
        "median": median,
        "floor": floor,
        "peak_rss_mib": peak_rss,
    }


def table_lines(r: dict) -> list[str]:
    """One profile's header and phase table, as markdown lines."""
    out: list[str] = []
    add = out.append
    m, floor = r["median"], r["floor"]
    add(
        f"# {r['model']['size']} ({r['model']['params']:,} parameters), {r['threads']} threads; fp32 matmul "
        f"measured at the model's shapes: {r['matmul_gflops']:.0f} GFLOP/s at 4096 rows, "
        f"{r['decode_matmul_gflops']:.0f} at 64 rows (a decode step: generation's floor); median of steps "
        f"2..{len(r['steps'])}; {m['tokens']:.0f} tokens generated per step; peak RSS {r['peak_rss_mib']:.0f} MiB"
    )
    shares = r["sampler_op_shares"]
    add(
        f"# one sampler call (torch profiler, self CPU time): aten::mm {shares['aten::mm']:.0%}, "
        f"aten::bmm {shares['aten::bmm']:.0%}"
    )
    add("\n| phase | seconds | share | floor s | x floor |\n|---|---:|---:|---:|---:|")
    for phase in ("generate", "verify", "forward", "backward", "optimizer", "rest", "wall"):
        if phase not in m:
            continue
        fl = floor.get(phase)
        over = f"{m[phase] / fl:.1f}" if fl else ""
        add(f"| {phase} | {m[phase]:.3f} | {m[phase] / m['wall']:.0%} | {f'{fl:.3f}' if fl else ''} | {over} |")
    return out


PAGE = "step-profile"


def render(results: list[dict]) -> str:
    lines = [
        "# Where a GRPO step's time goes",
        "",
        "`benchmarks/step_profile.py` runs the peer contract's GRPO step (8 prompts x 8 completions, 64 new tokens, "
        "token-mean loss, no KL, one pass, AdamW) in one process and times each phase with a wrapper around the "
        "function that does it; a phase's floor is its matmul FLOPs at this machine's fp32 `torch.mm` rate measured "
        "at the model's own shapes (the LM head's included). The [benchmarks guide]"
        "(../guides/benchmarks.md#where-a-steps-time-goes) reads the numbers.",
    ]
    for r in results:
        m = r["model"]
        lines += ["", f"## {m['size']}: {m.get('architecture', 'llama')}, vocabulary {m.get('vocab', 512):,}", ""]
        lines += [line[2:] if line.startswith("# ") else line for line in table_lines(r)]
        lines += ["", stamp_line(r)]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="4.5M", choices=list(peers.SIZES))
    p.add_argument("--steps", type=int, default=6, help="steps; step 1 warms up and is not in the medians")
    p.add_argument("--eos", choices=["natural", "suppressed"], default="suppressed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", default=[], help="a veriloop option over the contract's, key=value")
    result_args(p, "step_profile")
    a = p.parse_args()
    if a.quick:
        peers.use_quick_workload()
        a.steps, a.threads = 2, 1
    if a.steps < 2:
        p.error("--steps must be >= 2")
    result = run(a)
    print("\n".join(table_lines(result)))
    save(a, "step_profile", {"args": vars(a), **result})


if __name__ == "__main__":
    main()
