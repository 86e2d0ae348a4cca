"""The reward source ``judge``: a model-based judge (``judge/model.py``) read as a verifier.

``get("judge", path=DIR, audit=NAME)`` (``unaudited=True`` instead of an audit: a kind of data without rules, as
``reward_sources`` routes one).  The score is 1 for the judge's ``correct`` and 0 otherwise; the judge's verdict is
in the components: ``judge`` (1/0), ``judge_refused``, ``judge_unparseable`` (1 where the judge gave no verdict) and
``judge_cut`` (1 where the response was cut to fit the judge's context), so every step's metrics count them
(``reward_judge_refused``...).  ``on_no_verdict`` says what a refusal or an unparseable output is worth:
``zero`` (a reward of 0, named in the components and the details, never silent) or ``error`` (the run stops, naming
the completion and the judge's output).

``audit`` names a rule verifier run beside it and recorded, never rewarded: its components (``outcome``,
``format``...) and its outcome kind go on the record, so the run's accuracy is the rule's, and two components
compare the two: ``judge_false_accept`` (the judge says correct, the rule does not) and ``judge_false_reject``.  A
policy that learns to please the judge without being right shows as ``reward_judge_false_accept`` rising.
Unaudited, the outcome is the judge's own: ``correct``, ``wrong``, ``refused`` or ``unparseable``.
The version is ``judge@<digest of the weights, the rubric, max_new_tokens and the grammar's version>``.
"""

from __future__ import annotations

from veriloop.errors import InputError
from veriloop.judge.model import load_judge
from veriloop.verifiers.base import Verdict, Verifier, VerifierError, is_correct

NO_VERDICT = ("zero", "error")
OUTCOMES = {"correct": "correct", "incorrect": "wrong", "refused": "refused", "unparseable": "unparseable"}


class JudgeVerifier(Verifier):
    name = "judge"
    reads_prompts = True  # the rubric's {question}: the trainer passes prompts= to verify_batch

    def __init__(
        self,
        path: str = "",
        audit: str = "",
        unaudited: bool = False,
        on_no_verdict: str = "zero",
        rubric: str = "",
        max_new_tokens: int = 0,
        batch_size: int = 64,
    ):
        if on_no_verdict not in NO_VERDICT:
            raise InputError(f"judge: on_no_verdict must be one of {NO_VERDICT}, got {on_no_verdict!r}")
        if not audit and not unaudited:
            # without a rule beside it, a run's accuracy would be the judge's own opinion of itself
            raise InputError("the judge verifier needs audit=<rule verifier recorded beside the verdict>")
        self.judge = load_judge(path, rubric, max_new_tokens)
        self.on_no_verdict = on_no_verdict
        self.batch_size = batch_size
        self.version = self.judge.digest(path if not path.startswith("builtin:") else None)
        from veriloop.verifiers import get as get_verifier

        self.audit = get_verifier(audit) if audit else None

    def verify(self, completion: str, reference: str, prompt: str | None = None) -> Verdict:
        return self.verify_batch([completion], [reference], None if prompt is None else [prompt])[0]

    def verify_batch(self, completions: list[str], references: list[str], prompts: list[str] | None = None):
        if prompts is None:
            raise InputError("a judge reads the question: pass prompts= to verify_batch")
        readings = self.judge.read(prompts, completions, references, self.batch_size)
        if self.on_no_verdict == "error":
            for c, x in zip(completions, readings):
                if x.verdict in ("refused", "unparseable"):
                    raise VerifierError(
                        f"judge {self.tag} gave no verdict ({x.verdict}: {x.reason}) on the completion {c[:200]!r}; "
                        f"its output: {x.raw[:200]!r} (on_no_verdict=zero rewards it 0 and counts it instead)"
                    )
        rules = self.audit.verify_batch(completions, references) if self.audit is not None else [None] * len(readings)
        return [self._verdict_of(x, a) for x, a in zip(readings, rules)]

    def _verdict_of(self, x, rule: Verdict | None) -> Verdict:
        said = 1.0 if x.verdict == "correct" else 0.0
        components = {
            "judge": said,
            "judge_refused": float(x.verdict == "refused"),
            "judge_unparseable": float(x.verdict == "unparseable"),
            "judge_cut": float(x.cut > 0),
        }
        details = f"judge: {x.verdict}" + (f" ({x.reason})" if x.reason else "")
        if x.cut:
            details += f"; the response's first {x.cut} tokens were cut to fit the judge's context"
        if rule is None:
            return Verdict(said, components, self.tag, details, OUTCOMES[x.verdict])
        right = rule.components.get("outcome", float(is_correct(rule)))
        components = {**rule.components, "outcome": right, **components}
        components["judge_false_accept"] = float(said == 1.0 and right < 1.0)
        components["judge_false_reject"] = float(x.verdict == "incorrect" and right >= 1.0)
        details += f"; audit {rule.version}" + (f": {rule.details}" if rule.details else "")
        return Verdict(said, components, self.tag, details, rule.outcome)
