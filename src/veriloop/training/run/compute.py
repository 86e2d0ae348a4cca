"""The compute ledger (seed 002 s.8, seed 000 s.7): what a run spent, so that "a bigger trained model" and "more
test-time search" are compared with both columns stated.

Training (``training_compute``, written to ``compute.json`` in the run directory and beside ``final/``'s model): the
tokens sampled and prefilled, the tokens the learner read, estimated FLOPs per part, and wall time per phase, from
the run's metrics rows.  The FLOPs are the usual dense-transformer estimate (Kaplan et al.): 2N per token for a
forward pass of an N-parameter model, 2N more for the gradient of the activations and 2 x (trainable parameters) for
the weights' gradient in a backward pass; attention's own FLOPs (a term in the sequence length) and padding are not
counted, so it is a floor of what the hardware did, and a tool's re-read context (one prefill per tool round) is
not in ``prefill_tokens``.  Parts:

* generation: ``2N x (sampled + prefilled tokens)``;
* update: ``(4N + 2 trainable) x update tokens x passes`` (``update.inner_updates``: each pass reads every row);
* reference: ``2N x update tokens`` when a reference model scores the batch (the KL, DPO);
* old log-probs: ``2N x update tokens`` with truncated importance sampling (``loss.tis_cap``);
* critic: ``(2 + 6 x passes) x N_critic x update tokens`` (its values at sampling time, then its passes);
* selection: ``2N x (sampled + prefilled tokens)`` of the samples that measured the pool's pass rates
  (``selection.filter``), with its wall time as the phase ``select``.

Test time (``test_time_compute``, in a search's ``compute.json``): per question and per strategy and budget, the
generated tokens, PRM and verifier calls, wall seconds and generation FLOPs, beside the training ledger of the
searched policy where veriloop trained it (its ``final/`` says so).
"""

from __future__ import annotations

import json
from pathlib import Path

PHASES = ("generate", "verify", "update")


def parameter_counts(model) -> tuple[int, int]:
    """(parameters, trainable parameters) of ``model``, each tensor once (tied embeddings counted once)."""
    seen, total, trainable = set(), 0, 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return total, trainable


def training_compute(
    rows: list[dict],
    *,
    params: int,
    trainable: int,
    passes: int,
    reference: bool,
    old_logprobs: bool = False,
    critic_params: int = 0,
) -> dict:
    """The training ledger of a run's metrics ``rows`` (see the module docstring for each part's formula)."""
    sampled = sum(r.get("sampled_tokens", 0) for r in rows)
    prefilled = sum(r.get("prefill_tokens", 0) for r in rows)
    update = sum(r.get("update_tokens", 0) for r in rows)
    flops = {
        "generation": 2 * params * (sampled + prefilled),
        "update": (4 * params + 2 * trainable) * update * passes,
        "reference": 2 * params * update if reference else 0,
        "old_logprobs": 2 * params * update if old_logprobs else 0,
        "critic": (2 + 6 * passes) * critic_params * update,
        "selection": 2
        * params
        * sum(r.get("selection_sampled_tokens", 0) + r.get("selection_prefill_tokens", 0) for r in rows),
    }
    flops = {k: v for k, v in flops.items() if v}
    wall = {phase: round(sum(r.get(f"time_{phase}_s", 0.0) for r in rows), 3) for phase in PHASES}
    if any("time_select_s" in r for r in rows):  # selection.filter: the pool's measurements
        wall["select"] = round(sum(r.get("time_select_s", 0.0) for r in rows), 3)
    return {
        "steps": len(rows),
        "parameters": params,
        "trainable_parameters": trainable,
        "completions_sampled": sum(r.get("sampled_records", 0) for r in rows),
        "tokens_sampled": sampled,
        "tokens_prefilled": prefilled,
        "completions_trained": sum(r.get("update_records", 0) for r in rows),
        "tokens_trained": update,
        **(
            {"tokens_sampled_for_selection": sum(r.get("selection_sampled_tokens", 0) for r in rows)}
            if any("selection_sampled_tokens" in r for r in rows)
            else {}
        ),
        "update_passes": passes,
        "flops": {**flops, "total": sum(flops.values())},
        "wall_seconds": {**wall, "steps": round(sum(r.get("time_step_s", 0.0) for r in rows), 3)},
    }


def test_time_compute(summary: dict, params: int) -> dict:
    """Per question, per strategy and budget of a search ``summary``: tokens, PRM and verifier calls, seconds, and
    the generation FLOPs ``2N x tokens`` (prompts and PRM passes not counted)."""
    out = {}
    for strategy, per in summary.get("strategies", {}).items():
        for budget, cell in per.items():
            tokens = cell.get("mean_tokens") or 0.0
            out.setdefault(strategy, {})[budget] = {
                "tokens": tokens,
                "prm_calls": cell.get("mean_prm_calls"),
                "verifier_calls": cell.get("mean_verifier_calls"),
                "seconds": cell.get("mean_seconds"),
                "generation_flops": 2 * params * tokens,
                "oracle": bool(cell.get("oracle")),
            }
    return out


def search_compute(policy_name: str, params: int, summary: dict) -> dict:
    """A search's ledger: test-time compute per question beside the searched policy's training compute (where
    veriloop trained it: read from its ``final/``; None, never 0, where not)."""
    return {
        "policy": policy_name,
        "parameters": params,
        "training": trained_by_veriloop(policy_name),
        "test_time_per_question": test_time_compute(summary, params),
        "questions": summary.get("problems"),
        "seconds": summary.get("seconds"),
    }


def trained_by_veriloop(model_dir: str) -> dict | None:
    """The training ledger a veriloop run left beside its model (``final/<made_by>.json``), or None."""
    path = Path(model_dir)
    if not path.is_dir():
        return None
    for made in sorted(path.glob("*.json")):
        try:
            data = json.loads(made.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "made_by" in data and "compute" in data:
            return data["compute"]
    return None


def pipeline_compute(stages: dict[str, dict]) -> dict:
    """A pipeline's ledger: each training stage's (its run directory's ``compute.json``), and their sums
    (``training``).  A stage that trains nothing (rejection sampling's own sampling) adds nothing here."""
    keys = ("completions_sampled", "tokens_sampled", "tokens_prefilled", "completions_trained", "tokens_trained")
    total = {k: sum(s.get(k, 0) for s in stages.values()) for k in keys}
    total["flops"] = {"total": sum(s.get("flops", {}).get("total", 0) for s in stages.values())}
    total["wall_seconds"] = {
        "steps": round(sum(s.get("wall_seconds", {}).get("steps", 0.0) for s in stages.values()), 3)
    }
    return {"training": total, "stages": stages}
