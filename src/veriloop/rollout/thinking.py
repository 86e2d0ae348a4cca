"""Thinking budgets (seed 002: the budget is a variable to control and evaluate) and budget forcing.

``sampling.max_thinking_tokens`` caps the reasoning part of a completion.  A completion that reaches the cap
without having ended its thinking gets the end-of-thinking marker appended (``sampling.thinking_end``; the task
names one: ``;answer=`` for the built-in task, ``\\n####`` for GSM8K, ``</think>`` for a reasoning model), and
sampling goes on from there, so the model must answer (budget forcing, as in s1).  Thinking has ended when the
marker's text without its leading separators (``answer=``, ``####``, ``</think>``) is in the completion.  Where
the completion already ends with the marker's start (``2+3=5;`` before ``;answer=``) only the rest is appended.

The forced tokens are not the model's: the record's ``model_mask`` is 0 on them and their behaviour log-prob a
placeholder 0.0, so no loss reads them (as for a tool's output).  ``sampling.max_new_tokens`` still bounds the
whole completion, the marker included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from veriloop.errors import InputError
from veriloop.rollout.sampler import Generation
from veriloop.seeding import derive_seed

SEPARATORS = " ;\n\t"
THINKING_UNSUPPORTED = (
    "the vllm engine does not force the end of thinking (sampling.max_thinking_tokens): use "
    "rollout.engine local, or ray with ray.worker_engine local"
)


@dataclass
class ForcedGeneration(Generation):
    model_masks: list[list[int]] = field(default_factory=list)  # 0 on the forced marker's tokens
    forced_at: list[int | None] = field(default_factory=list)  # where the marker was forced (None: not forced)


def with_thinking_end(params, task):
    """``params`` with the task's end-of-thinking marker where budget forcing is on and none is set."""
    if not params.max_thinking_tokens or params.thinking_end:
        return params
    marker = getattr(task, "thinking_end", "")
    if not marker:
        raise InputError(
            f"sampling.max_thinking_tokens: task {task.name!r} (reasoning "
            f"{getattr(task, 'reasoning', 'cot')!r}) names no end-of-thinking marker; set "
            "sampling.thinking_end (e.g. '</think>')"
        )
    return replace(params, thinking_end=marker)


def thinking_ended(text: str, marker: str) -> bool:
    return marker.lstrip(SEPARATORS) in text


def marker_rest(text: str, marker: str) -> str:
    """The part of ``marker`` to append after ``text``: all of it, less the longest start of it ``text`` ends with."""
    for k in range(len(marker), 0, -1):
        if text.endswith(marker[:k]):
            return marker[k:]
    return marker


def generate_with_thinking_budget(
    policy, prompt_ids: list[list[int]], params, *, row_seeds: list[int], n: int
) -> ForcedGeneration:
    """``n`` completions per prompt under ``params.max_thinking_tokens`` (see the module docstring).  Round 0 draws
    from ``row_seeds`` as ``policy.sample`` does; a row continued after the cap draws from
    ``derive_seed(row_seeds[i], "thinking", 1)``."""
    budget, marker, limit = params.max_thinking_tokens, params.thinking_end, params.max_new_tokens
    if budget <= 0 or not marker:
        raise ValueError("generate_with_thinking_budget needs sampling.max_thinking_tokens > 0 and thinking_end")
    tok = policy.tokenizer
    plain = replace(params, max_thinking_tokens=0)  # each call below is plain sampling; this loop does the forcing
    first = policy.sample(prompt_ids, replace(plain, max_new_tokens=min(budget, limit)), row_seeds=list(row_seeds), n=n)
    ids = [list(c) for c in first.completion_ids]
    lps = [list(lp) for lp in first.logprobs]
    masks = [[1] * len(c) for c in ids]
    finish, forced_at = list(first.finish_reasons), [None] * len(ids)
    go_on = []
    for i, why in enumerate(finish):
        if why != "length" or len(ids[i]) >= limit:
            continue
        text = tok.decode(ids[i], skip_special_tokens=False)
        if not thinking_ended(text, marker):  # the cap, mid-thought: force the end of thinking
            rest = tok(marker_rest(text, marker), add_special_tokens=False).input_ids[: limit - len(ids[i])]
            forced_at[i] = len(ids[i])
            ids[i] += rest
            lps[i] += [0.0] * len(rest)  # not sampled: no behaviour log-prob (the mask says so)
            masks[i] += [0] * len(rest)
        if len(ids[i]) < limit:
            go_on.append(i)
    if go_on:
        prompts = [p for p in prompt_ids for _ in range(n)]
        more = policy.sample(
            [prompts[i] + ids[i] for i in go_on],
            replace(plain, max_new_tokens=max(limit - len(ids[i]) for i in go_on)),
            n=1,
            row_seeds=[derive_seed(row_seeds[i], "thinking", 1) for i in go_on],
        )
        for k, i in enumerate(go_on):
            room = limit - len(ids[i])
            new, new_lp, why = more.completion_ids[k], more.logprobs[k], more.finish_reasons[k]
            if len(new) > room:
                new, new_lp, why = new[:room], new_lp[:room], "length"
            ids[i] += new
            lps[i] += new_lp
            masks[i] += [1] * len(new)
            finish[i] = why
    return ForcedGeneration(ids, lps, finish, masks, forced_at)
