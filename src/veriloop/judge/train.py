"""``veriloop judge data``: verdict rows from the policy's own samples and a rule verifier; ``veriloop judge train``:
fine-tune a causal LM to write the rule's verdict in the grammar's line; ``veriloop judge score``: judge rows.

A verdict row is JSONL ``{"prompt", "completion", "reference", "verdict": "correct" | "incorrect"}`` (further fields
kept, ``provenance`` among them).  Training is supervised: the filled rubric is the prompt, ``Verdict: correct`` or
``Verdict: incorrect`` and the end token the target, cross-entropy on the target's tokens only.  With ``val_data``
the judge's agreement with the rows' verdicts is measured after every epoch (greedy, through the grammar, as it will
be read) and the best epoch kept; ``eval_data`` (held-out rows) is read once, at the end.

``judge_agreement`` names what a judge gets wrong against a rule's verdict on the same rows:
``false_accept_rate`` = P(judge says correct | rule says incorrect), ``false_reject_rate`` = P(judge says incorrect |
rule says correct); a refusal or an unparseable output is counted apart (``refused_rate``, ``unparseable_rate``),
and it is not agreement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.evaluation.rule_samples import rule_judged_samples
from veriloop.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from veriloop.judge.grammar import RUBRICS, load_rubric, verdict_text
from veriloop.judge.model import Judge, Reading, load_judge
from veriloop.logs import progress as progress_display
from veriloop.models.fit import fit_adamw
from veriloop.models.loading import load_policy
from veriloop.options import check_declared, declare, not_read_by
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.base import Split
from veriloop.tasks.config import TaskConfig

ROW_FIELDS = ("prompt", "completion", "reference", "verdict")
RULE_VERDICTS = ("correct", "incorrect")


def load_verdict_rows(path: str) -> list[dict]:
    """The rows of a verdict file, each checked; a wrong row is named by file, row and field."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"verdict file {path!r} does not exist (make one with `veriloop judge data`)")
    rows = read_jsonl(path)
    if not rows:
        raise InputError(f"verdict file {path!r} has no rows")
    for n, r in enumerate(rows, start=1):
        if not isinstance(r, dict):
            raise InputError(f"{path}: row {n}: a verdict row is a JSON object with {list(ROW_FIELDS)}")
        for name in ROW_FIELDS:
            if not isinstance(r.get(name), str):
                got = "no such field" if name not in r else f"a {type(r[name]).__name__}"
                raise InputError(f"{path}: row {n}: field {name!r} must be a string ({got})")
        if r["verdict"] not in RULE_VERDICTS:
            raise InputError(f"{path}: row {n}: verdict {r['verdict']!r} is not one of {list(RULE_VERDICTS)}")
    return rows


@dataclass
class JudgeDataConfig:
    """``veriloop judge data``: the policy's solutions, each with a rule verifier's verdict, to train a judge on."""

    policy: str = field(default="builtin:base", metadata={"help": "policy that writes the solutions"})
    output: str = field(default="runs/judge-rows.jsonl", metadata={"help": "verdict rows, JSONL"})
    split: Split = field(default="train", metadata={"help": "the task's split the problems come from"})
    problems: int = field(default=200, metadata={"help": "problems to draw (heldout: the first N)", "ge": 1})
    samples: int = field(default=4, metadata={"help": "sampled solutions per problem (repeats kept once)", "ge": 1})
    verifier: str = field(
        default="", metadata={"help": "rule verifier whose full marks are 'correct'; '' = the task's outcome one"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the problems and the samples"})
    batch_prompts: int = field(default=64, metadata={"help": "problems per generation batch", "ge": 1})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self):
        check_typed(self)
        self.task.refuse_tools("veriloop judge data")
        check_declared(self)


declare(
    JudgeDataConfig,
    [
        not_read_by(
            "judge data",
            ("sampling.max_thinking_tokens", "sampling.thinking_end"),
            "solutions are sampled whole, without budget forcing",
        )
    ],
    ("policy", "output", "split", "problems", "samples", "verifier", "seed", "batch_prompts", "task", "sampling"),
)


def make_verdict_rows(cfg: JudgeDataConfig, progress: bool = True, *, policy=None, task=None) -> dict:
    """Write ``cfg.output`` and return a summary (rows, the share the rule calls correct)."""
    t0 = time.time()
    samples = rule_judged_samples(cfg, policy, task)
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    bar = progress_display(total=len(samples.problems), desc="judge data", unit="problem", enabled=progress)
    for p, texts, ok in samples.per_problem(cfg.samples):
        for text, right in zip(texts, ok):
            if (p.prompt, text) in seen:  # a confident policy repeats itself: each solution of a problem once
                continue
            seen.add((p.prompt, text))
            verdict = "correct" if right else "incorrect"
            row = {"prompt": p.prompt, "completion": text, "reference": p.reference, "verdict": verdict}
            rows.append({**row, "provenance": samples.provenance})
        bar.update(1)
    bar.close()
    atomic_write_jsonl(cfg.output, rows)
    correct = sum(r["verdict"] == "correct" for r in rows)
    return {
        "output": cfg.output,
        "rows": len(rows),
        "problems": len(samples.problems),
        "correct_share": round(correct / len(rows), 4),
        "seconds": round(time.time() - t0, 1),
    }


def judge_agreement(rule: list[str], judged: list[str]) -> dict:
    """The judge's verdicts against the rule's on the same rows (see the module's docstring)."""
    if not rule or len(rule) != len(judged):
        raise ValueError("agreement needs as many judge verdicts as rule verdicts, and at least one")
    n = len(rule)
    wrong = [j for r, j in zip(rule, judged) if r == "incorrect"]
    right = [j for r, j in zip(rule, judged) if r == "correct"]
    return {
        "rows": n,
        "agreement": round(sum(r == j for r, j in zip(rule, judged)) / n, 4),
        "false_accept_rate": round(wrong.count("correct") / len(wrong), 4) if wrong else None,
        "false_reject_rate": round(right.count("incorrect") / len(right), 4) if right else None,
        "refused_rate": round(judged.count("refused") / n, 4),
        "unparseable_rate": round(judged.count("unparseable") / n, 4),
        "rule_correct_share": round(len(right) / n, 4),
    }


def judge_rows(judge: Judge, rows: list[dict], batch_size: int = 64) -> list[Reading]:
    return judge.read(
        [r["prompt"] for r in rows], [r["completion"] for r in rows], [r["reference"] for r in rows], batch_size
    )


def evaluate_judge(judge: Judge, rows: list[dict]) -> dict:
    readings = judge_rows(judge, rows)
    out = judge_agreement([r["verdict"] for r in rows], [x.verdict for x in readings])
    out["cut_rate"] = round(sum(x.cut > 0 for x in readings) / len(readings), 4)
    return out


@dataclass
class JudgeTrainConfig:
    """``veriloop judge train``: a causal LM fine-tuned to write a rule's verdict in the judge's grammar."""

    data: str = field(default="runs/judge-rows.jsonl", metadata={"help": "verdict rows, JSONL (`judge data`)"})
    val_data: str = field(
        default="", metadata={"help": "validation rows: the epoch of best agreement is kept; '' = the last"}
    )
    eval_data: str = field(default="", metadata={"help": "held-out rows, read once at the end; '' = none"})
    backbone: str = field(default="builtin:base", metadata={"help": "causal LM to start from"})
    rubric: str = field(
        default="compact",
        metadata={"help": f"rubric: {' or '.join(RUBRICS)} (built-in) or a text file naming {{response}}"},
    )
    max_new_tokens: int = field(default=24, metadata={"help": "the judge's output limit, in tokens", "ge": 1})
    out: str = field(default="runs/judge", metadata={"help": "directory of the trained judge"})
    # 6 epochs at 3e-4: the best validation agreement of 1e-3 and 3e-4 over 8 epochs (the benchmark's rows)
    epochs: int = field(default=6, metadata={"help": "passes over the rows", "ge": 1})
    batch_size: int = field(default=32, metadata={"help": "rows per optimizer step", "ge": 1})
    lr: float = field(default=3e-4, metadata={"help": "AdamW learning rate", "gt": 0})
    seed: int = field(default=0, metadata={"help": "seed of the data order"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})

    def __post_init__(self):
        check_typed(self)
        load_rubric(self.rubric)  # a missing file or an unknown field, before any training
        check_declared(self)


declare(
    JudgeTrainConfig,
    [],
    (
        "data",
        "val_data",
        "eval_data",
        "backbone",
        "rubric",
        "max_new_tokens",
        "out",
        "epochs",
        "batch_size",
        "lr",
        "seed",
        "threads",
    ),
)


def verdict_example(judge: Judge, row: dict) -> tuple[list[int], int]:
    """(prompt + target ids, where the target starts): the target is the rule's verdict line and the end token."""
    prompt, _ = judge.prompt_ids(row["prompt"], row["completion"], row["reference"])
    tok = judge.policy.tokenizer
    target = tok(verdict_text(row["verdict"]), add_special_tokens=False).input_ids + [judge.policy.eos_id]
    return prompt + target, len(prompt)


def verdict_loss(judge: Judge, examples: list[tuple[list[int], int]]) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (right-padded; the prompt and the padding are not learned)."""
    width = max(len(s) for s, _ in examples)
    ids = torch.full((len(examples), width), judge.policy.pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (s, start) in enumerate(examples):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        labels[i, start : len(s)] = torch.tensor(s[start:])
    logits = judge.policy.model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def fit_judge(judge: Judge, rows: list[dict], cfg: JudgeTrainConfig, progress: bool = False, after_epoch=None):
    """AdamW on ``verdict_loss``; returns every step's loss.  ``after_epoch(epoch)`` runs after each epoch."""
    examples = [verdict_example(judge, r) for r in rows]
    return fit_adamw(
        judge.policy.model,
        examples,
        lambda batch: verdict_loss(judge, batch),
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        seed=cfg.seed,
        desc="judge train",
        progress=progress,
        after_epoch=after_epoch,
    )


def train_judge(cfg: JudgeTrainConfig, progress: bool = True) -> dict:
    """Fit on ``cfg.data``, keep the best validation epoch, evaluate on ``cfg.eval_data`` once, save to ``cfg.out``;
    returns the summary (also ``train_summary.json`` beside the judge)."""
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rows = load_verdict_rows(cfg.data)
    val = load_verdict_rows(cfg.val_data) if cfg.val_data else []
    held_out = load_verdict_rows(cfg.eval_data) if cfg.eval_data else []
    torch.manual_seed(cfg.seed)
    judge = Judge(load_policy(cfg.backbone), load_rubric(cfg.rubric), cfg.max_new_tokens)
    history: list[dict] = []
    best: dict = {}

    def validate(epoch: int) -> None:
        ev = evaluate_judge(judge, val)
        history.append({"epoch": epoch, **ev})
        if not best or ev["agreement"] > best["agreement"]:  # ties keep the earlier epoch
            state = {k: v.clone() for k, v in judge.policy.model.state_dict().items()}
            best.update(agreement=ev["agreement"], epoch=epoch, state=state)

    losses = fit_judge(judge, rows, cfg, progress, validate if val else None)
    summary: dict = {"train_rows": len(rows), "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 5)}
    if val:
        judge.policy.model.load_state_dict(best["state"])
        summary.update(validation_by_epoch=history, selected_epoch=best["epoch"])
    if held_out:
        summary["eval"] = evaluate_judge(judge, held_out)
    summary["seconds"] = round(time.time() - t0, 1)
    judge.save(
        cfg.out,
        {
            "made_by": "veriloop judge train",
            "backbone": cfg.backbone,
            "data": cfg.data,
            "row_provenance": rows[0].get("provenance", {}),
            "epochs": cfg.epochs,
            "lr": cfg.lr,
            "seed": cfg.seed,
            "metrics": summary,
        },
    )
    atomic_write_json(Path(cfg.out) / "train_summary.json", summary)
    return summary


def score_file(judge_dir: str, input_path: str, output_path: str, rubric: str = "") -> dict:
    """``veriloop judge score``: rows {prompt, completion[, reference]} -> the rows with the judge's ``judge_verdict``,
    ``judge_output`` and ``judge_reason``; rows that carry a rule's ``verdict`` also give the agreement."""
    judge = load_judge(judge_dir, rubric)
    rows = read_jsonl(input_path)
    if not rows:
        raise InputError(f"{input_path}: no rows")
    for n, r in enumerate(rows, start=1):
        for name in ("prompt", "completion"):
            if not isinstance(r.get(name), str):
                raise InputError(f"{input_path}: row {n}: needs a string {name!r}")
        if not isinstance(r.get("reference", ""), str):
            raise InputError(f"{input_path}: row {n}: field 'reference' must be a string")
    readings = judge.read(
        [r["prompt"] for r in rows], [r["completion"] for r in rows], [r.get("reference", "") for r in rows]
    )
    out = [
        {**r, "judge_verdict": x.verdict, "judge_output": x.raw, "judge_reason": x.reason, "judge_cut": x.cut}
        for r, x in zip(rows, readings)
    ]
    atomic_write_jsonl(output_path, out)
    summary: dict = {"rows": len(out), "output": output_path}
    summary["verdicts"] = {v: sum(x.verdict == v for x in readings) for v in sorted({x.verdict for x in readings})}
    if all(r.get("verdict") in RULE_VERDICTS for r in rows):
        summary["agreement"] = judge_agreement([r["verdict"] for r in rows], [x.verdict for x in readings])
    return summary
