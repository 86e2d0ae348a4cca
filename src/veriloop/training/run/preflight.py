"""Checks of the task against the verifier and the policy, before the run directory exists.

A reward verifier that cannot read the task's references (the ``arithmetic`` verifier on GSM8K's
``#### 72``) would die inside the first step, or worse score every completion 0; a policy whose
context is shorter than the task's prompts (the built-in base has 256 positions; GSM8K prompts
are longer) would train on truncated prompts after a warning from transformers.  Both are input
errors, said before any step with what to pass instead.
"""

from __future__ import annotations

import dataclasses
import random

from veriloop.errors import InputError
from veriloop.models.memory import budget_micro_batch_size
from veriloop.verifiers.base import VerifierError

# How many training problems the checks read: enough to meet a task's long prompts, cheap for any task.
SAMPLE_PROBLEMS = 64
# The shipped recipe for a Hugging Face model on GSM8K (what a context error points to).
HF_RECIPE = "configs/gsm8k-qwen2.5-0.5b-instruct.yaml"


def sample_problems(task, seed: int, n: int = SAMPLE_PROBLEMS) -> list:
    """Where the training set is a list: its ``n`` longest prompts (by characters, so the longest in tokens
    is met without tokenizing every row); else ``n`` draws."""
    rows = getattr(task, "train", None)
    if isinstance(rows, list) and rows:
        return sorted(rows, key=lambda p: len(p.prompt), reverse=True)[:n]
    return task.train_batch(n, random.Random(seed))


def check_verifier_reads_references(verifier, verifier_name: str, task, own: str, problems: list) -> None:
    """Grade an empty completion against each distinct reference: a verifier raises ``VerifierError`` on a
    reference it cannot read (an error, never a reward)."""
    distinct = list({(p.data_source, p.reference): p for p in problems}.values())[:8]
    references = [p.reference for p in distinct]
    try:
        extra = {}
        if getattr(verifier, "reads_prompts", False):  # a reward model scores r(prompt, completion)
            extra["prompts"] = [p.prompt for p in distinct]
        if getattr(verifier, "reads_data_sources", False):  # mixed rewards: each kind's own verifier
            extra["data_sources"] = [p.data_source for p in distinct]
        verifier.verify_batch([""] * len(references), references, **extra)
    except VerifierError as e:
        hint = f"; leave --verifier out to use the task's own ({own})" if own and own != verifier_name else ""
        why = str(e)
        for ref in references:  # a reference quoted whole (GSM8K's are solutions) is cut to its start
            for quoted in (repr(ref)[1:-1], ref):
                if len(quoted) > 48:
                    why = why.replace(quoted, quoted[:40] + "...")
        raise InputError(
            f"verifier {verifier_name!r} cannot read the references of task {task.name!r} ({why}){hint}"
        ) from None


def context_of(model) -> int | None:
    """The longest sequence the model takes (``max_position_embeddings``), or None when it names none."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def check_context_fits(policy, policy_name: str, task, problems: list, max_new_tokens: int) -> None:
    """Every sampled prompt plus ``max_new_tokens`` must fit the policy's context."""
    context = context_of(policy.model)
    if context is None:
        return
    lengths = [len(policy.encode_prompt(p.prompt)) for p in problems]
    over = [n for n in lengths if n + max_new_tokens > context]
    if over:
        raise InputError(
            f"policy {policy_name!r} has a context of {context} tokens, but prompts of task {task.name!r} need "
            f"more ({len(over)} of the {len(lengths)} longest checked): up to {max(lengths)} prompt tokens + "
            f"sampling.max_new_tokens {max_new_tokens}; give a model with a longer context with --policy DIR "
            f"(a local Hugging Face causal LM; {HF_RECIPE} is the shipped recipe for GSM8K), "
            "or shorten sampling.max_new_tokens"
        )


def resolve_micro_batch_size(cfg, policy, problems: list):
    """``cfg`` with ``update.micro_batch_size`` set: as given, or where it is 0 (the default) the rows of the task's
    longest sampled prompt plus ``sampling.max_new_tokens`` whose activations ``update.micro_batch_memory_mib``
    holds for this model (``models/memory.py``).  The run directory's config records the number it ran with."""
    if cfg.update.micro_batch_size > 0:
        return cfg
    longest = max((len(policy.encode_prompt(p.prompt)) for p in problems), default=1)
    rows = budget_micro_batch_size(cfg.update, policy, cfg.dtype, longest, cfg.sampling.max_new_tokens)
    return dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, micro_batch_size=rows))
