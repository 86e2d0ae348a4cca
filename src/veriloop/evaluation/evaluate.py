"""Held-out evaluation: greedy and sampled accuracy, pass@k, format, process, wrong steps.

Definitions (all fractions of held-out problems unless said otherwise):

* ``greedy_accuracy``: the greedy completion passes the outcome verifier.
* ``sampled_accuracy``: mean outcome over ``n_samples`` samples per problem.
* ``pass@k``: unbiased estimator from the ``n_samples`` samples (k <= n_samples).
* ``maj@k``: the expected accuracy of a majority vote over k of those samples (``maj_at_k``: every
  subset of k equally likely, ties split, no answer no vote), answers grouped by ``answer_key``.
* ``format_rate`` / ``process_rate``: the greedy completion passes the format / process
  verifier (None where the task has none: GSM8K, jsonl, programs).
* ``wrong_steps_rate``: *right answer, wrong steps*: the greedy completion passes the
  outcome verifier and fails the process verifier.
* ``by_tag``: the greedy accuracy and wrong-steps rate of each problem class.

Truncation (seeds 003 section 1.1): a completion stopped by ``max_new_tokens`` (finish ``length``) was
cut by the budget, it did not end, so its text has no final answer of the model's: it counts as not
answered in every rate above (outcome, format, process), and it does not vote in ``maj@k``, whatever
the verifier would read in the cut text.  ``truncation_rate`` (greedy), ``sampled_truncation_rate``
and each ``by_tag`` / ``by_thinking_budget`` row's ``truncation_rate`` stand beside the accuracies
they qualify.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from veriloop.algorithms.pass_at_k import maj_at_k, pass_at_k
from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.models.loading import Policy
from veriloop.options import check_declared, declare, toggled
from veriloop.rollout.sampler import SamplingParams, completion_text, generate
from veriloop.rollout.thinking import generate_with_thinking_budget
from veriloop.rollout.tools import ToolSettings, generate_with_tools
from veriloop.seeding import derive_seed
from veriloop.tasks.base import Problem
from veriloop.tasks.jsonl import DatasetError
from veriloop.verifiers import get as get_verifier
from veriloop.verifiers import is_correct
from veriloop.verifiers.answers import answer_key


@dataclass
class EvalConfig:
    """What ``veriloop eval`` measures."""

    n_samples: int = field(
        default=8, metadata={"help": "samples per problem for sampled accuracy and pass@k; 0 = greedy only", "ge": 0}
    )
    temperature: float = field(default=1.0, metadata={"help": "temperature of the sampled evaluation"})
    max_new_tokens: int = field(default=64, metadata={"help": "completion length limit"})
    batch_size: int = field(default=256, metadata={"help": "prompts per generation batch"})
    seed: int = field(default=0, metadata={"help": "seed of the sampled evaluation"})
    max_problems: int = field(default=0, metadata={"help": "evaluate only the first N held-out problems; 0 = all"})
    thinking_budgets: str = field(
        default="",
        metadata={
            "help": "comma-separated thinking budgets (tokens): greedy accuracy with budget forcing "
            "at each (sampling.max_thinking_tokens), beside the unbudgeted one; empty = none"
        },
    )
    thinking_end: str = field(
        default="", metadata={"help": "end-of-thinking marker for thinking_budgets; empty = the task's"}
    )

    def __post_init__(self):
        check_typed(self, "eval")
        budgets = self.budgets()
        if any(not 0 < b < self.max_new_tokens for b in budgets):
            raise InputError(
                f"eval.thinking_budgets must be in (0, eval.max_new_tokens={self.max_new_tokens}), got "
                f"{self.thinking_budgets!r}"
            )
        if self.temperature <= 0 and self.n_samples > 0:
            raise InputError("eval.temperature must be > 0 for sampled evaluation (or eval.n_samples 0: greedy only)")
        check_declared(self)

    def budgets(self) -> list[int]:
        try:
            return [int(b) for b in self.thinking_budgets.split(",") if b.strip()]
        except ValueError:
            raise InputError(
                f"eval.thinking_budgets must be comma-separated integers, got {self.thinking_budgets!r}"
            ) from None


declare(
    EvalConfig,
    [
        toggled(
            "sampled evaluation",
            "n_samples",
            ("temperature", "seed"),
            lambda cfg: cfg.n_samples > 0,
            "eval.n_samples > 0",
            "eval.n_samples 0",
            {"n_samples": 4},
            {"n_samples": 0},
        ),
        toggled(
            "thinking budgets",
            "thinking_budgets",
            ("thinking_end",),
            lambda cfg: bool(cfg.thinking_budgets.strip()),
            "eval.thinking_budgets N,...",
            "no eval.thinking_budgets",
            {"thinking_budgets": "8"},
            {"thinking_budgets": ""},
        ),
    ],
    ("n_samples", "max_new_tokens", "batch_size", "max_problems", "thinking_budgets"),
)


@dataclass
class EvalResult:
    num_problems: int
    greedy_accuracy: float
    format_rate: float | None  # None: the task has no format check (its JSON is null, never NaN)
    process_rate: float | None
    wrong_steps_rate: float | None
    sampled_accuracy: float | None
    pass_at: dict[str, float]
    by_tag: dict[str, dict[str, float]]
    mean_completion_tokens: float
    examples: list[dict]
    maj_at: dict[str, float] = field(default_factory=dict)  # maj@k beside pass@k, same samples and k
    truncation_rate: float | None = None  # share of greedy completions cut by max_new_tokens (None: not measured)
    sampled_truncation_rate: float | None = None  # the same over the sampled ones
    tool_stats: dict[str, float] = field(default_factory=dict)  # task.reasoning tool: the greedy completions' calls
    # eval.thinking_budgets: {budget: {greedy_accuracy, mean_completion_tokens, forced_rate}} with budget forcing
    by_thinking_budget: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _complete(
    policy: Policy,
    problems: list[Problem],
    params: SamplingParams,
    n: int,
    batch: int,
    seed: int,
    tools: ToolSettings | None = None,
    calls: list | None = None,
):
    """Completions' texts, lengths and whether each was cut by ``max_new_tokens`` (finish ``length``); with
    ``tools`` (task.reasoning tool) each pauses for its code blocks (row ``j`` of problem ``i`` draws from
    ``derive_seed(seed, "eval", i, j)``) and ``calls`` collects each one's calls; with
    ``params.max_thinking_tokens`` budget forcing applies, and ``calls`` collects whether each was forced."""
    tok = policy.tokenizer
    gen = torch.Generator().manual_seed(seed)
    texts, lengths, cut = [], [], []
    per_batch = max(1, batch // max(n, 1))
    for i in range(0, len(problems), per_batch):
        chunk = problems[i : i + per_batch]
        ids = [policy.encode_prompt(p.prompt) for p in chunk]  # the chat template where the policy uses one
        seeds = [derive_seed(seed, "eval", i + b, j) for b in range(len(chunk)) for j in range(n)]
        if tools is not None:
            out = generate_with_tools(policy, ids, params, tools, row_seeds=seeds, n=n)
            if calls is not None:
                calls.extend(out.tool_calls)
        elif params.max_thinking_tokens:
            out = generate_with_thinking_budget(policy, ids, params, row_seeds=seeds, n=n)
            if calls is not None:
                calls.extend(f is not None for f in out.forced_at)
        else:
            out = generate(policy.model, ids, params, eos_id=policy.end_ids, pad_id=policy.pad_id, generator=gen, n=n)
        for c, finish in zip(out.completion_ids, out.finish_reasons):
            texts.append(completion_text(tok, c, finish))
            lengths.append(len(c))
            cut.append(finish == "length")
    return texts, lengths, cut


def answered(verdicts, cut: list[bool]) -> list[bool]:
    """Each verdict's ``is_correct``, false where the completion was cut (it has no answer of the model's)."""
    return [is_correct(v) and not c for v, c in zip(verdicts, cut)]


def evaluate(
    policy: Policy,
    problems: list[Problem],
    verifiers: dict[str, str],
    cfg: EvalConfig | None = None,
    ks: tuple[int, ...] = (1, 8),
    tools: ToolSettings | None = None,
    thinking_end: str = "",
) -> EvalResult:
    """Evaluate ``policy`` on ``problems`` with ``verifiers`` {"outcome": name, "format": name, "process": name};
    ``tools``: the completions run their code blocks (task.reasoning tool), and ``tool_stats`` counts the calls."""
    cfg = cfg or EvalConfig()
    if cfg.max_problems:
        problems = problems[: cfg.max_problems]
    if not problems:
        raise InputError("evaluation on an empty problem set")
    if "outcome" not in verifiers:
        raise ValueError("evaluation needs an 'outcome' verifier")
    vs = {role: get_verifier(name) for role, name in verifiers.items() if name}
    greedy = SamplingParams(temperature=0.0, max_new_tokens=cfg.max_new_tokens)
    calls: list[list] = []
    tool_args = (tools, calls) if tools is not None else ()
    texts, lengths, cut = _complete(policy, problems, greedy, 1, cfg.batch_size, cfg.seed, *tool_args)
    refs = [p.reference for p in problems]
    verdicts = {role: v.verify_batch(texts, refs) for role, v in vs.items()}
    outcome = answered(verdicts["outcome"], cut)
    fmt = answered(verdicts["format"], cut) if "format" in vs else None
    proc = answered(verdicts["process"], cut) if "process" in vs else None
    wrong_steps = [o and not p for o, p in zip(outcome, proc)] if proc else None
    by_tag = _by_tag(problems, outcome, wrong_steps, cut)
    sampled_acc, pass_at, maj_at, sampled_cut = None, {}, {}, None
    if cfg.n_samples > 0:
        sampled_acc, pass_at, maj_at, sampled_cut = _sampled(policy, problems, vs["outcome"], cfg, ks, by_tag, tools)
    return EvalResult(
        num_problems=len(problems),
        greedy_accuracy=_mean(outcome),
        format_rate=_mean(fmt) if fmt else None,
        process_rate=_mean(proc) if proc else None,
        wrong_steps_rate=_mean(wrong_steps) if wrong_steps else None,
        sampled_accuracy=sampled_acc,
        pass_at=pass_at,
        maj_at=maj_at,
        by_tag=by_tag,
        mean_completion_tokens=_mean(lengths),
        truncation_rate=_mean(cut),
        sampled_truncation_rate=sampled_cut,
        examples=_examples(problems, texts, outcome, proc, verdicts["process" if proc else "outcome"], cut),
        tool_stats=_tool_stats(calls) if tools is not None else {},
        by_thinking_budget=_by_thinking_budget(policy, problems, vs["outcome"], cfg, cfg.thinking_end or thinking_end),
    )


def _by_thinking_budget(policy, problems: list[Problem], verifier, cfg: EvalConfig, marker: str) -> dict:
    """Greedy accuracy at each of ``eval.thinking_budgets`` with budget forcing (``rollout/thinking.py``)."""
    out = {}
    if cfg.budgets() and not marker:
        raise InputError("eval.thinking_budgets: this task names no end-of-thinking marker; set eval.thinking_end")
    for budget in cfg.budgets():
        params = SamplingParams(
            temperature=0.0, max_new_tokens=cfg.max_new_tokens, max_thinking_tokens=budget, thinking_end=marker
        )
        forced: list[bool] = []
        texts, lengths, cut = _complete(policy, problems, params, 1, cfg.batch_size, cfg.seed, calls=forced)
        ok = answered(verifier.verify_batch(texts, [p.reference for p in problems]), cut)
        out[str(budget)] = {
            "greedy_accuracy": _mean(ok),
            "mean_completion_tokens": _mean(lengths),
            "forced_rate": _mean(forced),
            "truncation_rate": _mean(cut),
        }
    return out


def _tool_stats(calls: list[list]) -> dict:
    """The greedy completions' code blocks: calls per problem and the share that failed."""
    flat = [c for row in calls for c in row]
    return {
        "calls_per_problem": len(flat) / max(len(calls), 1),
        "failure_rate": sum(c.status != "ok" for c in flat) / len(flat) if flat else 0.0,
    }


def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _by_tag(
    problems: list[Problem], outcome: list[bool], wrong_steps: list[bool] | None, cut: list[bool]
) -> dict[str, dict]:
    """Greedy accuracy and truncation rate (and wrong-steps rate) of each problem class."""
    by_tag: dict[str, dict[str, float]] = {}
    for tag in sorted({t for p in problems for t in p.tags}):
        idx = [i for i, p in enumerate(problems) if tag in p.tags]
        row = {
            "count": len(idx),
            "greedy_accuracy": _mean([outcome[i] for i in idx]),
            "truncation_rate": _mean([cut[i] for i in idx]),
        }
        if wrong_steps:
            row["wrong_steps_rate"] = _mean([wrong_steps[i] for i in idx])
        by_tag[tag] = row
    return by_tag


def _sampled(
    policy: Policy,
    problems: list[Problem],
    verifier,
    cfg: EvalConfig,
    ks: tuple[int, ...],
    by_tag: dict[str, dict],
    tools=None,
) -> tuple[float, dict, dict, float]:
    """Sampled accuracy, pass@k, maj@k and the truncation rate over ``cfg.n_samples`` samples per problem; adds
    pass@k and maj@k to ``by_tag``.  A cut sample is not correct and does not vote."""
    n, refs = len(problems), [p.reference for p in problems]
    params = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    tool_args = (tools,) if tools is not None else ()
    s_texts, _, s_cut = _complete(policy, problems, params, cfg.n_samples, cfg.batch_size, cfg.seed + 1, *tool_args)
    s_refs = [r for r in refs for _ in range(cfg.n_samples)]
    s_ok = answered(verifier.verify_batch(s_texts, s_refs), s_cut)
    s_keys = [None if c else answer_key(t) for t, c in zip(s_texts, s_cut)]  # a cut sample does not vote
    per_problem = [slice(i * cfg.n_samples, (i + 1) * cfg.n_samples) for i in range(n)]
    correct = [sum(s_ok[part]) for part in per_problem]
    votes = [vote_classes(s_keys[part], s_ok[part]) for part in per_problem]
    sampled_acc = sum(correct) / (n * cfg.n_samples)
    pass_at, maj_at = {}, {}
    for k in (k for k in ks if k <= cfg.n_samples):
        passes = [pass_at_k(cfg.n_samples, c, k) for c in correct]
        majorities = [maj_at_k(answers, ok, k) for answers, ok in votes]
        pass_at[str(k)], maj_at[str(k)] = _mean(passes), _mean(majorities)
        for tag, row in by_tag.items():
            idx = [i for i, p in enumerate(problems) if tag in p.tags]
            row[f"pass@{k}"], row[f"maj@{k}"] = _mean([passes[i] for i in idx]), _mean([majorities[i] for i in idx])
    return sampled_acc, pass_at, maj_at, _mean(s_cut)


def vote_classes(keys: list, ok: list[bool]) -> tuple[list, list[bool]]:
    """(vote keys, verdicts) of one problem's samples for ``maj_at_k``: a sample votes for its final answer's
    key (None: no answer, no vote), and the verifier's verdict says whether that answer is right.  Where the
    verifier judged samples of one key differently (it reads more than the final value), the key is split by
    verdict, so a vote is never counted right for a sample the verifier rejected."""
    mixed = {k for k in keys if k is not None and len({o for kk, o in zip(keys, ok) if kk == k}) > 1}
    return [(k, o) if k in mixed else k for k, o in zip(keys, ok)], list(ok)


def _examples(problems, texts, outcome, proc, verdicts, cut) -> list[dict]:
    """The first 20 greedy completions, with their outcome (and process), whether the budget cut them, and the
    verdict's details."""
    return [
        {
            "prompt": p.prompt,
            "completion": t,
            "outcome": float(o),
            "process": float(proc[i]) if proc else None,
            "truncated": cut[i],
            "details": verdicts[i].details,
        }
        for i, (p, t, o) in enumerate(zip(problems[:20], texts[:20], outcome[:20]))
    ]


def validation_metrics(
    policy,
    task,
    verifiers: dict[str, str],
    max_problems: int,
    split: str = "validation",
    tools: ToolSettings | None = None,
) -> dict:
    """Greedy accuracy (and the wrong-steps rate where the task has one) on the first ``max_problems`` of the
    task's ``split`` (validation, or heldout for a test-set curve), for monitoring during training; {} when
    the task has no such split.  Keys: ``<split>_greedy_accuracy``, ``<split>_truncation_rate``,
    ``<split>_wrong_steps_rate``."""
    try:
        problems = (task.validation() if split == "validation" else task.heldout())[:max_problems]
    except DatasetError:  # a JSONL dataset given without validation rows: nothing to monitor
        return {}
    if not problems:
        return {}
    result = evaluate(policy, problems, verifiers, EvalConfig(n_samples=0), tools=tools)
    out = {f"{split}_greedy_accuracy": result.greedy_accuracy, f"{split}_truncation_rate": result.truncation_rate}
    if result.wrong_steps_rate is not None:
        out[f"{split}_wrong_steps_rate"] = result.wrong_steps_rate
    return out
