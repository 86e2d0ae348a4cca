"""The four-candidate experiment of the verifiable-rewards chapter, through veriloop's public API.

One problem, (2+3)*4, and a policy that is a softmax over four complete answers:

    0  2+3=5;5*4=20;答案=20   right answer, right steps
    1  2+3=5;5+4=9;答案=9     wrong answer
    2  2+3=6;6*4=20;答案=20   right answer, wrong steps (a false step and a lucky product)
    3  答案=20或9             two answers: ambiguous, rejected

The same ``Trainer`` that trains language models trains it twice from a uniform start, once
with the outcome verifier and once with the process verifier (groups of 8, 160 rounds, 3
updates per group, exact KL to the uniform start with beta 0.05, SGD lr 0.15).  Then:

* filtered distillation: the outcome-trained policy is the teacher; its samples are filtered by
  the process verifier and a fresh uniform student imitates what is kept (``--algo distill``),
  twice: online (32 new teacher samples every step) and on a fixed set, as the chapter does it
  (32 samples drawn once, ``--rollout.teacher_set fixed``, 100 passes over them);
* pass@n of uniform sampling: 1 - (1 - p)^n for the outcome and the process checks.

Expected (qualitative, the chapter's lesson): the outcome reward leaves a large share on
candidate 2 (right answer, wrong steps); the process reward concentrates on candidate 0.

    python examples/four_candidates.py          # a readable report
    python examples/four_candidates.py --json   # {"outcome": [p0..p3], "process": [p0..p3], ...}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from veriloop.algorithms import group_advantages
from veriloop.config import build_config
from veriloop.models.candidates import CandidatePolicy
from veriloop.rollout.records import RecordStore
from veriloop.tasks.fixed import FixedTask
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer
from veriloop.verifiers import get as get_verifier

CANDIDATES = ["2+3=5;5*4=20;答案=20", "2+3=5;5+4=9;答案=9", "2+3=6;6*4=20;答案=20", "答案=20或9"]
PROBLEM = "(2+3)*4"
VERIFIERS = {"outcome": "arithmetic-outcome", "process": "arithmetic-process"}


def verifier(kind: str):
    return get_verifier(VERIFIERS[kind], answer_prefix="答案")


def candidate_rewards(kind: str) -> list[float]:
    v = verifier(kind)
    return [v.verify(c, PROBLEM).score for c in CANDIDATES]


def train_rl(kind: str, run_dir: Path, rounds: int = 160, seed: int = 2026) -> tuple[CandidatePolicy, int]:
    """GRPO on the candidate policy with the chapter's settings: (the trained policy, how many of its groups
    had all-equal rewards, i.e. advantages of exactly 0, from the trainer's own metrics)."""
    settings = {
        "run_dir": str(run_dir),
        "seed": seed,
        "steps": rounds,
        "save_rollouts": False,
        "rollout.prompts_per_step": 1,
        "rollout.group_size": 8,
        "advantage.estimator": "grpo",
        "advantage.std": "population",
        "advantage.eps": 1e-8,
        "loss.policy_loss": "clip",
        "loss.clip_eps_low": 0.2,
        "loss.clip_eps_high": 0.2,
        "kl.beta": 0.05,
        "kl.estimator": "exact",
        "kl.placement": "loss",
        "update.inner_updates": 3,
        "update.skip_zero_advantage": False,
        "optim.name": "sgd",
        "optim.lr": 0.15,
        "optim.grad_clip": 0.0,
        "sampling.temperature": 1.0,
    }
    cfg = build_config(TrainConfig, {}, settings)
    policy = CandidatePolicy(CANDIDATES)
    trainer = Trainer(cfg, progress=False, policy=policy, task=FixedTask(PROBLEM, PROBLEM), verifier=verifier(kind))
    trainer.train()
    # one group per round: the share of all-equal groups of a step is 0 or 1
    equal_groups = round(sum(row["zero_variance_fraction"] for row in trainer.metrics.rows))
    return policy, equal_groups


def distill(
    teacher_dir: Path, run_dir: Path, samples: int = 32, steps: int = 100, seed: int = 2027, teacher_set="online"
):
    """Teacher samples, the process verifier filters, a uniform student imitates (``--algo distill``); with
    ``teacher_set="fixed"`` the samples are drawn once and every step is a pass over them."""
    settings = {
        "rollout.teacher_set": teacher_set,
        "run_dir": str(run_dir),
        "seed": seed,
        "algo": "distill",
        "steps": steps,
        "save_rollouts": True,
        "rollout.teacher": str(teacher_dir),
        "rollout.prompts_per_step": 1,
        "rollout.group_size": samples,
        "optim.name": "sgd",
        "optim.lr": 0.2,
        "optim.grad_clip": 0.0,
        "sampling.temperature": 1.0,
    }
    cfg = build_config(TrainConfig, {}, settings)
    student = CandidatePolicy(CANDIDATES)
    task = FixedTask(PROBLEM, PROBLEM)
    Trainer(cfg, progress=False, policy=student, task=task, verifier=verifier("process")).train()
    # The trainer's own first batch of teacher samples, counted by each check from its records: the process
    # verifier (the filter) records the outcome check as a component of the same verdict.
    first = RecordStore(run_dir / "rollouts").read(1)
    kept = {check: int(sum(r.reward_components[check] for r in first)) for check in ("outcome", "process")}
    return student, kept


def pass_at_n(p: float, n: int) -> float:
    """P(at least one of n independent samples passes) = 1 - (1 - p)^n."""
    return 1.0 - (1.0 - p) ** n


def run(rounds: int = 160) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        out = {"rewards": {kind: candidate_rewards(kind) for kind in VERIFIERS}}
        out["equal_groups"] = {"rounds": rounds}
        for kind in VERIFIERS:
            policy, out["equal_groups"][kind] = train_rl(kind, tmp / kind, rounds)
            out[kind] = [round(float(p), 4) for p in policy.probs()]
        # an all-equal group, e.g. rewards [1, 1, 1, 1]: every advantage is exactly 0 (no signal, no division by 0)
        out["equal_group_advantages"] = group_advantages(torch.ones(1, 4, dtype=torch.float64)).view(-1).tolist()
        student, kept = distill(tmp / "outcome" / "final", tmp / "distill")
        student_probs = [round(float(p), 4) for p in student.probs()]
        out["distill"] = {"teacher_samples": 32, "passed": kept, "student": student_probs}
        student, kept = distill(tmp / "outcome" / "final", tmp / "distill-fixed", teacher_set="fixed")
        rows = [json.loads(line) for line in (tmp / "distill-fixed" / "metrics.jsonl").read_text().splitlines()]
        out["distill_fixed"] = {
            "set": len(RecordStore(tmp / "distill-fixed" / "rollouts").read(1)),
            "passed": kept,
            "sampled_per_step": [row["sampled_records"] for row in rows],
            "accepted_per_step": sorted({row["teacher_set_accepted"] for row in rows}),
            "student": [round(float(p), 4) for p in student.probs()],
        }
    uniform = 1.0 / len(CANDIDATES)
    out["pass_at_n_uniform"] = {
        kind: {str(n): round(pass_at_n(uniform * sum(out["rewards"][kind]), n), 4) for n in (1, 4, 8)}
        for kind in VERIFIERS
    }
    return out


def report(out: dict) -> str:
    lines = ["candidate                   outcome  process"]
    for k, c in enumerate(CANDIDATES):
        lines.append(f"{k}  {c:<24}{out['rewards']['outcome'][k]:>7.0f}{out['rewards']['process'][k]:>9.0f}")
    lines.append("")
    for kind in VERIFIERS:
        lines.append(f"trained with the {kind} reward: " + ", ".join(f"{p:.3f}" for p in out[kind]))
    eq = out["equal_groups"]
    lines.append(
        f"groups with all-equal rewards in {eq['rounds']} rounds: outcome {eq['outcome']}, "
        f"process {eq['process']}; advantages of [1, 1, 1, 1]: "
        + ", ".join(f"{a:.1f}" for a in out["equal_group_advantages"])
    )
    d = out["distill"]
    lines += [
        "",
        f"filtered distillation: the trainer's first batch of {d['teacher_samples']} samples of the outcome-trained "
        f"policy passes outcome "
        f"{d['passed']['outcome']}, process {d['passed']['process']}; student after imitating the process-passed "
        f"ones: p(candidate 0) = {d['student'][0]:.3f}",
        f"the same on a fixed set ({out['distill_fixed']['set']} samples drawn once, process passed "
        f"{out['distill_fixed']['passed']['process']}, 100 passes): p(candidate 0) = "
        f"{out['distill_fixed']['student'][0]:.3f}",
        "",
        "pass@n of uniform sampling (1 - (1-p)^n):",
    ]
    for n in ("1", "4", "8"):
        lines.append(
            f"  n={n}: outcome {out['pass_at_n_uniform']['outcome'][n]:.3f}, "
            f"process {out['pass_at_n_uniform']['process'][n]:.3f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print a machine-readable result")
    ap.add_argument("--rounds", type=int, default=160, help="RL rounds (groups) per run")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = run(args.rounds)
    print(json.dumps(out, ensure_ascii=False) if args.json else report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
