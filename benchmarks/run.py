"""Benchmarks: sampler vs transformers' generate(), and a GRPO step split by stage.

    python benchmarks/run.py [--policy builtin:base] [--prompts 32] [--group 8] [--steps 6] [--json FILE] [--quick]

Each measurement runs in its own subprocess so that its peak resident memory is its own.
Prints a table and writes the numbers (``--json``).  ``--quick``: 2 prompts x 2 samples, 8 new tokens, one repeat,
one step, the measurements in this process (their peak RSS is then not their own).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from common import result_args, save


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _prompts(policy, n: int, seed: int = 0) -> list[list[int]]:
    from veriloop.tasks.arithmetic import ArithmeticTask

    problems = ArithmeticTask().train_batch(n, random.Random(seed))
    return [policy.tokenizer(p.prompt).input_ids for p in problems]


def sampler_worker(args) -> dict:
    """Generated tokens per second of one engine on one workload."""
    import torch

    from veriloop.models.loading import load_policy
    from veriloop.rollout.sampler import SamplingParams, generate
    from veriloop.seeding import derive_seed

    policy = load_policy(args.policy)
    prompts = _prompts(policy, args.prompts)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    eos, pad = policy.eos_id, policy.pad_id

    def ours(seed):
        # the rollout engine's path: one random stream per completion (seeded as the trainer seeds them)
        row_seeds = [derive_seed(seed, "bench", i) for i in range(len(prompts) * args.group)]
        out = generate(policy.model, prompts, params, eos_id=eos, pad_id=pad, row_seeds=row_seeds, n=args.group)
        return out.num_tokens

    def hf(seed):
        # Same prompts, same left padding, same settings; generate() samples from its own RNG.
        torch.manual_seed(seed)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts]).repeat_interleave(args.group, 0)
        mask = (torch.arange(width)[None, :] >= (width - torch.tensor([len(p) for p in prompts]))[:, None]).long()
        mask = mask.repeat_interleave(args.group, 0)
        with torch.no_grad():
            out = policy.model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                temperature=args.temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=args.max_new_tokens,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        new = out[:, width:]
        tokens = 0
        for row in new.tolist():  # count up to and including EOS, as ours does
            tokens += row.index(eos) + 1 if eos in row else len(row)
        return tokens

    fn = ours if args.engine == "ours" else hf
    fn(0)  # warm-up
    rates = []
    for rep in range(args.repeats):
        t0 = time.perf_counter()
        tokens = fn(rep + 1)
        rates.append(tokens / (time.perf_counter() - t0))
    return {"engine": args.engine, "tokens_per_s": statistics.median(rates), "peak_rss_mb": _peak_rss_mb()}


def grpo_worker(args) -> dict:
    """Mean seconds per GRPO step by stage, after one warm-up step."""
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(
            TrainConfig,
            {},
            {
                "policy": args.policy,
                "run_dir": tmp,
                "steps": args.steps + 1,
                "checkpoint_every": 10**6,
                "save_rollouts": "false",
                "rollout.prompts_per_step": args.prompts,
                "rollout.group_size": args.group,
                "update.skip_zero_advantage": args.skip_flat,
                "sampling.max_new_tokens": args.max_new_tokens,
                # --quick's 8 tokens end few rows: learn from the cut ones too, so that the learner runs
                "update.mask_truncated": "false" if args.quick else "true",
            },
        )
        trainer = Trainer(cfg, progress=False)
        rows = [trainer.train_step(s) for s in range(1, args.steps + 2)][1:]
    mean = lambda k: statistics.mean(r[k] for r in rows)  # noqa: E731
    return {
        "generate_s": mean("time_generate_s"),
        "verify_s": mean("time_verify_s"),
        "update_s": mean("time_update_s"),
        "step_s": mean("time_step_s"),
        "update_sequences": mean("update_records"),
        "tokens_per_s": mean("tokens_per_s"),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _spawn(argv: list[str], here: bool = False) -> dict:
    """A measurement in a process of its own (``here``: in this one, as --quick runs them)."""
    if here:
        args = _parser().parse_args(argv)
        return sampler_worker(args) if args.worker == "sampler" else grpo_worker(args)
    out = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", default="builtin:base")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--skip-flat", default="true")
    result_args(p, "run")
    p.add_argument("--worker", choices=["sampler", "grpo"], help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=["ours", "hf"], default="ours", help=argparse.SUPPRESS)
    return p


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args = _parser().parse_args()
    if args.quick and not args.worker:
        args.prompts, args.group, args.max_new_tokens, args.repeats, args.steps = 2, 2, 8, 1, 1
        args.skip_flat = "false"  # the learner runs whatever the rewards
    if args.worker == "sampler":
        print(json.dumps(sampler_worker(args)))
        return
    if args.worker == "grpo":
        print(json.dumps(grpo_worker(args)))
        return

    import torch

    common = [
        "--policy",
        args.policy,
        "--prompts",
        str(args.prompts),
        "--group",
        str(args.group),
        "--temperature",
        str(args.temperature),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--repeats",
        str(args.repeats),
    ]
    ours = _spawn(common + ["--worker", "sampler", "--engine", "ours"], args.quick)
    hf = _spawn(common + ["--worker", "sampler", "--engine", "hf"], args.quick)
    grpo = _spawn(
        common
        + ["--worker", "grpo", "--steps", str(args.steps), "--skip-flat", args.skip_flat]
        + ["--quick"] * args.quick,
        args.quick,
    )
    print(
        f"# policy {args.policy}; {args.prompts} prompts x {args.group} samples, temperature {args.temperature}, "
        f"max_new_tokens {args.max_new_tokens}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print("\n| rollout engine | tokens/s | peak RSS (MB) |\n|---|---:|---:|")
    print(f"| veriloop sampler | {ours['tokens_per_s']:.0f} | {ours['peak_rss_mb']:.0f} |")
    print(f"| transformers generate() | {hf['tokens_per_s']:.0f} | {hf['peak_rss_mb']:.0f} |")
    print(f"| speed-up | {ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x | |")
    print(f"\n| GRPO step (mean of {args.steps}) | seconds |\n|---|---:|")
    for k in ("generate_s", "verify_s", "update_s", "step_s"):
        print(f"| {k[:-2]} | {grpo[k]:.3f} |")
    print(f"| sequences in the update | {grpo['update_sequences']:.0f} |")
    print(f"| peak RSS (MB) | {grpo['peak_rss_mb']:.0f} |")
    save(args, "run", {"sampler": ours, "generate": hf, "grpo_step": grpo, "args": vars(args)})


if __name__ == "__main__":
    main()
