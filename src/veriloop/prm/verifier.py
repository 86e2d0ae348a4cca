"""The learned verifier ``prm``: a process reward model saved by ``veriloop prm train``.

It joins ``veriloop.registry.VERIFIERS`` as the package's own ``veriloop.verifiers`` entry point
(pyproject.toml), so ``verifiers.get("prm", ...)`` finds it without the verifiers
package importing this higher layer.

``get("prm", path=DIR, aggregation="min"|"prod"|"last")``.  The verdict's ``steps`` holds
the step scores, ``score`` their aggregate.  A PRM reads the prompt too: pass ``prompts=`` to
``verify_batch``, or rely on the prompt template saved with the PRM (the arithmetic task's
prompt is its reference followed by ``?``).  The version is ``<name>@<digest of the weights>``,
so two differently trained PRMs never share a version.  Unlike the rule-based verifiers a PRM
is a model: deterministic on one machine, but its scores are estimates, not checks.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from veriloop.errors import InputError
from veriloop.prm.model import AGGREGATIONS, aggregate, load_prm
from veriloop.verifiers.base import Verdict, Verifier, VerifierError


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for name in ("prm_head.safetensors", "model.safetensors", "prm.json"):
        f = path / name
        if f.is_file():
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


class PRMVerifier(Verifier):
    def __init__(self, path: str = "", aggregation: str = "", batch_size: int = 64):
        if not path:
            raise InputError("the prm verifier needs path=<directory written by `veriloop prm train`>")
        try:
            self.prm = load_prm(path)
        except FileNotFoundError as e:
            raise VerifierError(str(e)) from None
        self.aggregation = aggregation or self.prm.meta.get("aggregation", "min")
        if self.aggregation not in AGGREGATIONS:
            raise InputError(f"prm aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        self.name = self.prm.meta.get("kind", "prm")
        self.version = _digest(Path(path))
        self.batch_size = batch_size

    def verify(self, completion: str, reference: str, prompt: str | None = None) -> Verdict:
        return self.verify_batch([completion], [reference], None if prompt is None else [prompt])[0]

    def verify_batch(self, completions: list[str], references: list[str], prompts: list[str] | None = None):
        if prompts is None:
            try:
                prompts = [self.prm.prompt_for(r) for r in references]
            except ValueError as e:
                raise VerifierError(f"{e}; pass prompts= to verify_batch") from None
        scores = self.prm.score(prompts, completions, self.batch_size)
        out = []
        for steps in scores:
            s = aggregate(steps, self.aggregation)
            comps = {"steps": float(len(steps)), "min": min(steps, default=0.0), "last": steps[-1] if steps else 0.0}
            out.append(Verdict(float(s), comps, self.tag, "" if steps else "no steps", "", tuple(steps)))
        return out
