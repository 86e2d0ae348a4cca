"""``veriloop rm train``: fit a Bradley-Terry reward model to preference pairs; ``veriloop rm score``: score rows.

Training minimises ``-log sigmoid(r(x, y_c) - r(x, y_r))`` over the pairs of ``data`` (``bradley_terry_loss``),
backbone and head together (AdamW).  With ``val_data`` the pair accuracy on it is measured after every epoch and the
best epoch's weights are kept (choices read validation); ``eval_data`` (held-out pairs) is read once, at the end.
Pair accuracy is the share of pairs with ``r_c > r_r`` (a tie counts one half: a model that scores everything the
same is at 0.5, chance).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from veriloop.config import check_typed
from veriloop.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from veriloop.models.fit import fit_adamw
from veriloop.models.loading import load_policy
from veriloop.options import check_declared, declare
from veriloop.preference.model import RewardModel, bradley_terry_loss, load_reward_model
from veriloop.preference.pairs import load_pairs


@dataclass
class RMTrainConfig:
    """``veriloop rm train``: a Bradley-Terry reward model (backbone and a scalar head) fitted to preference pairs."""

    data: str = field(default="runs/rm-pairs.jsonl", metadata={"help": "pairs {prompt, chosen, rejected}, JSONL"})
    val_data: str = field(
        default="", metadata={"help": "validation pairs: the epoch of best pair accuracy is kept; '' = the last"}
    )
    eval_data: str = field(default="", metadata={"help": "held-out pairs, read once at the end; '' = none"})
    backbone: str = field(default="builtin:base", metadata={"help": "causal LM to start from"})
    out: str = field(default="runs/rm", metadata={"help": "directory of the trained reward model"})
    epochs: int = field(default=3, metadata={"help": "passes over the pairs", "ge": 1})
    batch_size: int = field(default=16, metadata={"help": "pairs per optimizer step", "ge": 1})
    lr: float = field(default=3e-4, metadata={"help": "AdamW learning rate (head and backbone)", "gt": 0})
    seed: int = field(default=0, metadata={"help": "seed of the data order"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})

    def __post_init__(self):
        check_typed(self)
        check_declared(self)


declare(
    RMTrainConfig,
    [],
    ("data", "val_data", "eval_data", "backbone", "out", "epochs", "batch_size", "lr", "seed", "threads"),
)


def pair_rewards(rm: RewardModel, pairs: list[dict]) -> tuple[list[float], list[float]]:
    """The reward model's ``r_c`` and ``r_r`` of every pair."""
    chosen = rm.score([p["prompt"] for p in pairs], [p["chosen"] for p in pairs])
    rejected = rm.score([p["prompt"] for p in pairs], [p["rejected"] for p in pairs])
    return chosen, rejected


def pair_accuracy(chosen: list[float], rejected: list[float]) -> float:
    """Share of pairs ranked right, ``r_c > r_r``; a tie counts 1/2."""
    if not chosen:
        raise ValueError("pair accuracy of no pairs")
    right = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen, rejected))
    return right / len(chosen)


def evaluate_pairs(rm: RewardModel, pairs: list[dict]) -> dict:
    """Pair accuracy, the mean margin ``r_c - r_r`` and the mean Bradley-Terry loss on ``pairs``."""
    chosen, rejected = pair_rewards(rm, pairs)
    loss = bradley_terry_loss(torch.tensor(chosen), torch.tensor(rejected))
    return {
        "pairs": len(pairs),
        "accuracy": round(pair_accuracy(chosen, rejected), 4),
        "mean_margin": round(sum(c - r for c, r in zip(chosen, rejected)) / len(pairs), 4),
        "loss": round(float(loss), 5),
    }


def fit_reward_model(
    rm: RewardModel,
    pairs: list[dict],
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: bool = False,
    after_epoch=None,
) -> list[float]:
    """AdamW on the Bradley-Terry loss, ``batch_size`` pairs a step (their 2B sequences in one pass); returns every
    step's loss.  ``after_epoch(epoch)`` runs after each epoch with the model in eval mode."""
    encoded = [(rm.encode(p["prompt"], p["chosen"]), rm.encode(p["prompt"], p["rejected"])) for p in pairs]

    def loss_of(batch):
        r = rm.rewards([c for c, _ in batch] + [x for _, x in batch])
        return bradley_terry_loss(r[: len(batch)], r[len(batch) :])

    return fit_adamw(
        rm,
        encoded,
        loss_of,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        desc="rm train",
        progress=progress,
        after_epoch=after_epoch,
    )


def train_reward_model(cfg: RMTrainConfig, progress: bool = True) -> dict:
    """Fit on ``cfg.data``, keep the best validation epoch, evaluate on ``cfg.eval_data`` once, save to ``cfg.out``;
    returns the summary (also written as ``train_summary.json`` beside the model)."""
    t0 = time.time()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    pairs = load_pairs(cfg.data)  # every file is checked before any training
    val = load_pairs(cfg.val_data) if cfg.val_data else []
    held_out = load_pairs(cfg.eval_data) if cfg.eval_data else []
    torch.manual_seed(cfg.seed)
    rm = RewardModel(load_policy(cfg.backbone))
    history: list[dict] = []
    best: dict = {}

    def validate(epoch: int) -> None:
        ev = evaluate_pairs(rm, val)
        history.append({"epoch": epoch, **ev})
        if not best or ev["accuracy"] > best["accuracy"]:  # ties keep the earlier epoch
            best.update(accuracy=ev["accuracy"], epoch=epoch, state={k: v.clone() for k, v in rm.state_dict().items()})

    losses = fit_reward_model(
        rm, pairs, cfg.epochs, cfg.batch_size, cfg.lr, cfg.seed, progress, validate if val else None
    )
    summary: dict = {"train_pairs": len(pairs), "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 5)}
    if val:
        rm.load_state_dict(best["state"])
        summary.update(validation_by_epoch=history, selected_epoch=best["epoch"])
    if held_out:
        summary["eval"] = evaluate_pairs(rm, held_out)
    summary["seconds"] = round(time.time() - t0, 1)
    provenance = pairs[0].get("provenance", {})
    rm.save(
        cfg.out,
        {
            "backbone": cfg.backbone,
            "data": cfg.data,
            "pair_provenance": provenance,
            "epochs": cfg.epochs,
            "lr": cfg.lr,
            "seed": cfg.seed,
            "metrics": summary,
        },
    )
    atomic_write_json(Path(cfg.out) / "train_summary.json", summary)
    return summary


def score_file(rm_dir: str, input_path: str, output_path: str) -> dict:
    """``veriloop rm score``: rows {prompt, completion} -> the rows with ``reward``; pair rows {prompt, chosen,
    rejected} -> with ``reward_chosen`` and ``reward_rejected`` (and the file's pair accuracy in the summary)."""
    from veriloop.errors import InputError

    rm = load_reward_model(rm_dir)
    rows = read_jsonl(input_path)
    if not rows:
        raise InputError(f"{input_path}: no rows")
    if all("chosen" in r for r in rows):
        pairs = load_pairs(input_path)
        chosen, rejected = pair_rewards(rm, pairs)
        out = [
            {**r, "reward_chosen": round(c, 6), "reward_rejected": round(x, 6)}
            for r, c, x in zip(rows, chosen, rejected)
        ]
        atomic_write_jsonl(output_path, out)
        return {"rows": len(out), "accuracy": round(pair_accuracy(chosen, rejected), 4), "output": output_path}
    for n, r in enumerate(rows, start=1):
        for name in ("prompt", "completion"):
            if not isinstance(r.get(name), str):
                raise InputError(f"{input_path}: row {n}: needs a string {name!r} (or every row a pair)")
    rewards = rm.score([r["prompt"] for r in rows], [r["completion"] for r in rows])
    out = [{**r, "reward": round(x, 6)} for r, x in zip(rows, rewards)]
    atomic_write_jsonl(output_path, out)
    return {"rows": len(out), "output": output_path}
