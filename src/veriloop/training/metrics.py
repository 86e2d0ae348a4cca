"""One row of ``metrics.jsonl`` per step, and the log that writes it atomically."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from veriloop.io import atomic_write_text
from veriloop.rollout.records import Record

# Fields that measure the machine, not the run: excluded when comparing runs for equality.
TIMING_KEYS = ("time_generate_s", "time_verify_s", "time_update_s", "time_step_s", "tokens_per_s", "gen_tokens_per_s")


class MetricsLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[dict] = []
        if self.path.is_file():
            self.rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self._write()

    def truncate(self, step: int) -> None:
        """Forget rows after ``step`` (a resumed run redoes them)."""
        self.rows = [r for r in self.rows if r["step"] <= step]
        self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))


def _stats(prefix: str, x: torch.Tensor) -> dict:
    x = x.float()
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_std": float(x.std(unbiased=False)),
        f"{prefix}_min": float(x.min()),
        f"{prefix}_max": float(x.max()),
    }


def step_metrics(
    step, records: list[Record], rewards, advantages, flat_groups, update: dict, lr: float, times: dict
) -> dict:
    lengths = torch.tensor([len(r.completion_ids) for r in records], dtype=torch.float32)
    components: dict[str, list[float]] = {}
    for r in records:
        for k, v in r.reward_components.items():
            components.setdefault(k, []).append(v)
    total_time = sum(times.values())
    tokens = float(lengths.sum())
    row = {
        "step": step,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
        **{f"reward_{k}": sum(v) / len(v) for k, v in sorted(components.items())},
        "accuracy": sum(r.reward_components.get("outcome", float(r.reward >= 1.0)) for r in records) / len(records),
        "zero_variance_fraction": float(flat_groups.float().mean()),
        **_stats("advantage", advantages),
        "completion_len_mean": float(lengths.mean()),
        "completion_len_max": float(lengths.max()),
        "truncation_rate": sum(r.truncated for r in records) / len(records),
        "kl": update.get("kl", 0.0),
        "clip_frac_low": update.get("clip_frac_low", 0.0),
        "clip_frac_high": update.get("clip_frac_high", 0.0),
        "ratio_min": update.get("ratio_min", 1.0),
        "ratio_max": update.get("ratio_max", 1.0),
        "entropy": update.get("entropy"),
        "logprob_mismatch": update.get("logprob_mismatch", 0.0),
        "grad_norm": update.get("grad_norm", 0.0),
        "update_sequences": update.get("update_sequences", 0),
        "lr": lr,
        "tokens": tokens,
        "tokens_per_s": tokens / max(total_time, 1e-9),
        "gen_tokens_per_s": tokens / max(times["generate"], 1e-9),
        "time_generate_s": times["generate"],
        "time_verify_s": times["verify"],
        "time_update_s": times["update"],
        "time_step_s": total_time,
    }
    return row
