"""``veriloop eval``: evaluate a policy (and the task's teacher) on the held-out (or validation) set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from veriloop.config import check_typed
from veriloop.evaluation.evaluate import EvalConfig, EvalResult, evaluate
from veriloop.evaluation.teacher import evaluate_teacher
from veriloop.io import atomic_write_json
from veriloop.models.device import DType, Placement
from veriloop.models.loading import PromptFormat, load_policy
from veriloop.options import declare
from veriloop.tasks.base import split_problems
from veriloop.tasks.config import TaskConfig
from veriloop.verifiers.tools import tool_settings


@dataclass
class EvalRunConfig:
    """``veriloop eval``: held-out evaluation of a policy (and of the task's teacher)."""

    policy: str = field(default="builtin:base", metadata={"help": "model directory or builtin:base"})
    split: Literal["heldout", "validation"] = field(
        default="heldout", metadata={"help": "heldout (report), or validation (choices and tuning read this one)"}
    )
    out: str = field(default="", metadata={"help": "write the result as JSON here"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    device: str = field(default="auto", metadata={"help": "auto (cuda when present), cpu, cuda or cuda:N"})
    dtype: DType = field(default="float32", metadata={"help": "weights of the policy"})
    task: TaskConfig = field(default_factory=TaskConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        check_typed(self)


declare(EvalRunConfig, common=("policy", "split", "out", "threads", "device", "dtype", "task", "eval"))


def format_result(name: str, r: EvalResult, split: str = "heldout") -> str:
    lines = [f"{name}: {r.num_problems} {'held-out' if split == 'heldout' else split} problems"]
    lines.append(f"  greedy accuracy      {r.greedy_accuracy:.3f}")
    if r.truncation_rate is not None:  # beside the accuracy it qualifies: a cut completion counts as not answered
        lines.append(f"  truncated (greedy)   {r.truncation_rate:.3f}")
    if r.sampled_accuracy is not None:
        lines.append(f"  sampled accuracy     {r.sampled_accuracy:.3f}")
    if r.sampled_truncation_rate is not None:
        lines.append(f"  truncated (sampled)  {r.sampled_truncation_rate:.3f}")
    for k, v in r.pass_at.items():
        lines.append(f"  pass@{k:<15} {v:.3f}")
    for k, v in r.maj_at.items():
        lines.append(f"  maj@{k:<16} {v:.3f}")
    if r.format_rate is not None:  # None: the task has no format verifier
        lines.append(f"  format rate          {r.format_rate:.3f}")
    if r.process_rate is not None:
        lines.append(f"  process-correct rate {r.process_rate:.3f}")
        lines.append(f"  right answer, wrong steps {r.wrong_steps_rate:.3f}")
    if r.by_thinking_budget:
        lines.append("  thinking budget  greedy accuracy  tokens  forced  truncated")
        for budget, row in r.by_thinking_budget.items():
            lines.append(
                f"  {budget:>15}  {row['greedy_accuracy']:15.3f}  {row['mean_completion_tokens']:6.1f}  "
                f"{row['forced_rate']:6.3f}  {row['truncation_rate']:9.3f}"
            )
        lines.append(
            f"  {'none':>15}  {r.greedy_accuracy:15.3f}  {r.mean_completion_tokens:6.1f}  {0:6.3f}  "
            f"{r.truncation_rate or 0:9.3f}"
        )
    for k, v in r.tool_stats.items():
        lines.append(f"  tool {k.replace('_', ' '):<15} {v:.3f}")
    for tag, row in r.by_tag.items():
        extra = ", ".join(f"{k} {v:.3f}" for k, v in row.items() if k != "count")
        lines.append(f"  [{tag}] n={row['count']}: {extra}")
    return "\n".join(lines)


def run_eval(cfg: EvalRunConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task = cfg.task.build()
    problems = split_problems(task, cfg.split)
    if cfg.eval.max_problems:
        problems = problems[: cfg.eval.max_problems]
    verifiers = cfg.task.eval_verifiers()
    prompts = PromptFormat(cfg.task.chat_template, cfg.task.system_prompt)
    policy = load_policy(cfg.policy, placement=Placement.of(cfg.device, cfg.dtype), prompts=prompts)
    result = evaluate(
        policy, problems, verifiers, cfg.eval, tools=tool_settings(task), thinking_end=getattr(task, "thinking_end", "")
    )
    print(format_result(cfg.policy, result, cfg.split))
    teacher = evaluate_teacher(task, problems, verifiers)
    if teacher:
        print("teacher: " + ", ".join(f"{k} {v:.3f}" for k, v in teacher.items()))
    out = {"policy": cfg.policy, "split": cfg.split, "result": result.as_dict(), "teacher": teacher}
    if cfg.out:
        atomic_write_json(cfg.out, out)
        print(f"written to {cfg.out}")
    return out
