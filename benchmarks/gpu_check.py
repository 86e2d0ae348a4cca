"""GPU check: a model of Qwen2.5-0.5B-Instruct's shape (random weights) through bf16 GRPO on GSM8K.

    python benchmarks/gpu_check.py              # on one GPU (an H200): parts start within 7 minutes, exit by 9
    python benchmarks/gpu_check.py --smoke      # on a CPU: a tiny qwen2 with the same vocabulary, under 2 minutes
    python benchmarks/gpu_check.py --quick      # the smoke's model at toy sizes, on the GPU if there is one (CI: CPU)

Each part is timed and recorded on its own: an exception is recorded with its traceback and the next part still
runs; a part that would start after ``--budget-s`` is skipped, and at ``--hard-limit-s`` the process writes what
it has and exits (status 124).

1. ``build``: a random qwen2 with Qwen2.5-0.5B-Instruct's configuration (hidden 896, 24 layers, 14 heads, 2 KV
   heads, intermediate 4864, tied embeddings, rope_theta 1e6, rms_norm_eps 1e-6, 32768 positions, no sliding
   window) and a ChatML byte-level BPE trained on GSM8K (16k tokens; the embedding padded to 151,936 rows),
   saved in bfloat16 as ``save_random_model`` does.  The shapes are Qwen's; the tokenizer (so the ids) is not.
2. ``grpo``: steps of ``configs/gsm8k-qwen2.5-0.5b-instruct.yaml`` (bf16, chat template, boxed prompts, verifier
   gsm8k, token budget 16384, gradient checkpointing) at ``--prompts`` x ``--group``, ``--max-new-tokens``: each
   step's seconds (generate, update), the sampler/learner ``logprob_mismatch``, peak CUDA memory.  A random model
   earns reward 0 everywhere, so ``update.skip_zero_advantage`` is off here and the learner runs over every row,
   as it does when rewards vary; its completions rarely end (2 end tokens in 151,936), so they run to the limit:
   the recipe's worst case.
3. ``sampler``: veriloop's sampler against transformers' ``generate()`` on the same model, prompts and batch
   (bf16, temperature 1, no top-k/top-p, same max_new_tokens).  generate() is pinned to the limit
   (min_new_tokens = max_new_tokens); veriloop has no ``sampling.min_new_tokens`` yet, so a row of its that ends
   early stops costing: the comparison is on tokens actually generated per second.
4. ``tis``: one step with ``loss.tis_cap`` 0 and one with 2.0 (same seed, so the same completions): the bf16
   logprob_mismatch and the truncated-IS weight.

Writes the stamped result (``--json FILE``; default ``$OUT/gpu_check.json``, ``runs/bench/gpu_check.json`` when OUT
is unset) after every part and every GRPO step, and prints tables at the end.  ``--quick`` is ``--smoke`` at the
sizes of ``QUICK_SIZES`` and a tokenizer of 1,024 tokens trained on 300 texts: every part runs, on the GPU where
there is one and else on the CPU (``env.device`` in the result says which).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from common import result_args, result_path, stamp

START = time.time()  # the limits count from the process's start, imports included
ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "configs" / "gsm8k-qwen2.5-0.5b-instruct.yaml"
PARTS = ("build", "grpo", "sampler", "tis")
MIB = 2**20

# Qwen2.5-0.5B-Instruct's config.json (use_sliding_window false: transformers then drops the window itself).
QWEN25_05B = dict(
    hidden_size=896,
    num_layers=24,
    num_heads=14,
    num_kv_heads=2,
    intermediate_size=4864,
    max_positions=32768,
    vocab_size=151936,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    rms_norm_eps=1e-6,
    use_sliding_window=False,
    sliding_window=32768,
    max_window_layers=21,
)
SMOKE_MODEL = dict(QWEN25_05B, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)

# Sizes on the GPU: the recipe's batch (16 x 8, 512 tokens) for GRPO and the sampler; a smaller batch for the
# two TIS steps, which measure a ratio, not a speed.  The smoke sizes only prove that every part runs.
GPU_SIZES = dict(
    steps=4,
    prompts=16,
    group=8,
    max_new_tokens=512,
    tis_prompts=8,
    tis_max_new_tokens=256,
    budget_s=420,
    hard_limit_s=540,
)
SMOKE_SIZES = dict(
    steps=2, prompts=2, group=4, max_new_tokens=32, tis_prompts=2, tis_max_new_tokens=32, budget_s=100, hard_limit_s=150
)
QUICK_SIZES = dict(SMOKE_SIZES, steps=1, prompts=1, group=2, max_new_tokens=8, tis_prompts=1, tis_max_new_tokens=8)
STEP_KEYS = (
    "step",
    "time_step_s",
    "time_generate_s",
    "time_verify_s",
    "time_update_s",
    "logprob_mismatch",
    "sampled_tokens",
    "update_records",
    "completion_len_mean",
    "truncation_rate",
    "gen_tokens_per_s",
    "grad_norm",
    "reward_mean",
)


def cuda_on(device: str) -> bool:
    import torch

    return device != "cpu" and torch.cuda.is_available()


def sync(device: str) -> None:
    import torch

    if cuda_on(device):
        torch.cuda.synchronize()


def free_memory(device: str) -> None:
    import torch

    gc.collect()
    if cuda_on(device):
        torch.cuda.empty_cache()


def cuda_memory(device: str, prefix: str = "cuda_peak") -> dict:
    import torch

    if not cuda_on(device):
        return {}
    return {
        f"{prefix}_allocated_mb": torch.cuda.max_memory_allocated() / MIB,
        f"{prefix}_reserved_mb": torch.cuda.max_memory_reserved() / MIB,
    }


def gsm8k_texts(limit: int | None = None) -> list[str]:
    from veriloop.tasks.gsm8k import DATA_DIR

    rows = [json.loads(line) for line in (DATA_DIR / "train.jsonl").read_text().splitlines() if line.strip()]
    return [f"{r['question']}\n{r['answer']}" for r in rows][:limit]


def environment(args) -> dict:
    import torch
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": args.device,
        "dtype": args.dtype,
        "cpu_threads": torch.get_num_threads(),
    }
    if cuda_on(args.device):
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu=props.name,
            gpu_memory_mb=props.total_memory / MIB,
            cuda=torch.version.cuda,
            bf16=torch.cuda.is_bf16_supported(),
        )
    return env


class Check:
    """The parts in order, the results written after each, a budget and a hard time limit."""

    def __init__(self, args, out: Path, tmp: Path):
        self.args, self.out, self.tmp = args, out, tmp
        self.model_dir = str(tmp / "model")
        self.started, self.current = START, ""
        env = environment(args)
        self.results = {"stamp": stamp(sys.argv), "args": vars(args), "env": env, "parts": {}}
        self.lock = threading.Lock()

    def elapsed(self) -> float:
        return time.time() - self.started

    def over_budget(self) -> bool:
        return self.elapsed() > self.args.budget_s

    def write(self) -> None:
        with self.lock:
            self.results["elapsed_s"] = round(self.elapsed(), 1)
            self.out.write_text(json.dumps(self.results, indent=2, default=str))

    def abort(self) -> None:
        """The hard limit: keep what was measured, say where it stopped, and end the process now."""
        self.results["aborted"] = f"hard limit {self.args.hard_limit_s} s reached during part {self.current!r}"
        try:  # the main thread may be changing the results right now: a failed write must not block the exit
            self.write()
            print_report(self.results)
        finally:
            sys.stdout.flush()
            os._exit(124)

    def part(self, name: str, fn) -> None:
        """Run ``fn(live)``; ``live`` is this part's entry in the results (written as it fills)."""
        live = self.results["parts"][name] = {"status": "running"}
        build = self.results["parts"].get("build", {})
        if name != "build" and build.get("status") not in (None, "ok"):
            live["status"] = "skipped: no model (build did not succeed)"
        elif self.over_budget():
            live["status"] = f"skipped: budget {self.args.budget_s} s spent"
        else:
            self.current, t0 = name, time.time()
            self._reset_peaks()
            try:
                fn(live)
                live["status"] = "ok"
            except Exception:  # noqa: BLE001 - recorded, and the next part still runs
                live["error"] = traceback.format_exc()[-4000:]
                live["status"] = "error: " + live["error"].strip().splitlines()[-1]
                print(live["error"], file=sys.stderr)
            live["seconds"] = round(time.time() - t0, 2)
            live.update(cuda_memory(self.args.device))
            free_memory(self.args.device)
        print(f"[{self.elapsed():6.1f} s] {name}: {live['status']}", file=sys.stderr)
        self.write()

    def _reset_peaks(self) -> None:
        import torch

        if cuda_on(self.args.device):
            torch.cuda.reset_peak_memory_stats()

    # ------------------------------------------------------------------ the parts

    def build(self, live: dict) -> None:
        """save_random_model's steps, kept apart to count the parameters without loading the model again."""
        from veriloop.models.device import DTYPES
        from veriloop.models.loading import save_policy
        from veriloop.models.random_init import build_random_model, train_bpe_tokenizer

        shape = SMOKE_MODEL if self.args.smoke else QWEN25_05B
        t0 = time.time()
        texts = gsm8k_texts(300 if self.args.quick else None)
        tokenizer = train_bpe_tokenizer(texts, self.args.tokenizer_vocab, "chatml", shape["max_positions"])
        live["tokenizer_s"] = round(time.time() - t0, 2)
        model = build_random_model("qwen2", tokenizer, seed=0, dtype=DTYPES[self.args.dtype], **shape)
        live["params"] = sum(p.numel() for p in model.parameters())
        save_policy(model, tokenizer, self.model_dir)  # weights, config, generation_config, tokenizer
        del model
        config = json.loads((Path(self.model_dir) / "config.json").read_text())
        keys = (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "tie_word_embeddings",
            "rope_parameters",
            "rms_norm_eps",
            "max_position_embeddings",
            "use_sliding_window",
            "sliding_window",
            "dtype",
        )
        live.update(
            tokenizer_tokens=len(tokenizer),
            config={k: config.get(k) for k in keys},
            size_mb=sum(p.stat().st_size for p in Path(self.model_dir).iterdir()) / MIB,
        )

    def train_config(self, name: str, steps: int, prompts: int, max_new_tokens: int, **extra):
        """The recipe, with this check's model, device, sizes; no evaluation, checkpoints or rollout files."""
        from veriloop.config import build_config, load_yaml
        from veriloop.training.config import TrainConfig

        a = self.args
        over = {
            "policy": self.model_dir,
            "run_dir": str(self.tmp / name),
            "steps": steps,
            "device": a.device,
            "dtype": a.dtype,
            "rollout.prompts_per_step": prompts,
            "rollout.group_size": a.group,
            "sampling.max_new_tokens": max_new_tokens,
            "eval_every": 0,
            "save_rollouts": False,
            "checkpoint_every": 10**6,
            "update.skip_zero_advantage": False,
            **extra,
        }
        if a.smoke:  # a budget the tiny batch crosses, so the token-budget cut runs here too
            over["update.max_tokens_per_micro_batch"] = 256
        if a.quick:  # 8 tokens end no row of a random model: learn from the cut rows, so that the learner runs
            over["update.mask_truncated"] = False
        if a.chunk_tokens is not None:  # the auto chunk (2**25 logits, ~220 tokens at 152k) is sized for a CPU
            over["update.logprob_chunk_tokens"] = a.chunk_tokens
        return build_config(TrainConfig, load_yaml(RECIPE), over, source=str(RECIPE))

    def grpo(self, live: dict) -> None:
        from veriloop.training.trainer import Trainer

        a = self.args
        trainer = Trainer(self.train_config("grpo", a.steps, a.prompts, a.max_new_tokens), progress=False)
        live.update(cuda_memory(a.device, "cuda_after_load"))
        live["steps"] = []
        for step in range(1, a.steps + 1):
            if self.over_budget():
                live["stopped_early"] = f"budget {a.budget_s} s spent after {step - 1} steps"
                break
            row = trainer.train_step(step)
            live["steps"].append({k: row[k] for k in STEP_KEYS if k in row})
            self.write()
        later = live["steps"][1:] or live["steps"]  # the first step also warms up kernels and caches
        live["median_after_first"] = {
            k: statistics.median(r[k] for r in later)
            for k in ("time_step_s", "time_generate_s", "time_update_s", "logprob_mismatch")
            if all(k in r for r in later)
        }

    def sampler(self, live: dict) -> None:
        from veriloop.models.device import Placement
        from veriloop.models.loading import PromptFormat, load_policy
        from veriloop.rollout import static_decode

        a = self.args
        policy = load_policy(self.model_dir, placement=Placement.of(a.device, a.dtype), prompts=PromptFormat("auto"))
        prompts = gsm8k_prompts(policy, a.prompts)
        width = max(len(p) for p in prompts)
        live.update(
            rows=len(prompts) * a.group,
            max_new_tokens=a.max_new_tokens,
            prompt_tokens=[min(len(p) for p in prompts), width],
            veriloop_engine="static" if static_decode.supports(policy.model, width + a.max_new_tokens) else "hf",
        )
        for name, run in (("veriloop", run_veriloop), ("generate", run_generate)):
            run(policy, prompts, a.group, 8, a.device)  # warm-up: kernels, allocator, cache set-up
            sync(a.device)
            t0 = time.perf_counter()
            tokens, at_limit = run(policy, prompts, a.group, a.max_new_tokens, a.device)
            sync(a.device)
            seconds = time.perf_counter() - t0
            live[name] = {
                "tokens": tokens,
                "rows_at_limit": at_limit,
                "seconds": round(seconds, 3),
                "tokens_per_s": tokens / seconds,
            }
            self.write()
        live["speedup"] = live["veriloop"]["tokens_per_s"] / live["generate"]["tokens_per_s"]

    def tis(self, live: dict) -> None:
        from veriloop.training.trainer import Trainer

        a = self.args
        for cap in (0.0, 2.0):
            cfg = self.train_config(f"tis-{cap}", 1, a.tis_prompts, a.tis_max_new_tokens, **{"loss.tis_cap": cap})
            trainer = Trainer(cfg, progress=False)
            row = trainer.train_step(1)
            keys = ("logprob_mismatch", "tis_weight", "ratio_min", "ratio_max", "time_update_s", "sampled_tokens")
            live[f"tis_cap={cap}"] = {k: row[k] for k in keys if k in row}
            del trainer
            free_memory(a.device)
            self.write()


def gsm8k_prompts(policy, n: int) -> list[list[int]]:
    """The first ``n`` of a seeded draw of GSM8K training problems, boxed and through the chat template."""
    from veriloop.tasks.config import TaskConfig

    task = TaskConfig(name="gsm8k", prompt_style="boxed").build()
    return [policy.encode_prompt(p.prompt) for p in task.train_batch(n, random.Random(0))]


def run_veriloop(policy, prompts, group: int, max_new_tokens: int, device: str) -> tuple[int, int]:
    """(tokens generated, rows that ran to the limit) of the rollout engine's sampler."""
    from veriloop.rollout.sampler import SamplingParams, generate
    from veriloop.seeding import derive_seed

    seeds = [derive_seed(0, "gpu-check", i) for i in range(len(prompts) * group)]
    out = generate(
        policy.model,
        prompts,
        SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens),
        eos_id=policy.end_ids,
        pad_id=policy.pad_id,
        row_seeds=seeds,
        n=group,
    )
    return out.num_tokens, out.finish_reasons.count("length")


def run_generate(policy, prompts, group: int, max_new_tokens: int, device: str) -> tuple[int, int]:
    """(tokens generated, rows at the limit) of transformers' generate(), pinned to max_new_tokens."""
    import torch

    pad, width = policy.pad_id, max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts]).repeat_interleave(group, 0)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts]).repeat_interleave(group, 0)
    dev = policy.device
    torch.manual_seed(0)
    with torch.no_grad():
        out = policy.model.generate(
            ids.to(dev),
            attention_mask=mask.to(dev),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            eos_token_id=list(policy.end_ids),
            pad_token_id=pad,
        )
    new = out[:, width:].cpu()
    ended = torch.isin(new, torch.tensor(policy.end_ids)).any(dim=1)  # only possible if generate overran the pin
    return new.numel(), int((~ended).sum()) if new.shape[1] == max_new_tokens else 0


# ---------------------------------------------------------------------- report


def _f(x, digits: int = 2) -> str:
    return "" if x is None else f"{x:,.{digits}f}" if isinstance(x, float) else str(x)


def print_report(results: dict) -> None:
    parts, env = results["parts"], results["env"]
    print(
        f"# {env.get('gpu', 'cpu')} | torch {env['torch']} | transformers {env['transformers']} | "
        f"{env['dtype']} | elapsed {results.get('elapsed_s')} s"
    )
    if "aborted" in results:
        print(f"# ABORTED: {results['aborted']}")
    gpu = "gpu" in env
    print("\n| part | status | seconds |" + (" peak CUDA allocated / reserved MiB |" if gpu else ""))
    print("|---|---|---:|" + ("---:|" if gpu else ""))
    for name, p in parts.items():
        mem = f" {_f(p.get('cuda_peak_allocated_mb'), 0)} / {_f(p.get('cuda_peak_reserved_mb'), 0)} |" if gpu else ""
        print(f"| {name} | {p['status'][:80]} | {_f(p.get('seconds'))} |{mem}")
    if "build" in parts and "params" in parts["build"]:
        b = parts["build"]
        print(
            f"\n# model: {b['params']:,} parameters, tokenizer {b['tokenizer_tokens']:,} tokens, "
            f"{b['size_mb']:,.0f} MiB on disk"
        )
    _grpo_table(parts.get("grpo", {}))
    _sampler_table(parts.get("sampler", {}))
    tis = {k: v for k, v in parts.get("tis", {}).items() if k.startswith("tis_cap=")}
    if tis:
        print("\n| TIS | logprob_mismatch | tis_weight | ratio min / max | update s |\n|---|---:|---:|---:|---:|")
        for k, r in tis.items():
            print(
                f"| {k} | {_f(r.get('logprob_mismatch'), 5)} | {_f(r.get('tis_weight'), 5)} | "
                f"{_f(r.get('ratio_min'), 4)} / {_f(r.get('ratio_max'), 4)} | {_f(r.get('time_update_s'))} |"
            )


def _grpo_table(g: dict) -> None:
    if not g.get("steps"):
        return
    print("\n| GRPO step | step s | generate s | update s | sampled tokens | update rows | logprob_mismatch |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in g["steps"]:
        print(
            f"| {r['step']} | {_f(r.get('time_step_s'))} | {_f(r.get('time_generate_s'))} | "
            f"{_f(r.get('time_update_s'))} | {_f(r.get('sampled_tokens'))} | {_f(r.get('update_records'))} | "
            f"{_f(r.get('logprob_mismatch'), 5)} |"
        )
    if "stopped_early" in g:
        print(f"# stopped early: {g['stopped_early']}")
    if "cuda_peak_allocated_mb" in g:
        print(
            f"# GRPO peak CUDA allocated / reserved MiB: {_f(g['cuda_peak_allocated_mb'], 0)} / "
            f"{_f(g['cuda_peak_reserved_mb'], 0)} (after loading: {_f(g.get('cuda_after_load_allocated_mb'), 0)})"
        )


def _sampler_table(s: dict) -> None:
    if "veriloop" not in s:
        return
    print(
        f"\n| engine ({s['rows']} rows, {s['max_new_tokens']} new tokens) | tokens | rows at limit | seconds | "
        "tokens/s |\n|---|---:|---:|---:|---:|"
    )
    for name in ("veriloop", "generate"):
        if name in s:
            r = s[name]
            label = f"veriloop sampler ({s['veriloop_engine']})" if name == "veriloop" else "transformers generate()"
            print(
                f"| {label} | {r['tokens']:,} | {r['rows_at_limit']} | {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} |"
            )
    if "speedup" in s:
        print(f"# speed-up (tokens/s): {s['speedup']:.2f}x")


# ---------------------------------------------------------------------- main


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny model and batch: a CPU test that every part runs")
    p.add_argument("--device", default="auto", help="auto (cuda when present) | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of " + ", ".join(PARTS))
    p.add_argument("--tokenizer-vocab", type=int, default=16384, help="the BPE's own tokens (before padding)")
    p.add_argument("--chunk-tokens", type=int, default=None, help="update.logprob_chunk_tokens (default: the recipe's)")
    for key in GPU_SIZES:  # defaults: the GPU's sizes, or the smoke's with --smoke
        p.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    result_args(p, "gpu_check")
    args = p.parse_args()
    if args.quick:
        args.smoke = True
        if args.tokenizer_vocab == p.get_default("tokenizer_vocab"):
            args.tokenizer_vocab = 1024
    for key, value in (QUICK_SIZES if args.quick else SMOKE_SIZES if args.smoke else GPU_SIZES).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; known: {', '.join(PARTS)}")
    if "build" not in args.parts.split(","):
        raise SystemExit("--parts must include build: every other part runs on the model it makes")
    if args.smoke and not args.quick and args.device == "auto":
        args.device = "cpu"
    return args


def main() -> None:
    args = parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    from veriloop.models.device import resolve_device

    args.device = str(resolve_device(args.device))  # auto -> cuda or cpu, recorded as such
    out = result_path(args, "gpu_check")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        check = Check(args, out, Path(tmp))
        timer = threading.Timer(max(1.0, args.hard_limit_s - check.elapsed()), check.abort)
        timer.daemon = True
        timer.start()
        for name in [n for n in PARTS if n in args.parts.split(",")]:
            check.part(name, getattr(check, name))
        timer.cancel()
        check.write()
    print_report(check.results)
    print(f"\n# results: {out}")


if __name__ == "__main__":
    main()
