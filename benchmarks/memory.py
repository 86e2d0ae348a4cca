"""Memory at real vocabulary sizes: peak memory and step time of GRPO steps with a 150k-row LM head.

    python benchmarks/memory.py [--vocab 150000] [--steps 2] [--threads 2] [--configs plain,chunked,budget,...]
                                [--device cpu] [--dtype float32] [--json FILE] [--quick]

About 13 minutes on 2 otherwise idle CPU cores (a 150k-vocabulary configuration ~2 minutes: three steps of
~35 s; a ~26M-parameter one ~1 minute); the plain configuration peaks near 19 GiB and is skipped when the machine
has less memory available (``--force`` runs it anyway).

A random qwen2 (hidden 128, 2 layers, 4 heads, 2 KV heads, intermediate 256, tied embeddings as Qwen2.5-0.5B)
whose embedding has ``--vocab`` rows, so that the LM head and not the weights dominates, runs GRPO on the
arithmetic task (8 prompts x 8 samples, 64 new tokens, micro-batches of 64 rows, kl.beta 0.04 so that the
reference pass runs too, one pass over each batch) under each configuration:

* ``plain``: ``update.logprob_chunk_tokens`` larger than any micro-batch, so ``completion_logprobs`` takes its
  plain path (the model's own ``[N, L, V]`` logits, gathered to ``[N, T, V]`` float32), no token budget, no
  checkpointing;
* ``chunked``: the auto chunk (``CHUNK_ELEMENTS`` logits per chunk);
* ``budget``: chunked, and ``update.max_tokens_per_micro_batch`` (``--token-budget``, 1024);
* ``ckpt``: chunked + budget + ``update.gradient_checkpointing``;
* ``lora``: the last + ``lora.r 16`` (at 150k rows the tied embedding is most of the weights, and LoRA freezes it);
* ``full-weights`` / ``lora-weights``: full fine-tuning against LoRA r16 (both as ``ckpt``) on a ~26M-parameter
  qwen2 (hidden 512, 8 layers, its tokenizer's own 4k vocabulary), where weights, gradients and AdamW moments
  dominate instead.

Each configuration runs in its own subprocess, so its peak resident memory (``ru_maxrss``) is its own; every
worker also counts the LM-head calls of each path (plain / chunked), so the table shows which one ran.  Step,
generate and update seconds are medians over ``--steps`` steps after one warm-up step.  The reward is a hash of
the completion text (``bench-memory-hash``): a random model's completions differ, so group advantages are
non-zero and the learner really runs.  On a GPU (``--device cuda``) torch's peak allocated and reserved CUDA
memory are reported too.  Prints a markdown table and writes the numbers (``--json``).  ``--quick``: the chunked
configuration alone on a 20k-row vocabulary (a 1k-token tokenizer) with LM-head chunks of 2 tokens (so that the
chunked path runs at this size), one step after the warm-up of 1 prompt x 4, 8 new tokens, one thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import result_args, save, silence_hub_progress  # noqa: E402

VERIFIER = "bench-memory-hash"
PLAIN_CHUNK = 1 << 40  # LM-head chunk larger than any micro-batch: completion_logprobs takes the plain path
# tokenizer_vocab_size: the BPE's own tokens (trained on GSM8K's texts); the vocab model's embedding is padded
# to --vocab rows beyond them.  16k real tokens of 150k: a random model samples a real one about 1 time in 9, so
# its completions decode to different texts and the hash reward varies within a group.
VOCAB_MODEL = dict(
    hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256, tokenizer_vocab_size=16384
)
WEIGHTS_MODEL = dict(
    hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=2, intermediate_size=1536, tokenizer_vocab_size=4096
)
MIB, GIB = 2**20, 2**30
# The plain path's peak is about 8x one micro-batch's float32 [N, T, V] logits (measured at 16 and 32 rows: the
# gathered logits, the scaled log-softmax, the entropy's exp / product / where, and their gradients).
PLAIN_FACTOR = 8


def configurations(args) -> dict[str, tuple[str, str, dict]]:
    """name -> (label, model: vocab | weights, config overrides)."""
    budget = {"update.max_tokens_per_micro_batch": args.token_budget}
    ckpt = {**budget, "update.gradient_checkpointing": True}
    lora = {"lora.r": 16, "lora.alpha": 32}
    return {
        "plain": ("plain LM head (no chunks)", "vocab", {"update.logprob_chunk_tokens": PLAIN_CHUNK}),
        "chunked": ("chunked LM head (auto)", "vocab", {}),
        "budget": (f"chunked + token budget {args.token_budget}", "vocab", budget),
        "ckpt": ("chunked + budget + grad checkpointing", "vocab", ckpt),
        "lora": ("chunked + budget + ckpt + LoRA r16", "vocab", {**ckpt, **lora}),
        "full-weights": ("~26M-param model: full fine-tuning", "weights", ckpt),
        "lora-weights": ("~26M-param model: LoRA r16", "weights", {**ckpt, **lora}),
    }


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _register_verifier() -> None:
    from veriloop import verifiers
    from veriloop.registry import VERIFIERS

    if VERIFIER in VERIFIERS:
        return

    @verifiers.register(VERIFIER)
    class TextHash(verifiers.Verifier):
        """A deterministic reward in [0, 1) from the completion text: different texts, different rewards."""

        name, version = VERIFIER, "1"

        def verify(self, completion, reference):
            score = int(hashlib.sha256(completion.encode()).hexdigest()[:8], 16) / 16**8
            return self._verdict(score, {"hash": score})


def _count_lm_head_paths() -> dict:
    """Count the calls of each LM-head path (``completion_logprobs``' plain one reads ``completion_logits``,
    its chunked one ``completion_hidden``), so a configuration's row shows which path really ran."""
    from veriloop.models.loading import Policy

    calls = {"plain": 0, "chunked": 0}
    for method, path in (("completion_logits", "plain"), ("completion_hidden", "chunked")):
        original = getattr(Policy, method)

        def counted(self, batch, _original=original, _path=path):
            calls[_path] += 1
            return _original(self, batch)

        setattr(Policy, method, counted)
    return calls


def _workload(args, run_dir: str) -> dict:
    return {
        "policy": args.model_dir,
        "run_dir": run_dir,
        "seed": 0,
        "steps": args.steps + 1,
        "verifier": VERIFIER,
        "checkpoint_every": 10**6,
        "save_rollouts": False,
        "threads": args.threads,
        "device": args.device,
        "dtype": args.dtype,
        "rollout.prompts_per_step": args.prompts,
        "rollout.group_size": args.group,
        "sampling.max_new_tokens": args.max_new_tokens,
        "update.micro_batch_size": args.micro_batch,
        "kl.beta": 0.04,
        "update.inner_updates": 1,  # a second pass repeats the first's memory and doubles the time
        "update.mask_truncated": False,  # a random model's rows are cut at max_new_tokens: the update must see them
    }


def _cuda_peaks(torch, device: str) -> dict:
    if not device.startswith("cuda"):
        return {}
    return {
        "cuda_peak_allocated_mb": torch.cuda.max_memory_allocated() / MIB,
        "cuda_peak_reserved_mb": torch.cuda.max_memory_reserved() / MIB,
    }


def worker(args) -> dict:
    """GRPO steps of one configuration: peak memory, LM-head calls, median times."""
    import torch

    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    _register_verifier()
    calls = _count_lm_head_paths()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(TrainConfig, {}, {**_workload(args, tmp), **json.loads(args.overrides)})
        trainer = Trainer(cfg, progress=False)
        loaded_mb = _peak_rss_mb()  # weights, optimizer (empty moments) and imports, before any step
        trainable = sum(p.numel() for p in trainer.policy.model.parameters() if p.requires_grad)
        rows = [trainer.train_step(s) for s in range(1, args.steps + 2)][1:]  # the first step warms up
    median = lambda k: statistics.median(r.get(k, 0.0) for r in rows)  # noqa: E731
    return {
        "peak_rss_mb": _peak_rss_mb(),
        "rss_after_load_mb": loaded_mb,
        **_cuda_peaks(torch, args.device),
        "step_s": median("time_step_s"),
        "generate_s": median("time_generate_s"),
        "update_s": median("time_update_s"),
        "lm_head_calls": calls,
        "trainable_params": trainable,
        "update_records": median("update_records"),
        "advantage_std": median("advantage_std"),
        "torch_threads": torch.get_num_threads(),
    }


def build_models(root: Path, kinds: set[str], vocab: int, quick: bool = False) -> dict[str, str]:
    """The random models the chosen configurations need, deterministically (seed 0), under ``root`` (``quick``: a
    1k-token tokenizer trained on 300 texts)."""
    import torch

    from veriloop.models.random_init import save_random_model
    from veriloop.tasks.gsm8k import DATA_DIR

    rows = [json.loads(line) for line in (DATA_DIR / "train.jsonl").read_text().splitlines() if line.strip()]
    texts = [f"{r['question']}\n{r['answer']}" for r in rows]
    shapes = {"vocab": dict(VOCAB_MODEL, vocab_size=vocab), "weights": WEIGHTS_MODEL}
    if quick:
        texts, shapes = texts[:300], {k: dict(v, tokenizer_vocab_size=1024) for k, v in shapes.items()}
    out = {}
    for kind in sorted(kinds):
        # tie_word_embeddings as Qwen2.5-0.5B: one [V, H] matrix is both embedding and LM head
        path = save_random_model(
            root / kind, "qwen2", texts, seed=0, dtype=torch.float32, tie_word_embeddings=True, **shapes[kind]
        )
        out[kind] = str(path)
    return out


def model_facts(model_dir: str, args) -> dict:
    """Parameters, vocabulary and the longest chat-templated prompt of the workload's task."""
    import random

    from veriloop.models.loading import PromptFormat, load_policy
    from veriloop.tasks.config import TaskConfig

    policy = load_policy(model_dir, prompts=PromptFormat("auto"))
    problems = TaskConfig().build().train_batch(256, random.Random(0))
    return {
        "params": sum(p.numel() for p in policy.model.parameters()),
        "vocab": policy.vocab_size,
        "prompt_tokens_max": max(len(policy.encode_prompt(p.prompt)) for p in problems),
    }


def logits_context(facts: dict, args) -> list[str]:
    """What the plain path holds for one micro-batch, and what a budgeted micro-batch and an auto chunk hold."""
    V, T = facts["vocab"], args.max_new_tokens
    N, L = min(args.micro_batch, args.prompts * args.group), facts["prompt_tokens_max"] + T
    budget_rows = max(1, min(N, args.token_budget // L))
    from veriloop.training.loop.logprobs import CHUNK_ELEMENTS

    chunk = max(1, CHUNK_ELEMENTS // V)
    size = lambda n, t: n * t * V * 4 / MIB  # noqa: E731
    return [
        f"one micro-batch of {N} rows, float32 [N, T, V] = [{N}, {T}, {V}] logits: {size(N, T):,.0f} MiB "
        f"(the model's own output over all L <= {L} positions: {size(N, L):,.0f} MiB)",
        f"with the {args.token_budget}-token budget: about {budget_rows} rows per micro-batch, "
        f"[N, T, V] = {size(budget_rows, T):,.0f} MiB; one auto chunk: {chunk} tokens x {V} = "
        f"{size(1, chunk):,.0f} MiB",
        f"the plain path's estimated peak: ~{plain_estimate_bytes(facts, args) / GIB:.1f} GiB "
        f"({PLAIN_FACTOR} x the [N, T, V] logits + 1 GiB)",
    ]


def _available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62  # unknown: do not refuse


def plain_estimate_bytes(facts: dict, args) -> int:
    rows = min(args.micro_batch, args.prompts * args.group)
    return PLAIN_FACTOR * rows * args.max_new_tokens * facts["vocab"] * 4 + GIB  # + weights, optimizer, imports


def plain_refusal(facts: dict, args) -> str:
    """Why the plain configuration is not run here ('' = it is): its estimated peak would not fit in the memory
    available now, and being killed for memory could take another process on this machine with it."""
    need, free = plain_estimate_bytes(facts, args), _available_bytes()
    if args.force or not args.device.startswith("cpu") or need < 0.9 * free:
        return ""
    return f"skipped: needs ~{need / GIB:.1f} GiB, {free / GIB:.1f} GiB available (--force runs it)"


def _spawn(args, model_dir: str, overrides: dict) -> dict:
    argv = [sys.executable, __file__, "--worker", "--model-dir", model_dir, "--overrides", json.dumps(overrides)]
    for flag in ("steps", "threads", "device", "dtype", "prompts", "group", "max_new_tokens", "micro_batch"):
        argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    t0 = time.time()
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        why = "killed (out of memory?)" if out.returncode < 0 else out.stderr.strip().splitlines()[-1:]
        return {"error": f"rc {out.returncode}: {why}", "wall_s": time.time() - t0}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "wall_s": time.time() - t0}


def check_result(name: str, model: str, result: dict) -> str:
    """'' when the run measured what it is meant to (the intended LM-head path, a learner that learns from
    non-zero advantages), else a warning."""
    calls = result.get("lm_head_calls")
    if calls is None:
        return ""
    if model == "vocab" and name == "plain" and calls["chunked"]:
        return f"{name}: the chunked path ran {calls['chunked']} times: not the plain path"
    if model == "vocab" and name != "plain" and not calls["chunked"]:
        return f"{name}: the chunked path never ran"
    if not result["advantage_std"]:
        return f"{name}: every advantage was 0 (the reward did not vary within any group)"
    return ""


def print_table(results: dict, labels: dict, cuda: bool) -> None:
    head = "| configuration | LM head calls plain / chunked | trainable params | peak RSS MiB | RSS after load MiB |"
    head += " peak CUDA alloc / reserved MiB |" if cuda else ""
    print(f"\n{head} step s | generate s | update s |")
    print("|---|---:|---:|---:|---:|" + ("---:|" if cuda else "") + "---:|---:|---:|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {labels[name]} | {r['error']} |")
            continue
        calls = r["lm_head_calls"]
        cells = [
            labels[name],
            f"{calls['plain']} / {calls['chunked']}",
            f"{r['trainable_params']:,}",
            f"{r['peak_rss_mb']:,.0f}",
            f"{r['rss_after_load_mb']:,.0f}",
        ]
        if cuda:
            cells.append(f"{r['cuda_peak_allocated_mb']:,.0f} / {r['cuda_peak_reserved_mb']:,.0f}")
        cells += [f"{r['step_s']:.2f}", f"{r['generate_s']:.2f}", f"{r['update_s']:.2f}"]
        print("| " + " | ".join(cells) + " |")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=150_000, help="embedding rows of the LM-head-bound model")
    p.add_argument("--steps", type=int, default=2, help="measured steps per configuration (after one warm-up)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--configs", default="plain,chunked,budget,ckpt,lora,full-weights,lora-weights")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--token-budget", type=int, default=1024)
    p.add_argument("--force", action="store_true", help="run plain even if its estimated peak exceeds free memory")
    result_args(p, "memory")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--overrides", default="{}", help=argparse.SUPPRESS)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.quick:
        args.vocab, args.steps, args.threads, args.configs = 20_000, 1, 1, "chunked"
        args.prompts, args.group, args.max_new_tokens, args.micro_batch = 1, 4, 8, 4
    silence_hub_progress()
    known = configurations(args)
    if args.quick:
        label, model, over = known["chunked"]
        known["chunked"] = (label + ", chunks of 2 tokens", model, {**over, "update.logprob_chunk_tokens": 2})
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SystemExit(f"--configs: unknown {unknown}; known: {', '.join(known)}")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp), {known[n][1] for n in names}, args.vocab, args.quick)
        facts = {kind: model_facts(path, args) for kind, path in models.items()}
        results = {}
        for n in names:
            refusal = plain_refusal(facts["vocab"], args) if n == "plain" else ""
            results[n] = {"error": refusal} if refusal else _spawn(args, models[known[n][1]], known[n][2])
    report(args, known, names, facts, results, time.time() - started)


def report(args, known, names, facts, results, wall: float) -> None:
    import torch

    print(
        f"# {args.prompts} prompts x {args.group} samples, {args.max_new_tokens} new tokens, micro-batches of "
        f"{args.micro_batch}, kl.beta 0.04; {args.device} {args.dtype}, {args.threads} threads; "
        f"torch {torch.__version__}; medians of {args.steps} steps after a warm-up"
    )
    for kind, f in facts.items():
        print(
            f"# {kind} model: qwen2, {f['params']:,} parameters, vocabulary {f['vocab']:,}, prompts <= "
            f"{f['prompt_tokens_max']} tokens"
        )
    if "vocab" in facts:
        for line in logits_context(facts["vocab"], args):
            print(f"# {line}")
    print_table(results, {n: known[n][0] for n in names}, args.device.startswith("cuda"))
    warnings = [w for n in names if (w := check_result(n, known[n][1], results[n]))]
    for w in warnings:
        print(f"WARNING: {w}")
    print(f"\n# total wall time {wall:.0f} s")
    out = {
        "args": vars(args),
        "models": facts,
        "results": results,
        "warnings": warnings,
        "wall_s": wall,
        "context": logits_context(facts["vocab"], args) if "vocab" in facts else [],
    }
    save(args, "memory", out)


if __name__ == "__main__":
    main()
