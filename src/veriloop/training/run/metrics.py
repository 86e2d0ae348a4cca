"""One row of ``metrics.jsonl`` per step, and the log that writes it atomically."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from veriloop.algorithms import zero_variance_groups
from veriloop.errors import InputError
from veriloop.io import atomic_write_text
from veriloop.rollout.records import Record

log = logging.getLogger(__name__)

# Fields that measure the machine, not the run: excluded when comparing runs for equality.
TIMING_KEYS = (
    "time_generate_s",
    "time_verify_s",
    "time_update_s",
    "time_step_s",
    "time_select_s",
    "tokens_per_s",
    "gen_tokens_per_s",
    "update_started_at",
    "update_ended_at",
)


class MetricsLog:
    """``metrics.jsonl``: a step appends its row (one line, flushed), so a step's cost does not grow with the
    run's length; rewriting the file whole at every step was quadratic in the steps.  Reading it back, a last
    line that is not a whole JSON object (cut by a kill or a copy) is dropped with a warning: it is a step past
    the checkpoint that the resumed run redoes; a bad line before the last one is an error naming it.  The file
    is rewritten whole (atomically) only when it no longer holds exactly ``rows``: after such a cut line, and
    when a resume forgets rows (``truncate``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: list[dict] = []
        self._in_sync = not self.path.exists()  # the file holds exactly self.rows, each line whole
        if self.path.is_file():
            data = self.path.read_bytes()
            lines = [(n, line) for n, line in enumerate(data.splitlines(), 1) if line.strip()]
            for i, (lineno, line) in enumerate(lines):
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict) or "step" not in row:
                        raise ValueError("not a metrics row")
                except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                    if i < len(lines) - 1:
                        raise InputError(f"{self.path}:{lineno}: not a metrics row ({e})") from None
                    log.warning(
                        f"{self.path}:{lineno}: dropping the last line, which is not a whole metrics row "
                        f"({len(line)} bytes, cut by a kill?)"
                    )
                    break
                self.rows.append(row)
            else:
                self._in_sync = data.endswith(b"\n") or not self.rows

    def append(self, row: dict) -> None:
        self.rows.append(row)
        if not self._in_sync:
            self._write()
            return
        with self.path.open("a", encoding="utf-8") as fh:  # one whole line; a kill mid-write cuts only this row
            fh.write(json.dumps(row) + "\n")

    def truncate(self, step: int) -> None:
        """Forget rows after ``step`` (a resumed run redoes them)."""
        self.rows = [r for r in self.rows if r["step"] <= step]
        self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))
        self._in_sync = True


def _stats(prefix: str, x: torch.Tensor) -> dict:
    x = x.float()
    if x.numel() == 0:
        return {}
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_std": float(x.std(unbiased=False)),
        f"{prefix}_min": float(x.min()),
        f"{prefix}_max": float(x.max()),
    }


# Update statistics a step reports only when it computed them (never a placeholder 0 or 1).
UPDATE_KEYS = (
    "kl",
    "clip_frac_low",
    "clip_frac_high",
    "ratio_min",
    "ratio_max",
    "entropy",
    "logprob_mismatch",
    "grad_norm",
)


def outcome_rates(records: list[Record]) -> dict:
    """``outcome_rate_<outcome>``: share of the step's verdicts of each kind (correct, wrong, no_answer,
    ambiguous, timeout, error, ...), over every record verified this step; verifiers that name no outcome
    contribute nothing."""
    named = [r.verdict_outcome for r in records if r.verdict_outcome]
    return {f"outcome_rate_{k}": named.count(k) / len(named) for k in sorted(set(named))}


def thinking_metrics(records: list[Record]) -> dict:
    """Budget forcing (sampling.max_thinking_tokens): the share of sampled completions whose end of thinking was
    forced (their forced tokens are the only mask-0 tokens of a record without tool calls)."""
    budgeted = [r for r in records if r.sampling.get("max_thinking_tokens")]
    if not budgeted:
        return {}
    forced = [r for r in budgeted if r.tool_calls is None and r.model_mask is not None and not all(r.model_mask)]
    return {"thinking_forced_rate": len(forced) / len(budgeted)}


def tool_metrics(records: list[Record]) -> dict:
    """Tool-integrated rollouts (``tool_*``), over every record sampled this step: calls per completion, the share of
    calls that failed and of each failure kind, the share of completion tokens that are tool output, and among the
    completions where a call failed, how many the verifier did not accept (a tool failure is counted apart from a
    wrong answer, never hidden in it).  Empty when no record ran tools."""
    with_tools = [r for r in records if r.tool_calls is not None]
    if not with_tools:
        return {}
    calls = [c for r in with_tools for c in r.tool_calls]
    failed = [r for r in with_tools if r.failed_tool_calls]
    total = sum(len(r.completion_ids) for r in with_tools)
    out = {
        "tool_calls_per_completion": len(calls) / len(with_tools),
        "tool_failure_rate": sum(c["status"] != "ok" for c in calls) / len(calls) if calls else 0.0,
        "tool_token_share": 1 - sum(r.model_tokens for r in with_tools) / max(total, 1),
        "tool_failed_completion_rate": len(failed) / len(with_tools),
    }
    for status in sorted({c["status"] for c in calls} - {"ok"}):
        out[f"tool_{status}_rate"] = sum(c["status"] == status for c in calls) / len(calls)
    if failed:
        out["tool_failed_not_correct_rate"] = sum(r.verdict_outcome != "correct" for r in failed) / len(failed)
    return out


def staleness(records: list[Record], version: int) -> dict:
    """Age of the learned-from records in policy versions (learner's version - the record's), for a policy source."""
    ages = [version - r.policy_version for r in records if r.policy_version >= 0]
    return {"staleness_mean": sum(ages) / len(ages), "staleness_max": max(ages)} if ages else {}


def step_metrics(
    step,
    records: list[Record],
    rewards,
    advantages,
    mask,
    update: dict,
    lr: float,
    times: dict,
    sampled: list[Record] | None = None,
) -> dict:
    """The metrics row of one step; ``records`` are the ones the update learned from, ``sampled``
    every record verified this step (defaults to ``records``).  A value that was not measured is
    left out of the row, never written as 0.  ``times["wall"]``, when given, is the step's wall time (sampling
    overlapped with the update: less than the sum of the stages)."""
    total_time = times["wall"] if "wall" in times else sum(times.values())
    row = {
        "step": step,
        "lr": lr,
        "time_generate_s": times.get("generate", 0.0),
        "time_verify_s": times.get("verify", 0.0),
        "time_update_s": times.get("update", 0.0),
        "time_step_s": total_time,
        **outcome_rates(sampled if sampled is not None else records),
        **tool_metrics(sampled if sampled is not None else records),
        **thinking_metrics(sampled if sampled is not None else records),
    }
    if not records:
        return {**row, **update}
    lengths = torch.tensor([len(r.completion_ids) for r in records], dtype=torch.float32)
    components: dict[str, list[float]] = {}
    for r in records:
        for k, v in r.reward_components.items():
            components.setdefault(k, []).append(v)
    tokens = float(lengths.sum())
    row.update(
        {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std(unbiased=False)),
            **{f"reward_{k}": sum(v) / len(v) for k, v in sorted(components.items())},
            **accuracy_metrics(records),
            "zero_variance_fraction": float(zero_variance_groups(rewards).float().mean()),
            **_stats("advantage", advantages[mask.bool()]),
            "completion_len_mean": float(lengths.mean()),
            "completion_len_max": float(lengths.max()),
            "truncation_rate": sum(r.truncated for r in records) / len(records),
            **{k: update.pop(k) for k in UPDATE_KEYS if k in update},
            "tokens": tokens,
            "tokens_per_s": tokens / max(total_time, 1e-9),
            "gen_tokens_per_s": tokens / max(times.get("generate", 0.0), 1e-9),
        }
    )
    row.update(update)  # estimator- and loss-specific extras (value_loss, dpo_accuracy, tis_weight, ...)
    return row


def judged_right(record: Record) -> float | None:
    """1/0 (or a rule's partial outcome) for a record a rule judged: its ``outcome`` component, else ``reward >= 1``;
    None for one only a reward model or a judge scored (a ``reward_model`` or ``judge`` component and no outcome:
    no rule says it is right)."""
    components = record.reward_components
    if "outcome" in components:
        return components["outcome"]
    if "reward_model" in components or "judge" in components:
        return None
    return float(record.reward >= 1.0)


def accuracy(records: list[Record]) -> float | None:
    """The mean of ``judged_right`` over the records a rule judged; None where none was."""
    judged = [x for x in map(judged_right, records) if x is not None]
    return sum(judged) / len(judged) if judged else None


def accuracy_metrics(records: list[Record]) -> dict:
    """``accuracy`` (see ``accuracy``), and with several data sources in the step each one's ``source_<kind>_records``,
    ``source_<kind>_reward_mean`` and ``source_<kind>_accuracy`` (kind ``task`` for rows without a data source)."""
    row = {}
    acc = accuracy(records)
    if acc is not None:
        row["accuracy"] = acc
    kinds = sorted({r.data_source for r in records})
    if len(kinds) > 1:
        for kind in kinds:
            mine = [r for r in records if r.data_source == kind]
            name = kind or "task"
            row[f"source_{name}_records"] = len(mine)
            row[f"source_{name}_reward_mean"] = sum(r.reward for r in mine) / len(mine)
            acc = accuracy(mine)
            if acc is not None:
                row[f"source_{name}_accuracy"] = acc
    return row
