"""``rollouts/tokens/step-N.jsonl.gz``: what the update of step N computed for each token it learned from.

A record holds what was sampled and how it was judged; what the learner made of it lives here, one row per
record of the update, for the run browser to colour tokens by:

* ``advantage``: the gradient coefficient of each token (one number when every token of the row has the same,
  as in GRPO; a list per token for GAE or process rewards);
* ``learner_logprob``: the learner's log-prob of each sampled token before the step's first optimizer step
  (its difference from the record's ``behavior_logprobs`` is the sampler/learner mismatch);
* ``ratio``: pi_theta / pi_behavior (or / pi_old with truncated IS) at the last pass that read the token;
* ``prm_steps``: where a PRM scored the completion, ``[token position closing the step, score]`` per step.

Rows are keyed by ``record_key`` (group and sampling seed), so a record learned a step after it was sampled
(asynchronous rollouts) still finds its values.  Rows the update left out (a zero-advantage group skipped)
have the advantage only.
"""

from __future__ import annotations

from pathlib import Path

from veriloop.io import atomic_write_jsonl, read_jsonl, step_name, steps_in

TOKENS_DIR = "tokens"


def record_key(record, position: int = 0) -> str:
    """The record's name across files: its group and its row seed (its place in the group without one)."""
    seed = record.sampling.get("seed") if isinstance(record.sampling, dict) else None
    return f"{record.group_id}#{seed if seed is not None else f'p{position}'}"


def _advantage(values: list[float]) -> float | list[float]:
    first = values[0] if values else 0.0
    return round(first, 5) if all(v == first for v in values) else [round(v, 5) for v in values]


def token_value_rows(
    records, advantages, mask, learned, token_values: dict, prm_steps: dict | None = None
) -> list[dict]:
    """One row per record of the step's signal: ``records`` in the signal's order (``advantages``/``mask``
    ``[N, T]``), ``learned`` the records the update read (the learning batch's rows, in order), ``token_values``
    the learner's ``{name: {row: [value, ...]}}``, ``prm_steps`` the PRM's ``{id(record): [[position, score]]}``."""
    rows, place = [], {id(r): k for k, r in enumerate(learned)}
    lengths = mask.sum(dim=1).long().tolist()
    for i, (r, adv, n) in enumerate(zip(records, advantages.tolist(), lengths)):
        row = {"key": record_key(r, i), "problem_id": r.problem_id, "advantage": _advantage(adv[: max(n, 1)])}
        k = place.get(id(r))
        for name, by_row in token_values.items():
            if k is not None and k in by_row:
                row[name] = by_row[k]
        if prm_steps and id(r) in prm_steps:
            row["prm_steps"] = prm_steps[id(r)]
        rows.append(row)
    return rows


class TokenValueStore:
    def __init__(self, rollouts_root: str | Path):
        self.root = Path(rollouts_root) / TOKENS_DIR

    def path(self, step: int) -> Path:
        return self.root / step_name(step, suffix=".jsonl.gz")

    def write(self, step: int, rows: list[dict]) -> None:
        atomic_write_jsonl(self.path(step), rows, compress=True)

    def read(self, step: int) -> dict[str, dict]:
        path = self.path(step)
        return {row["key"]: row for row in read_jsonl(path)} if path.exists() else {}

    def remove_after(self, step: int) -> None:
        for s, path in steps_in(self.root, suffix=".jsonl.gz") if self.root.is_dir() else []:
            if s > step:
                path.unlink()
