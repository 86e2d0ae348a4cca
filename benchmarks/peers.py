"""veriloop against its peers on the contract workload: a GRPO step against TRL's GRPOTrainer, the sampler
against transformers' generate().

    .venv-bench/bin/python benchmarks/peers.py [--sizes 4.5M,20M,100M] [--rounds 3] [--steps 4]
        [--eos natural|suppressed] [--threads 2] [--json F] [--quick]

Runs in .venv-bench (TRL, accelerate and datasets beside veriloop, never in .venv): run from any Python, it builds
that environment when it is missing (``scripts/setup_bench_env.sh``, what ``make bench-env`` runs) and re-runs itself
there.  ``--quick`` (CI's smoke test) builds nothing: one round of 2 steps of 2 prompts x 2 completions of up to 8
tokens, one thread, with ``trl-ckpt-on``, ``veriloop`` and ``sampler`` (one worker of each kind); where TRL is not
installed it runs the veriloop side alone, and the result names the variants it skipped and why.

The contract workload (PERF.md): a random-init ``LlamaForCausalLM`` in float32, untied head, built here from seed 0
(no weights are downloaded), with a byte-level BPE tokenizer of 512 tokens trained on synthetic traces such as
``Q: 17*23=? A: 17*20=340;17*3=51;340+51=391. answer=391`` (``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, left padding, nothing
added when encoding).  Sizes (head_dim 64, as many KV heads as heads, vocabulary 512):

* ``4.5M``: hidden 256, 4 layers, 4 heads, intermediate 1024: 4,458,752 parameters (the contract model);
* ``20M``: hidden 512, 5 layers, 8 heads, intermediate 2048: 21,501,440 parameters;
* ``100M``: hidden 1024, 6 layers, 16 heads, intermediate 4096: 101,725,184 parameters.

Prompts ``Q: {a}*{b}=? A:`` with a, b two-digit and seeded.  A step: 8 prompts x 8 completions, at most 64 new tokens,
temperature 1.0, top-k 0, top-p 1.0; reward 1 iff the completion contains ``answer=<a*b>`` (a random model never earns
it: advantages are 0, and the forward, backward and AdamW step still run in full over all 64 rows); token-mean loss,
no KL (no reference model), clip 0.2, one pass per batch, AdamW lr 1e-6, grad norm clipped at 1.0.

* TRL: ``GRPOTrainer`` with ``per_device_train_batch_size=64, num_generations=8, gradient_accumulation_steps=1,
  max_completion_length=64, loss_type="dapo", scale_rewards="group", beta=0, epsilon=0.2, num_iterations=1,
  use_cpu=True, bf16=False``; gradient checkpointing as TRL's default (on), and off.  Step time: a TrainerCallback's
  on_step_begin to on_step_end (generation, reward, loss, backward and optimizer step are inside).
* veriloop: ``Trainer.train_step`` timed around the call, with the same settings through its options (``jsonl`` task,
  a verifier registered here that reads ``answer=<n>``, ``loss.aggregation token-mean``, ``kl.beta 0``,
  ``update.inner_updates 1``, ``update.skip_zero_advantage false`` so flat groups are computed as TRL computes them;
  micro-batches as veriloop's default cuts them: the rows whose estimated activations ``update.micro_batch_memory_mib``
  holds, one optimizer step either way).
  ``veriloop-ckpt`` is the same with ``update.gradient_checkpointing true`` (per-layer activation checkpointing,
  TRL's default), to compare memory like with like.  ``veriloop-mb16`` keeps the 64-row batch and one optimizer step
  but runs the forward and backward over micro-batches of 16 rows (``update.micro_batch_size 16``: the gradient is
  accumulated with token-mean weights, the same loss up to float summation order), so only a quarter of the
  activations is alive at once.  Departures that cost nothing measurable: veriloop's learning
  rate is constant (TRL's decays linearly), and its rows are drawn with replacement (TRL's sampler shuffles).
* Sampler: 8 prompts x 8 rows x 64 tokens through ``model.generate()`` and through ``veriloop.rollout.sampler.generate``
  (per-row streams, as the trainer samples); a warm-up call, then the median of ``--sampler-repeats`` calls; tokens
  counted up to and including EOS.

``--eos suppressed`` gives generate() and TRL ``min_new_tokens=64`` (every row exactly 64 tokens); veriloop gets
``sampling.min_new_tokens 64`` where the installed veriloop has that option, and otherwise runs with natural EOS
(said in the output).  Every measurement runs in a subprocess of its own (its peak RSS is its own), interleaved
over ``--rounds`` rounds with the order reversed every other round; steps 2..N are timed (step 1 warms up), and a
table cell is the median of all timed steps (or calls) over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import link, result_args, save, stamp_line  # noqa: E402

# name -> (architecture, hidden, layers, heads, KV heads, intermediate, vocabulary, tied embeddings); head_dim 64
SIZES = {
    "4.5M": ("llama", 256, 4, 4, 4, 1024, 512, False),
    "20M": ("llama", 512, 5, 8, 8, 2048, 512, False),
    "100M": ("llama", 1024, 6, 16, 16, 4096, 512, False),
    # the second workload: the contract's body with Qwen2.5's vocabulary and tied embeddings (logits over 151,936)
    "qwen-vocab": ("qwen2", 256, 4, 4, 2, 1024, 151_936, True),
}
VARIANTS = ("trl-ckpt-on", "trl-ckpt-off", "veriloop", "veriloop-ckpt", "veriloop-mb16", "generate", "sampler")
STEPPERS = VARIANTS[:5]  # the variants that run GRPO steps
SMALL_MICRO_BATCH = 16  # rows per forward/backward of veriloop-mb16
PROMPTS_PER_STEP, GROUP, NEW_TOKENS = 8, 8, 64
QUICK_WORKLOAD = (2, 2, 8)  # --quick: prompts per step, completions per prompt, new tokens
QUICK_VARIANTS = ("trl-ckpt-on", "veriloop", "sampler")  # a worker of each kind
PAD, BOS, EOS = 0, 1, 2
QWEN_END = "<|endoftext|>"  # the token transformers' Qwen2 tokenizer adds when a vocabulary lacks it
MARK = "@@peers-result "


# ---------------------------------------------------------------------------------------------- the workload


def use_quick_workload() -> None:
    """--quick's workload instead of the contract's (this process, and the workers it starts with --quick)."""
    global PROMPTS_PER_STEP, GROUP, NEW_TOKENS
    PROMPTS_PER_STEP, GROUP, NEW_TOKENS = QUICK_WORKLOAD


def reward(completion: str, reference: str) -> float:
    """1.0 iff the completion states ``answer=<reference>`` (not followed by another digit)."""
    return 1.0 if re.search(rf"answer={re.escape(reference)}(?!\d)", completion) else 0.0


def trace(a: int, b: int) -> str:
    tens, ones = a * (b // 10 * 10), a * (b % 10)
    return f"Q: {a}*{b}=? A: {a}*{b // 10 * 10}={tens};{a}*{b % 10}={ones};{tens}+{ones}={a * b}. answer={a * b}"


def problems(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]
    return [{"prompt": f"Q: {a}*{b}=? A:", "reference": str(a * b)} for a, b in pairs]


def extend_vocabulary(tokenizer, size: int):
    """The same tokenizer with ``size`` tokens: the trained BPE's vocabulary padded with three-character strings of
    the byte-level alphabet that no merge produces, so every text encodes to the same ids as before and every id
    decodes to bytes (a random model samples them); the last id is Qwen's ``<|endoftext|>``, which transformers'
    Qwen2 tokenizer (what ``AutoTokenizer`` gives for a qwen2 model) adds when it is missing.  Made here, nothing
    downloaded."""
    import itertools

    from tokenizers import Tokenizer, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    for chars in itertools.product(sorted(pre_tokenizers.ByteLevel.alphabet()), repeat=3):
        if len(vocab) >= size - 1:
            break
        vocab.setdefault("".join(chars), len(vocab))
    vocab[QWEN_END] = len(vocab)
    spec["added_tokens"].append(
        {"id": vocab[QWEN_END], "content": QWEN_END, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="left",
        model_max_length=512,
    )


def build_tokenizer(seed: int = 0, size: int = 512):
    """Byte-level BPE (GPT-2's split: a number, with the space before it, is one pre-token), 512 tokens; with a
    larger ``size``, extended to it (``extend_vocabulary``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    texts = [trace(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(4000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<pad>", "<bos>", "<eos>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="left",
        model_max_length=512,
    )
    if len(out) != 512 or (out.pad_token_id, out.bos_token_id, out.eos_token_id) != (PAD, BOS, EOS):
        raise SystemExit(
            f"tokenizer: {len(out)} tokens, pad/bos/eos {out.pad_token_id}/{out.bos_token_id}/"
            f"{out.eos_token_id}; the contract wants 512 and 0/1/2"
        )
    if size > len(out):
        extended = extend_vocabulary(out, size)
        sample = trace(12, 34)
        if len(extended) != size or extended(sample).input_ids != out(sample).input_ids:
            raise SystemExit(f"tokenizer: extending to {size} tokens gave {len(extended)} or changed the encoding")
        out = extended
    return out


def build_model(size: str, directory: Path, seed: int = 0) -> dict:
    """Save the ``size`` model and the tokenizer into ``directory``; returns its description."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    from veriloop.models.loading import save_policy
    from veriloop.models.random_init import config_for

    hf_logging.disable_progress_bar()
    arch, hidden, layers, heads, kv_heads, inter, vocab, tied = SIZES[size]
    tokenizer = build_tokenizer(seed, vocab)
    config = config_for(
        arch,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        intermediate_size=inter,
        max_positions=512,
        vocab_size=len(tokenizer),
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=tied,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    save_policy(model, tokenizer, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)  # what both sides load (a qwen2 model gets Qwen's class)
    if len(tokenizer) != vocab or (tokenizer.pad_token_id, tokenizer.eos_token_id) != (PAD, EOS):
        raise SystemExit(f"{directory}: the saved tokenizer loads with {len(tokenizer)} tokens (the model has {vocab})")
    lengths = [len(tokenizer(p["prompt"]).input_ids) for p in problems(256, seed)]
    return {
        "size": size,
        "architecture": arch,
        "vocab": vocab,
        "kv_heads": kv_heads,
        "tied": tied,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "intermediate": inter,
        "params": sum(p.numel() for p in model.parameters()),
        "prompt_tokens_mean": statistics.mean(lengths),
        "dir": str(directory),
    }


# ---------------------------------------------------------------------------------------------- workers


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _tokens_to_eos(rows: list[list[int]]) -> int:
    return sum(row.index(EOS) + 1 if EOS in row else len(row) for row in rows)


def trl_worker(a) -> dict:
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(a.threads)
    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines()]
    dataset = datasets.Dataset.from_list([{"prompt": r["prompt"], "answer": r["reference"]} for r in rows])

    def contains_answer(prompts, completions, answer, **_):
        return [reward(c, ref) for c, ref in zip(completions, answer, strict=True)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.begin, self.steps, self.ends, self.threads = 0.0, [], [], 0

        def on_step_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.steps.append(now - self.begin)
            self.ends.append(now)
            self.threads = torch.get_num_threads()

    options = dict(
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP,
        gradient_accumulation_steps=1,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        loss_type="dapo",
        scale_rewards="group",
        beta=0.0,
        epsilon=0.2,
        num_iterations=1,
        learning_rate=1e-6,
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        use_cpu=True,
        bf16=False,
        fp16=False,
        use_vllm=False,
        max_steps=a.steps,
        seed=a.seed,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if a.variant == "trl-ckpt-off":
        options["gradient_checkpointing"] = False  # on: TRL's default, left as it is
    if a.eos == "suppressed":
        options["generation_kwargs"] = {"min_new_tokens": NEW_TOKENS}
    timer, generated = StepTimer(), []
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(output_dir=tmp, **options)
        model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(a.model_dir)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=contains_answer,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        generate = trainer.model.generate

        def timed_generate(*args, **kw):  # what generation costs inside a step, and how many tokens it wrote
            started = time.perf_counter()
            out = generate(*args, **kw)
            width = (kw.get("input_ids") if "input_ids" in kw else args[0]).shape[1]
            ids = getattr(out, "sequences", out)  # a tensor, or an output object that holds it
            generated.append((time.perf_counter() - started, _tokens_to_eos(ids[:, width:].tolist())))
            return out

        trainer.model.generate = timed_generate
        trainer.train()
    if len(timer.steps) != a.steps:
        raise RuntimeError(f"the callback saw {len(timer.steps)} steps, expected {a.steps}")
    return {
        "step_s": timer.steps[1:],
        "interval_s": [e - b for b, e in zip(timer.ends, timer.ends[1:])],
        "generate_s": [g for g, _ in generated[1:]],
        "tokens": [t for _, t in generated[1:]],
        "gradient_checkpointing": bool(config.gradient_checkpointing),
        "threads": timer.threads,
        "peak_rss_mib": _peak_rss_mib(),
        "eos": a.eos,
    }


def register_verifier() -> str:
    from veriloop.verifiers.base import Verifier, register

    @register("peers-answer")
    class ContainsAnswer(Verifier):
        """1 iff the completion contains ``answer=<reference>`` (the contract's reward, as TRL's side computes it)."""

        name, version = "peers-answer", "1"

        def verify(self, completion: str, reference: str):
            score = reward(completion, reference)
            return self._verdict(score, {"outcome": score}, "" if score else f"no answer={reference}")

    return "peers-answer"


def veriloop_options(a, run_dir: str) -> tuple[dict, bool]:
    """The contract as veriloop options (and whether this veriloop has ``sampling.min_new_tokens``)."""
    from veriloop.config import iter_fields
    from veriloop.training.config import TrainConfig

    verifier = register_verifier()
    options = {
        "policy": a.model_dir,
        "run_dir": run_dir,
        "seed": a.seed,
        "steps": a.steps,
        "threads": a.threads,
        "device": "cpu",
        "task.name": "jsonl",
        "task.data": a.data,
        "task.verifier": verifier,
        "task.chat_template": "none",
        "verifier": verifier,
        "rollout.prompts_per_step": PROMPTS_PER_STEP,
        "rollout.group_size": GROUP,
        "sampling.temperature": 1.0,
        "sampling.top_k": 0,
        "sampling.top_p": 1.0,
        "sampling.max_new_tokens": NEW_TOKENS,
        "advantage.std": "sample",
        "advantage.eps": 1e-4,
        "loss.aggregation": "token-mean",
        "loss.clip_eps_low": 0.2,
        "loss.clip_eps_high": 0.2,
        "kl.beta": 0,
        "update.inner_updates": 1,
        "update.mini_batches": 1,
        "update.skip_zero_advantage": "false",
        "optim.lr": 1e-6,
        "optim.grad_clip": 1.0,
        # as TRL's default (mask_truncated_completions=False): a row cut at 64 tokens is learned from, so
        # both sides update on the same 64 x 64 tokens
        "update.mask_truncated": "false",
        "save_rollouts": "false",
        "checkpoint_every": 10**6,
        "eval_every": 0,
    }
    has_min = "sampling.min_new_tokens" in {key for key, *_ in iter_fields(TrainConfig)}
    if a.eos == "suppressed" and has_min:
        options["sampling.min_new_tokens"] = NEW_TOKENS
    if getattr(a, "variant", "") == "veriloop-ckpt":  # as TRL's default: per-layer activation checkpointing
        options["update.gradient_checkpointing"] = "true"
    if getattr(a, "variant", "") == "veriloop-mb16":  # the same step, a quarter of the activations at a time
        options["update.micro_batch_size"] = SMALL_MICRO_BATCH
    return options, has_min


def veriloop_worker(a) -> dict:
    from veriloop.config import build_config
    from veriloop.training.config import TrainConfig
    from veriloop.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        options, has_min = veriloop_options(a, f"{tmp}/run")
        trainer = Trainer(build_config(TrainConfig, {}, options), progress=False)
        steps, rows = [], []
        try:
            for step in range(1, a.steps + 1):
                started = time.perf_counter()
                rows.append(trainer.train_step(step))
                steps.append(time.perf_counter() - started)
        finally:
            trainer.close()
    import torch

    rows = rows[1:]
    return {
        "step_s": steps[1:],
        "generate_s": [r["time_generate_s"] for r in rows],
        "verify_s": [r["time_verify_s"] for r in rows],
        "update_s": [r["time_update_s"] for r in rows],
        "tokens": [r.get("tokens", 0) for r in rows],
        "update_records": [r["update_records"] for r in rows],
        "threads": torch.get_num_threads(),
        "peak_rss_mib": _peak_rss_mib(),
        "eos": a.eos if (has_min or a.eos == "natural") else "natural (no sampling.min_new_tokens)",
    }


def _sampler_prompts(a, tokenizer) -> list[list[int]]:
    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines()][:PROMPTS_PER_STEP]
    return [tokenizer(r["prompt"]).input_ids for r in rows]


def sampler_worker(a) -> dict:
    """Tokens per second of generate() (``variant generate``) or of veriloop's sampler (``variant sampler``)."""
    import dataclasses

    import torch

    from veriloop.models.loading import load_policy
    from veriloop.rollout.sampler import SamplingParams, generate
    from veriloop.seeding import derive_seed

    torch.set_num_threads(a.threads)
    policy = load_policy(a.model_dir)
    prompts, eos = _sampler_prompts(a, policy.tokenizer), a.eos
    extra = {}
    if a.eos == "suppressed" and a.variant == "sampler":
        if "min_new_tokens" in {f.name for f in dataclasses.fields(SamplingParams)}:
            extra["min_new_tokens"] = NEW_TOKENS
        else:
            eos = "natural (no SamplingParams.min_new_tokens)"
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS, **extra)

    def ours(seed: int) -> int:
        row_seeds = [derive_seed(seed, "peers", i) for i in range(len(prompts) * GROUP)]
        out = generate(policy.model, prompts, params, eos_id=policy.end_ids, pad_id=PAD, row_seeds=row_seeds, n=GROUP)
        return out.num_tokens

    def hf(seed: int) -> int:
        torch.manual_seed(seed)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts]).repeat_interleave(GROUP, 0)
        lengths = torch.tensor([len(p) for p in prompts]).repeat_interleave(GROUP)
        mask = (torch.arange(width)[None, :] >= (width - lengths)[:, None]).long()
        minimum = {"min_new_tokens": NEW_TOKENS} if a.eos == "suppressed" else {}
        with torch.no_grad():
            out = policy.model.generate(
                ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=NEW_TOKENS,
                eos_token_id=EOS,
                pad_token_id=PAD,
                **minimum,
            )
        return _tokens_to_eos(out[:, width:].tolist())

    fn = ours if a.variant == "sampler" else hf
    fn(0)  # warm-up
    rates, tokens = [], []
    for rep in range(a.sampler_repeats):
        started = time.perf_counter()
        n = fn(rep + 1)
        rates.append(n / (time.perf_counter() - started))
        tokens.append(n)
    return {
        "tokens_per_s": rates,
        "tokens": tokens,
        "threads": torch.get_num_threads(),
        "peak_rss_mib": _peak_rss_mib(),
        "eos": eos,
    }


# ---------------------------------------------------------------------------------------------- the driver


def spawn(a, variant: str, model: dict, data: str) -> dict:
    argv = [
        sys.executable,
        __file__,
        "--worker",
        variant,
        "--model-dir",
        model["dir"],
        "--data",
        data,
        "--steps",
        str(a.steps),
        "--eos",
        a.eos,
        "--threads",
        str(a.threads),
        "--seed",
        str(a.seed),
        "--sampler-repeats",
        str(a.sampler_repeats),
    ] + (["--quick"] if a.quick else [])
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(a.threads),
        "MKL_NUM_THREADS": str(a.threads),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_DISABLED": "true",
    }
    what = f"{model['size']} {variant}"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=a.timeout, env=env)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        raise SystemExit(f"{what}: no result within --timeout {a.timeout} s; its stderr ends:\n{err[-4000:]}") from None
    results = [line[len(MARK) :] for line in out.stdout.splitlines() if line.startswith(MARK)]
    if out.returncode != 0 or not results:
        raise SystemExit(f"{what} failed (exit {out.returncode}); its stderr ends:\n{out.stderr[-4000:]}")
    return json.loads(results[-1])


def machine() -> dict:
    import importlib.metadata as md

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )

    def version(package: str) -> str:
        try:
            return md.version(package)
        except md.PackageNotFoundError:
            return "not installed"

    versions = {p: version(p) for p in ("torch", "transformers", "trl", "accelerate", "datasets", "veriloop")}
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "nproc": os.cpu_count(), "cpu": cpu, **versions}


def med(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def f(x, fmt: str = ".2f") -> str:
    return "" if x is None else format(x, fmt)


def summarise(runs: list[dict], size: str, variant: str) -> dict:
    """Medians over the rounds (every value None for a variant that did not run)."""
    mine = [r["result"] for r in runs if r["size"] == size and r["variant"] == variant]
    pool = lambda key: [v for r in mine for v in r.get(key, [])]  # noqa: E731
    return {
        "step_s": med(pool("step_s")),
        "generate_s": med(pool("generate_s")),
        "update_s": med(pool("update_s")),
        "tokens": med(pool("tokens")),
        "tokens_per_s": med(pool("tokens_per_s")),
        "round_step_s": [med(r.get("step_s", [])) for r in mine],
        "peak_rss_mib": max((r["peak_rss_mib"] for r in mine), default=None),
        "eos": sorted({r["eos"] for r in mine}),
        "threads": sorted({r["threads"] for r in mine}),
    }


def table_lines(a: dict, info: dict, models: dict, summary: dict) -> list[str]:
    """The tables of one run (``a``: its arguments), as markdown lines."""
    out: list[str] = []
    add = out.append
    add(
        f"# {info['date']}; {info['nproc']} CPUs ({info['cpu']}); torch {info['torch']}, transformers "
        f"{info['transformers']}, trl {info['trl']}, accelerate {info['accelerate']}, datasets {info['datasets']}; "
        f"{a['threads']} threads; EOS {a['eos']}; {a['rounds']} rounds x steps 2..{a['steps']} (sampler: "
        f"{a['sampler_repeats']} calls) per variant"
    )
    add(
        "\n| model | TRL ckpt on s/step | TRL ckpt off s/step | veriloop s/step | veriloop ckpt s/step "
        "| veriloop mb16 s/step | TRL on / veriloop | TRL off / veriloop | TRL on / veriloop ckpt "
        "| TRL on / veriloop mb16 | RSS MiB TRL on | RSS MiB TRL off | RSS MiB veriloop | RSS MiB veriloop ckpt "
        "| RSS MiB veriloop mb16 | RSS veriloop mb16 / TRL on |\n|---|" + "---:|" * 15
    )
    for size, m in models.items():
        on, off, ours, ck, mb = (summary[size][v] for v in STEPPERS)
        ratio = lambda x, y=ours: f(x["step_s"] / y["step_s"]) + "x" if x["step_s"] and y["step_s"] else ""  # noqa: E731
        rss = " | ".join(f(x["peak_rss_mib"], ".0f") for x in (on, off, ours, ck, mb))
        both = on["peak_rss_mib"] and mb["peak_rss_mib"]
        share = f(mb["peak_rss_mib"] / on["peak_rss_mib"] * 100, ".0f") + "%" if both else ""
        add(
            f"| {size} ({m['params']:,}) | {f(on['step_s'])} | {f(off['step_s'])} | {f(ours['step_s'])} "
            f"| {f(ck['step_s'])} | {f(mb['step_s'])} | {ratio(on)} | {ratio(off)} | {ratio(on, ck)} "
            f"| {ratio(on, mb)} | {rss} | {share} |"
        )
    add(
        "\n| model | step part | TRL ckpt on | TRL ckpt off | veriloop | veriloop ckpt | veriloop mb16 |\n|---|---|"
        + "---:|" * 5
    )
    for size in models:
        xs = [summary[size][v] for v in STEPPERS]
        add(f"| {size} | generate s | {' | '.join(f(x['generate_s']) for x in xs)} |")
        rest = [f(x["step_s"] - x["generate_s"]) if x["step_s"] and x["generate_s"] else "" for x in xs]
        add(f"| {size} | step - generate s (medians) | {' | '.join(rest)} |")
        add(f"| {size} | tokens generated | {' | '.join(f(x['tokens'], '.0f') for x in xs)} |")
    add(
        "\n| model | generate() tokens/s | veriloop sampler tokens/s | sampler / generate() | tokens per call "
        "(generate / sampler) | RSS MiB generate() | RSS MiB sampler |\n|---|" + "---:|" * 6
    )
    for size in models:
        hf, ours = summary[size]["generate"], summary[size]["sampler"]
        both = hf["tokens_per_s"] and ours["tokens_per_s"]
        ratio = f(ours["tokens_per_s"] / hf["tokens_per_s"]) + "x" if both else ""
        add(
            f"| {size} | {f(hf['tokens_per_s'], ',.0f')} | {f(ours['tokens_per_s'], ',.0f')} | {ratio} "
            f"| {f(hf['tokens'], '.0f')} / {f(ours['tokens'], '.0f')} | {f(hf['peak_rss_mib'], '.0f')} "
            f"| {f(ours['peak_rss_mib'], '.0f')} |"
        )
    for size in models:
        for variant, s in summary[size].items():
            if any(e != a["eos"] for e in s["eos"]):
                add(f"note: {size} {variant} ran with EOS {', '.join(s['eos'])}, not {a['eos']}")
            if any(t != a["threads"] for t in s["threads"]):
                add(f"note: {size} {variant} ran with {s['threads']} torch threads, not {a['threads']}")
    return out


PAGE = "peers"


def render(results: list[dict]) -> str:
    """Each committed run's tables, the stamp under them."""
    lines = [
        "# Against the peers: TRL's GRPOTrainer and transformers' generate()",
        "",
        "`benchmarks/peers.py` runs the peer-baseline contract side by side with TRL 1.16's `GRPOTrainer` and "
        "transformers' `generate()`, each side in a process of its own, in interleaved rounds (the order reversed "
        "every other round); a cell is the median of every timed step (steps 2..N) over the rounds, peak RSS the "
        "largest over them. Two workloads: the contract's random Llama with a 512-token vocabulary (`4.5M`), and "
        "the same body with Qwen2.5's vocabulary of 151,936 tokens, tied embeddings and 2 KV heads (`qwen-vocab`), "
        "where the logits dominate. The benchmark's docstring spells out both sides' settings; the "
        "[benchmarks guide](../guides/benchmarks.md#against-the-peers) reads the numbers.",
    ]
    for r in results:
        sizes = ", ".join(r["models"])
        lines += ["", f"## {sizes}", ""]
        body = table_lines(r["args"], r["machine"], r["models"], r["summary"])
        lines += [line if not line.startswith("# ") else line[2:] for line in body]
        lines += ["", stamp_line(r)]
    return "\n".join(lines) + "\n"


def _summary_block(results: list[dict], where: str) -> str:
    """One row per workload of the committed runs: the goals' three ratios (step time, peak RSS, sampler)."""
    lines = [
        "| workload | TRL s/step (ckpt on / off) | veriloop s/step | TRL on / veriloop | peak RSS MiB: TRL on "
        "/ veriloop / veriloop mb16 | veriloop / TRL on | veriloop mb16 / TRL on | sampler / `generate()` |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for size, m in r["models"].items():
            x = r["summary"][size]
            on, off, ours, mb = x["trl-ckpt-on"], x["trl-ckpt-off"], x["veriloop"], x["veriloop-mb16"]
            hf, sampler = x["generate"], x["sampler"]

            def ratio(a, b, pct=False):
                if not a or not b:
                    return ""
                return f"{a / b * 100:.0f}%" if pct else f"{a / b:.2f}x"

            rss = lambda s: f(s["peak_rss_mib"], ",.0f")  # noqa: E731
            cells = [
                f"{size} ({m['params'] / 1e6:.1f}M parameters, vocabulary {m.get('vocab', 512):,})",
                f"{f(on['step_s'])} / {f(off['step_s'])}",
                f(ours["step_s"]),
                ratio(on["step_s"], ours["step_s"]),
                f"{rss(on)} / {rss(ours)} / {rss(mb)}",
                ratio(ours["peak_rss_mib"], on["peak_rss_mib"], True),
                ratio(mb["peak_rss_mib"], on["peak_rss_mib"], True),
                ratio(sampler["tokens_per_s"], hf["tokens_per_s"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    page = link("docs/results/peers.md", where)
    return "\n".join(lines) + f"\n\nFrom the runs on the [results page]({page}) (commands and stamps there).\n"


blocks = {"peers-summary": _summary_block}


def use_bench_env() -> None:
    """Run in .venv-bench (TRL beside veriloop): here if TRL imports, else re-run this command with its Python,
    building the environment first (``make bench-env``'s script) when it is missing or half-built."""
    import importlib.util

    if importlib.util.find_spec("trl") is not None:
        return
    root = Path(__file__).resolve().parent.parent
    venv = Path(os.environ.get("BENCH_VENV", root / ".venv-bench"))
    python = venv / "bin" / "python"
    if Path(sys.executable).absolute() == python.absolute():
        raise SystemExit(f"{venv} has no TRL: remove it and run `make bench-env`")
    if not (venv / ".installed").exists():
        print(f"peers: building {venv} (requirements/bench.txt: a few minutes, once)", file=sys.stderr)
        env = {**os.environ, "BENCH_VENV": str(venv), "PYTHON": os.environ.get("PYTHON", "python3")}
        subprocess.run(["bash", str(root / "scripts" / "setup_bench_env.sh")], check=True, cwd=root, env=env)
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4.5M", help=f"comma-separated: {', '.join(SIZES)}")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the order reversed every other one)")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per run; step 1 warms up and is not timed")
    p.add_argument("--eos", choices=["natural", "suppressed"], default="natural")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads of every worker")
    p.add_argument("--sampler-repeats", type=int, default=3, help="timed sampler calls per worker (after a warm-up)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=1800, help="seconds one worker may run")
    result_args(p, "peers")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.quick:
        use_quick_workload()
        if not a.worker:
            a.sizes, a.rounds, a.steps, a.threads, a.sampler_repeats = "4.5M", 1, 2, 1, 1
    if a.steps < 2 or a.rounds < 1 or a.sampler_repeats < 1:
        p.error("--steps must be >= 2 (step 1 is a warm-up), --rounds and --sampler-repeats >= 1")
    return a


def main() -> None:
    a = parse_args()
    if a.worker:
        a.variant = a.worker
        workers = {
            "veriloop": veriloop_worker,
            "veriloop-ckpt": veriloop_worker,
            "veriloop-mb16": veriloop_worker,
            "generate": sampler_worker,
            "sampler": sampler_worker,
        }
        work = workers.get(a.worker, trl_worker)
        print(MARK + json.dumps(work(a)), flush=True)
        return
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    if not sizes or any(s not in SIZES for s in sizes):
        raise SystemExit(f"--sizes: comma-separated names among {', '.join(SIZES)}, got {a.sizes!r}")
    import importlib.util

    variants, skipped = VARIANTS, {}
    if a.quick:  # builds no environment: without TRL, its sides are skipped and said so
        variants, skipped = QUICK_VARIANTS, {v: "not in --quick" for v in VARIANTS if v not in QUICK_VARIANTS}
        if importlib.util.find_spec("trl") is None:
            trl = {
                v: f"TRL is not installed in {sys.prefix} (`make bench-env` makes .venv-bench)"
                for v in variants
                if v.startswith("trl")
            }
            variants, skipped = tuple(v for v in variants if v not in trl), {**trl, **skipped}
            print(f"peers --quick: skipped {', '.join(trl)}: TRL is not installed here", file=sys.stderr)
    else:
        use_bench_env()
    started, info = time.time(), machine()
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        data = Path(tmp) / "problems.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in problems(1024, a.seed)))
        models = {s: build_model(s, Path(tmp) / s, a.seed) for s in sizes}
        for m in models.values():
            print(
                f"model {m['size']}: {m['params']:,} parameters, prompts {m['prompt_tokens_mean']:.2f} tokens on "
                "average",
                file=sys.stderr,
            )
        runs = []
        for rnd in range(a.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for size in sizes:
                for variant in order:
                    t0 = time.time()
                    result = spawn(a, variant, models[size], str(data))
                    runs.append({"round": rnd + 1, "size": size, "variant": variant, "result": result})
                    shown = (
                        f"{med(result['step_s']):.2f} s/step"
                        if "step_s" in result
                        else f"{med(result['tokens_per_s']):,.0f} tokens/s"
                    )
                    print(
                        f"[round {rnd + 1}/{a.rounds}] {size} {variant}: {shown}, "
                        f"{result['peak_rss_mib']:.0f} MiB ({time.time() - t0:.0f} s)",
                        file=sys.stderr,
                    )
    summary = {s: {v: summarise(runs, s, v) for v in VARIANTS} for s in sizes}
    print("\n".join(table_lines(vars(a), info, models, summary)))
    wall = time.time() - started
    print(f"\nwall time {wall / 60:.1f} min")
    for m in models.values():
        m.pop("dir")
    workload = {"prompts_per_step": PROMPTS_PER_STEP, "group": GROUP, "new_tokens": NEW_TOKENS}
    save(
        a,
        "peers",
        {
            "machine": info,
            "args": {k: v for k, v in vars(a).items() if k not in ("worker", "model_dir", "data", "variant")},
            "workload": workload,
            "variants": list(variants),
            "skipped": skipped,
            "models": models,
            "summary": summary,
            "runs": runs,
            "wall_s": wall,
        },
    )


if __name__ == "__main__":
    main()
