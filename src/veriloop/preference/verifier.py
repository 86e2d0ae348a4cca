"""The reward source ``preference``: a Bradley-Terry reward model (``veriloop rm train``) read as a verifier.

``get("preference", path=DIR, audit=NAME)``, both required (``unaudited=True`` instead of an audit: a kind of
data without rules, as ``reward_sources`` routes one; its records carry no outcome and no accuracy).
The verdict's score is the reward model's ``r(x, y)``:
unbounded, and meaningful only against other completions of the same prompt (what a group-relative estimator or a
best-worst DPO pair reads).  ``audit`` names a rule verifier run beside it and recorded, never rewarded: its
components (``outcome``, ``format``) and its outcome kind go on the record, so the run's accuracy is the rules', and
a policy that learns to please the reward model without being right shows as reward up, accuracy flat or down (as a
PRM-only run does).  The reward model reads the prompt: it declares ``reads_prompts``, and the trainer passes each
record's prompt.  The version is ``bradley-terry@<digest of the weights>``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from veriloop.errors import InputError
from veriloop.preference.model import load_reward_model
from veriloop.verifiers.base import Verdict, Verifier, is_correct


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for name in ("rm_head.safetensors", "model.safetensors", "rm.json"):
        f = path / name
        if f.is_file():
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


class PreferenceVerifier(Verifier):
    reads_prompts = True  # r(x, y): the trainer passes prompts= to verify_batch

    def __init__(self, path: str = "", audit: str = "", batch_size: int = 64, unaudited: bool = False):
        if not path:
            raise InputError("the preference verifier needs path=<directory written by `veriloop rm train`>")
        self.rm = load_reward_model(path)
        self.name = self.rm.meta.get("kind", "bradley-terry")
        self.version = _digest(Path(path))
        self.batch_size = batch_size
        if not audit and not unaudited:
            # without a rule beside it, a run's accuracy would be read off r >= 1: a number that means nothing
            raise InputError("the preference verifier needs audit=<rule verifier recorded beside the reward>")
        from veriloop.verifiers import get as get_verifier

        # unaudited: a kind of data without rules (reward_sources' reward_model route); its records have no
        # outcome component, and a step's accuracy leaves them out
        self.audit = get_verifier(audit) if audit else None

    def verify(self, completion: str, reference: str, prompt: str | None = None) -> Verdict:
        return self.verify_batch([completion], [reference], None if prompt is None else [prompt])[0]

    def verify_batch(self, completions: list[str], references: list[str], prompts: list[str] | None = None):
        if prompts is None:
            raise InputError("a reward model scores r(prompt, completion): pass prompts= to verify_batch")
        rewards = self.rm.score(prompts, completions, self.batch_size)
        if self.audit is None:
            return [
                Verdict(float(r), {"reward_model": float(r)}, self.tag, "reward from the reward model") for r in rewards
            ]
        out = []
        for r, a in zip(rewards, self.audit.verify_batch(completions, references)):
            # the rule's components as they are, its outcome always there (the run's accuracy reads it)
            components = {**a.components, "outcome": a.components.get("outcome", float(is_correct(a)))}
            components["reward_model"] = float(r)
            details = f"reward from the reward model; audit {a.version}" + (f": {a.details}" if a.details else "")
            out.append(Verdict(float(r), components, self.tag, details, a.outcome))
        return out
