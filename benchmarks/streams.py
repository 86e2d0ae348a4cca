"""Per-row random streams against one generator per batch: the sampler's cost per token, in one process.

    python benchmarks/streams.py [--policy builtin:base] [--calls 8] [--prompts 32] [--group 8] [--json FILE] [--quick]

Alternates the two ways of drawing on the same prompts (temperature 0.7, 64 new tokens), so the
machine's drift hits both alike; prints milliseconds per 1,000 generated tokens and tokens per call.
``--quick``: one call of 2 prompts x 2 samples, 8 new tokens.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from common import result_args, save

from veriloop.models.loading import load_policy
from veriloop.rollout.sampler import SamplingParams, generate
from veriloop.seeding import derive_seed
from veriloop.tasks.arithmetic import ArithmeticTask


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", default="builtin:base")
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--group", type=int, default=8)
    result_args(p, "streams")
    args = p.parse_args()
    if args.quick:
        args.calls, args.prompts, args.group = 1, 2, 2
    policy = load_policy(args.policy)
    problems = ArithmeticTask().train_batch(args.prompts, random.Random(0))
    prompts = [policy.tokenizer(q.prompt).input_ids for q in problems]
    params = SamplingParams(temperature=0.7, max_new_tokens=8 if args.quick else 64)
    n_rows = len(prompts) * args.group

    def call(kind: str, seed: int) -> tuple[int, float]:
        draws = (
            {"generator": torch.Generator().manual_seed(seed)}
            if kind == "one generator per batch"
            else {"row_seeds": [derive_seed(seed, "bench", i) for i in range(n_rows)]}
        )
        t0 = time.perf_counter()
        out = generate(policy.model, prompts, params, eos_id=policy.eos_id, pad_id=policy.pad_id, n=args.group, **draws)
        return out.num_tokens, time.perf_counter() - t0

    kinds = ("one generator per batch", "per-row streams")
    for kind in kinds:  # warm-up
        call(kind, 0)
    totals = {k: [0, 0.0] for k in kinds}
    for seed in range(1, args.calls + 1):
        for kind in kinds if seed % 2 else reversed(kinds):
            tokens, seconds = call(kind, seed)
            totals[kind][0] += tokens
            totals[kind][1] += seconds
    print("| draws | ms per 1,000 tokens | tokens per call |\n|---|---:|---:|")
    for kind, (tokens, seconds) in totals.items():
        print(f"| {kind} | {1e6 * seconds / tokens:.2f} | {tokens / args.calls:,.0f} |")
    rows = {k: {"tokens": t, "seconds": sec, "ms_per_1000_tokens": 1e6 * sec / t} for k, (t, sec) in totals.items()}
    save(args, "streams", {"args": vars(args), "max_new_tokens": params.max_new_tokens, "draws": rows})


if __name__ == "__main__":
    main()
