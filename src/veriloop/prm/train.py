"""``veriloop prm train``: fit a PRM to step labels; ``veriloop prm score``: score solutions.

Training reads the JSONL of ``veriloop prm label``.  ``labels`` chooses the target of each
step: ``hard`` (Math-Shepherd hard label), ``soft`` (soft label) or ``outcome`` (every step
labelled with the solution's final outcome: an outcome reward model, ORM, read at its last
step).  With ``val_data`` (labels of the task's validation split) the PRM is scored after every
epoch and the epoch with the best validation AUC (``select``) is kept: choices read validation,
never the held-out set.  Evaluation on ``eval_data`` (held-out labels), once, at the end, reports
ROC AUC of the step scores against the held-out labels, and, where the task has an exact process
checker (arithmetic), against it: the ground truth the automatic labels only approximate.
"""

from __future__ import annotations

import itertools
import random
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from veriloop.models.fit import fit_adamw
from veriloop.models.loading import load_policy
from veriloop.options import check_declared, declare, toggled
from veriloop.prm.metrics import roc_auc
from veriloop.prm.model import PRM, GenerativePRM, PRMAggregation, PRMForm, PRMLoss, aggregate, load_prm

LabelKind = Literal["hard", "soft", "outcome"]
LABEL_KINDS = typing.get_args(LabelKind)
Select = Literal["targets", "exact_checker", "last"]
SELECT = typing.get_args(Select)
REQUIRED = ("prompt", "reference", "completion", "steps", "soft_labels", "hard_labels", "outcome")


@dataclass
class PRMTrainConfig:
    """``veriloop prm train``: a scalar head (and the backbone) fitted to automatic step labels."""

    data: str = field(default="runs/prm-labels.jsonl", metadata={"help": "labels from `veriloop prm label`"})
    eval_data: str = field(
        default="", metadata={"help": "held-out labels (label --split heldout), read once at the end; '' = none"}
    )
    val_data: str = field(
        default="", metadata={"help": "validation labels (label --split validation) to choose the epoch; '' = none"}
    )
    select: Select = field(
        default="targets",
        metadata={
            "help": "with val_data, keep the epoch of best validation AUC against: targets (the labels "
            "it trains on), exact_checker (arithmetic's ground truth), or last (no choice)"
        },
    )
    backbone: str = field(default="builtin:base", metadata={"help": "causal LM to start from"})
    out: str = field(default="runs/prm", metadata={"help": "directory of the trained PRM"})
    labels: LabelKind = field(
        default="hard", metadata={"help": "step targets: Math-Shepherd's hard or soft labels, or outcome (an ORM)"}
    )
    form: PRMForm = field(
        default="head",
        metadata={
            "help": "head: a scalar head on the last hidden state; generative: the LM itself predicts a [GOOD] or "
            "[BAD] token at each step's end (Math-Shepherd's form)"
        },
    )
    loss: PRMLoss = field(default="bce", metadata={"help": "the PRM's loss (bce: hard or outcome labels only)"})
    cumulative: bool = field(
        default=False,
        metadata={"help": "target of step k = min of the labels of steps 1..k (a path broken earlier stays broken)"},
    )
    aggregation: PRMAggregation = field(default="min", metadata={"help": "default solution score from its step scores"})
    epochs: int = field(default=3, metadata={"help": "passes over the labelled solutions", "ge": 1})
    batch_size: int = field(default=32, metadata={"help": "solutions per optimizer step", "ge": 1})
    lr: float = field(default=3e-4, metadata={"help": "AdamW learning rate (head and backbone)", "gt": 0})
    seed: int = field(default=0, metadata={"help": "seed of the data order"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})

    def __post_init__(self):
        check_typed(self)
        if self.loss == "bce" and self.labels == "soft":
            raise InputError("loss bce needs 0/1 targets: use labels hard|outcome, or loss soft_ce|mse for soft")
        if self.form == "generative" and self.loss == "mse":
            raise InputError("form generative trains its verdict token's cross-entropy: loss bce or soft_ce, not mse")
        check_declared(self)


# select chooses the epoch on the validation labels: without val_data there is no choice to make
declare(
    PRMTrainConfig,
    [
        toggled(
            "epoch choice",
            "val_data",
            ("select",),
            lambda cfg: bool(cfg.val_data),
            "val_data FILE",
            "no val_data",
            {"val_data": "val.jsonl"},
            {"val_data": ""},
        )
    ],
    (
        "data",
        "eval_data",
        "val_data",
        "backbone",
        "out",
        "form",
        "labels",
        "loss",
        "cumulative",
        "aggregation",
        "epochs",
        "batch_size",
        "lr",
        "seed",
        "threads",
    ),
)


def load_labels(path: str) -> list[dict]:
    """Rows of a label file, checked: every field present, one label per step."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"label file {path!r} does not exist (make one with `veriloop prm label`)")
    rows = list(read_jsonl(path))
    if not rows:
        raise InputError(f"label file {path!r} has no rows")
    for i, r in enumerate(rows, start=1):
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise InputError(f"{path}: row {i} lacks {missing}")
        if not (len(r["steps"]) == len(r["soft_labels"]) == len(r["hard_labels"])):
            raise InputError(
                f"{path}: row {i} has {len(r['steps'])} steps but {len(r['soft_labels'])} soft and "
                f"{len(r['hard_labels'])} hard labels"
            )
    return rows


def shuffled_step_labels(rows: list[dict], seed: int) -> list[dict]:
    """A control for a PRM's metrics: each row takes a random row's step labels (drawn with replacement,
    cut or padded with their last value to its own step count), so the labels keep their distribution and
    their position-by-position shape but carry no information about the row's own steps.  A PRM trained on
    these shows what the AUCs read when nothing was learned about the steps."""
    rng = random.Random(seed)
    out = []
    for r in rows:
        other, n = rows[rng.randrange(len(rows))], len(r["steps"])
        soft, hard = ((xs + [xs[-1]] * n)[:n] for xs in (other["soft_labels"], other["hard_labels"]))
        out.append({**r, "soft_labels": soft, "hard_labels": hard})
    return out


def targets(row: dict, kind: str, cumulative: bool = False) -> list[float]:
    """The training target of each step; ``cumulative``: the running minimum over the steps so far."""
    if kind == "hard":
        out = [float(x) for x in row["hard_labels"]]
    elif kind == "soft":
        out = [float(x) for x in row["soft_labels"]]
    else:
        out = [float(row["outcome"])] * len(row["steps"])
    return list(itertools.accumulate(out, min)) if cumulative else out


def exact_step_labels(rows: list[dict]) -> list[list[bool]] | None:
    """Ground truth from the arithmetic task's exact process checker; None for other tasks."""
    if any(r.get("provenance", {}).get("task") != "arithmetic" for r in rows):
        return None
    from veriloop.verifiers.arithmetic import sound_steps

    return [sound_steps(r["completion"], r["reference"]) for r in rows]


def evaluate_prm(prm: PRM, rows: list[dict], labels: str = "hard", cumulative: bool = False) -> dict:
    """AUCs of the PRM's step scores on labelled rows (and of the labels themselves vs the truth).

    ``auc_vs_targets``: against the rows' own training targets (``labels``, ``cumulative``) taken
    as good above 0.5, the criterion a PRM can be chosen by without any ground truth."""
    scores = prm.score([r["prompt"] for r in rows], [r["completion"] for r in rows])
    flat = [s for row in scores for s in row]
    out = {"steps": len(flat), "solutions": len(rows)}
    hard = [bool(x) for r in rows for x in r["hard_labels"]]
    out["auc_vs_hard_labels"] = _auc(flat, hard)
    out["auc_vs_targets"] = _auc(flat, [t > 0.5 for r in rows for t in targets(r, labels, cumulative)])
    exact = exact_step_labels(rows)
    if exact is not None:
        truth = [x for row in exact for x in row]
        if len(truth) != len(flat):
            raise ValueError("the exact checker and the PRM split the steps differently")
        out["auc_vs_exact_checker"] = _auc(flat, truth)
        out["soft_labels_auc_vs_exact_checker"] = _auc([float(x) for r in rows for x in r["soft_labels"]], truth)
        out["exact_sound_share"] = sum(truth) / len(truth)
        labelled_good = [h for h, t in zip(hard, truth) if not t]
        out["unsound_steps_labelled_good"] = sum(labelled_good) / max(len(labelled_good), 1)
        out["auc_vs_exact_checker_by_tag"] = _auc_by_tag(rows, scores, exact)
    return out


def _auc_by_tag(rows, scores, exact) -> dict:
    """AUC against the exact checker within each problem class (arithmetic tags: clean, mul, sub-inner)."""
    from veriloop.tasks.arithmetic import make_problem

    by: dict[str, tuple[list, list]] = {}
    for r, sc, ex in zip(rows, scores, exact):
        for tag in make_problem(r["reference"]).tags:
            s, t = by.setdefault(tag, ([], []))
            s.extend(sc)
            t.extend(ex)
    return {tag: {"steps": len(s), "auc": _auc(s, t)} for tag, (s, t) in sorted(by.items())}


def _auc(scores, labels):
    try:
        return round(roc_auc(scores, labels), 4)
    except ValueError:
        return None


def fit_prm(
    prm: PRM,
    rows: list[dict],
    labels: str,
    loss: str,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: bool = False,
    where: str = "labels",
    cumulative: bool = False,
    after_epoch: Callable[[int], None] | None = None,
) -> list[float]:
    """Optimise the PRM (head and backbone, AdamW) on labelled rows; returns the loss of every step.
    ``after_epoch(epoch)`` runs after each epoch with the PRM in eval mode (e.g. a validation pass)."""
    encoded = []
    for i, r in enumerate(rows, start=1):
        seq, reads = prm.encode(r["prompt"], r["completion"])
        if len(reads) != len(r["steps"]):
            raise InputError(
                f"{where}: row {i}: the {prm.splitter!r} splitter finds {len(reads)} steps, the file "
                f"labels {len(r['steps'])}"
            )
        encoded.append((seq, reads, torch.tensor(targets(r, labels, cumulative), dtype=torch.float32)))

    def loss_of(batch):
        return prm.step_loss([b[0] for b in batch], [b[1] for b in batch], torch.cat([b[2] for b in batch]), loss)

    return fit_adamw(
        prm,
        encoded,
        loss_of,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        desc="prm train",
        progress=progress,
        after_epoch=after_epoch,
    )


def train_prm(cfg: PRMTrainConfig, progress: bool = True) -> dict:
    """``veriloop prm train``: fit a PRM on ``cfg.data``, keep the epoch ``cfg.select`` picks on the validation
    labels, score it on the eval labels, save it to ``cfg.out``; returns the training summary."""
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rows, val_rows, eval_rows = _load_label_sets(cfg)
    torch.manual_seed(cfg.seed)
    provenance = rows[0].get("provenance", {})
    cls = GenerativePRM if cfg.form == "generative" else PRM
    prm = cls(load_policy(cfg.backbone), provenance.get("splitter", "semicolon"), provenance.get("prompt_template", ""))
    history: list[dict] = []
    best: dict = {}
    losses = fit_prm(
        prm,
        rows,
        cfg.labels,
        cfg.loss,
        cfg.epochs,
        cfg.batch_size,
        cfg.lr,
        cfg.seed,
        progress,
        where=cfg.data,
        cumulative=cfg.cumulative,
        after_epoch=_epoch_selector(prm, val_rows, cfg, history, best) if val_rows else None,
    )
    summary = {
        "train_solutions": len(rows),
        "train_steps": sum(len(r["steps"]) for r in rows),
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 5),
    }
    if val_rows:
        prm.load_state_dict(best["state"])
        summary.update(validation_by_epoch=history, selected_epoch=best["epoch"], select=cfg.select)
    if eval_rows:
        summary["eval"] = evaluate_prm(prm, eval_rows, cfg.labels, cfg.cumulative)
    summary["seconds"] = round(time.time() - t0, 1)
    _save_trained_prm(prm, cfg, provenance, summary)
    return summary


def _load_label_sets(cfg: PRMTrainConfig) -> tuple[list, list, list]:
    """The training, validation and eval label rows, checked before any training: selecting by the exact checker
    needs validation rows that have one (said at once, not after the first epoch)."""
    rows = load_labels(cfg.data)
    val_rows = load_labels(cfg.val_data) if cfg.val_data else []
    eval_rows = load_labels(cfg.eval_data) if cfg.eval_data else []
    if cfg.select == "exact_checker" and val_rows and exact_step_labels(val_rows) is None:
        raise InputError(f"select exact_checker needs a task with an exact process checker; {cfg.val_data} has none")
    return rows, val_rows, eval_rows


def _epoch_selector(prm: PRM, val_rows: list, cfg: PRMTrainConfig, history: list, best: dict):
    """The ``after_epoch`` hook of ``fit_prm``: score the epoch on validation (appended to ``history``) and keep
    the best weights so far in ``best`` by ``cfg.select`` (``last``: the latest epoch)."""

    def validate(epoch: int) -> None:
        ev = evaluate_prm(prm, val_rows, cfg.labels, cfg.cumulative)
        history.append({"epoch": epoch, **{k: v for k, v in ev.items() if k.startswith("auc_vs_")}})
        key = {"targets": "auc_vs_targets", "exact_checker": "auc_vs_exact_checker", "last": None}[cfg.select]
        value = float(epoch) if key is None else (ev[key] if ev[key] is not None else float("-inf"))
        if not best or value > best["value"]:
            best.update(value=value, epoch=epoch, state={k: v.clone() for k, v in prm.state_dict().items()})

    return validate


def _save_trained_prm(prm: PRM, cfg: PRMTrainConfig, provenance: dict, summary: dict) -> None:
    """Save the PRM with the metadata ``load_prm`` and the verifier read back (kind, aggregation, labels, where
    its labels came from), and the summary beside it as train_summary.json."""
    prm.save(
        cfg.out,
        {
            "kind": "orm" if cfg.labels == "outcome" else "prm",
            "aggregation": cfg.aggregation,
            "labels": cfg.labels,
            "loss": cfg.loss,
            "cumulative": cfg.cumulative,
            "backbone": cfg.backbone,
            "data": cfg.data,
            "label_provenance": provenance,
            "metrics": summary,
        },
    )
    atomic_write_json(Path(cfg.out) / "train_summary.json", summary)


def score_file(prm_dir: str, input_path: str, output_path: str, aggregation: str = "") -> dict:
    """``veriloop prm score``: rows {prompt, completion} -> the rows with ``step_scores`` and ``score``."""
    prm = load_prm(prm_dir)
    how = aggregation or prm.meta.get("aggregation", "min")
    rows = list(read_jsonl(input_path))
    for i, r in enumerate(rows, start=1):
        if "completion" not in r or ("prompt" not in r and "reference" not in r):
            raise InputError(f"{input_path}: row {i} needs completion and prompt (or reference)")
    prompts = [r["prompt"] if "prompt" in r else prm.prompt_for(r["reference"]) for r in rows]
    scores = prm.score(prompts, [r["completion"] for r in rows])
    out = [{**r, "step_scores": [round(s, 6) for s in sc], "score": aggregate(sc, how)} for r, sc in zip(rows, scores)]
    atomic_write_jsonl(output_path, out)
    return {"rows": len(out), "aggregation": how, "output": output_path}
