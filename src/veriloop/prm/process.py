"""Process supervision during training: the PRM's step rewards, and its iterative refresh.

``ProcessSupervisor`` is the PRM role of the loop.  ``step_rewards`` scores each record's
steps and places each score on the completion token that closes the step (what estimator
``process`` reads).  ``observe`` keeps each step's samples; every ``process.refresh_every``
steps it labels the current policy's recent solutions (the policy completes the prefixes
too), refits the PRM on them plus a replayed share of older labels, and saves the PRM under
``prm/step-N`` with the labels in ``prm/labels-step-N.jsonl``; on resume the latest ones saved
at or before the checkpoint are read back.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from veriloop.io import atomic_write_jsonl, read_jsonl, step_name, step_of
from veriloop.prm.label import label_solutions
from veriloop.prm.model import load_prm
from veriloop.prm.steps import positions_in_ids, split_steps
from veriloop.prm.train import fit_prm, load_labels
from veriloop.seeding import derive_seed
from veriloop.tasks.base import Problem
from veriloop.verifiers import get as get_verifier


class ProcessSupervisor:
    def __init__(self, pc, *, seed: int, run_dir: str | Path, task, policy, sampling, store, step: int = 0):
        """``pc``: the ``process`` config section; ``step``: the checkpoint resumed from (0: a new run)."""
        self.pc, self.seed, self.where = pc, seed, Path(run_dir) / "prm"
        self.run_dir, self.task, self.policy, self.sampling = str(run_dir), task, policy, sampling
        saved = [p for p in self.where.glob("step-*") if p.is_dir() and 0 < (step_of(p.name) or 0) <= step]
        self.prm = load_prm(max(saved, key=lambda p: step_of(p.name)) if saved else pc.prm)
        self.label_pool = load_labels(pc.replay_data) if pc.replay_data else []
        for f in sorted(self.where.glob("labels-step-*.jsonl")) if step else []:
            if (step_of(f.name, "labels-step-", ".jsonl") or 0) <= step:
                self.label_pool += list(read_jsonl(f))
        self.recent = []
        # the last step_rewards call's scores: id(record) -> [[token position, step score], ...] (the run browser's)
        self.step_scores: dict[int, list[list[float]]] = {}
        if step and pc.refresh_every:  # the samples since the last refresh wait for the next one
            last = step - step % pc.refresh_every
            self.recent = [store.read(s) for s in store.steps() if last < s <= step]

    def step_rewards(self, records, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """PRM score of each step on the completion token that closes it ``[N, T]``, and where steps end ``[N, T]``."""
        N, T = mask.shape
        scores = self.prm.score([r.prompt for r in records], [r.completion for r in records])
        rewards = torch.zeros((N, T), dtype=torch.float64)
        ends = torch.zeros((N, T), dtype=torch.bool)
        self.step_scores = {}
        for i, (r, sc) in enumerate(zip(records, scores)):
            steps = split_steps(r.completion, self.prm.splitter)
            placed = self.step_scores.setdefault(id(r), [])
            for pos, value in zip(positions_in_ids(self.policy.tokenizer, r.completion_ids, r.completion, steps), sc):
                if pos < T:
                    rewards[i, pos], ends[i, pos] = value, True
                    placed.append([pos, round(float(value), 5)])
            r.reward_components["prm_min"] = min(sc, default=0.0)
            r.reward_components["prm_steps"] = float(len(sc))
        return rewards, ends

    def observe(self, step: int, sampled: list, policy_version: int) -> dict:
        """Keep this step's samples; refresh the PRM when one is due. Returns the refresh's statistics."""
        if not self.pc.refresh_every:
            return {}
        self.recent.append(sampled)
        return self.refresh(step, policy_version) if step % self.pc.refresh_every == 0 else {}

    def refresh(self, step: int, policy_version: int) -> dict:
        pc = self.pc
        recent = [r for batch in self.recent for r in batch if r.finish_reason == "eos"][-pc.refresh_solutions :]
        self.recent = []
        if not recent:
            return {"prm_refresh_solutions": 0}
        solutions = [(Problem(r.problem_id, r.prompt, r.reference), r.completion) for r in recent]
        gen = torch.Generator().manual_seed(derive_seed(self.seed, step, "prm-refresh"))
        provenance = {
            "policy": f"{self.run_dir}@version{policy_version}",
            "completer": "same policy",
            "task": self.task.name,
            "step": step,
            "prompt_template": self.prm.prompt_template,
        }
        rows = label_solutions(
            solutions,
            self.policy,
            get_verifier(self.task.default_verifier),
            pc.refresh_completions,
            self.sampling,
            gen,
            self.prm.splitter,
            provenance,
        )
        n_replay = round(len(rows) * pc.refresh_replay / (1 - pc.refresh_replay))  # replay = this share of the mix
        rng = random.Random(derive_seed(self.seed, step, "prm-replay"))
        replay = rng.sample(self.label_pool, min(n_replay, len(self.label_pool)))
        meta = self.prm.meta  # refit the way the PRM was trained
        losses = fit_prm(
            self.prm,
            rows + replay,
            meta.get("labels", "hard"),
            meta.get("loss", "bce"),
            pc.refresh_epochs,
            32,
            pc.refresh_lr,
            derive_seed(self.seed, step, "prm-order"),
            cumulative=meta.get("cumulative", False),
        )
        self.label_pool += rows
        atomic_write_jsonl(self.where / step_name(step, "labels-step-", ".jsonl"), rows)
        self.prm.save(
            self.where / step_name(step),
            {"refreshed_at_step": step, "refresh_rows": len(rows), "replayed_rows": len(replay)},
        )
        return {
            "prm_refresh_solutions": len(rows),
            "prm_refresh_replayed": len(replay),
            "prm_refresh_loss": sum(losses) / max(len(losses), 1),
        }
