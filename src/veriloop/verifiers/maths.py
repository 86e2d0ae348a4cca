"""``gsm8k`` and ``math``: final-answer extraction, then equivalence under explicit options.

Outcomes (``Verdict.outcome``): ``correct`` (score 1), ``wrong``, ``no_answer``, ``ambiguous``,
``parse_error``, ``timeout`` (all score 0).  A reference with no usable answer raises
``VerifierError``: a broken gold answer is an error, never a reward.

Plain numbers are compared in-process (exact decimals); anything else goes to math-verify in
a ``WorkerPool`` with a hard time limit per comparison, so grading works from any thread and a
pathological expression costs at most ``timeout`` seconds.
"""

from __future__ import annotations

import threading

from veriloop.verifiers.answers import DEFAULT_POLICIES, MARKER_POLICIES, POLICIES, clean_value, extract_answer
from veriloop.verifiers.base import Verdict, Verifier, VerifierError, register
from veriloop.verifiers.mathequiv import MathOptions, compare, plain_number
from veriloop.verifiers.pool import WorkerPool


class MathAnswer(Verifier):
    """Extract the completion's one final answer and compare it with the reference's."""

    name, version = "math", "1"
    reference_policies: tuple[str, ...] = ("boxed", "gsm8k", "answer", "答案", "the-answer-is")

    def __init__(self, policies: tuple[str, ...] | list[str] | str = DEFAULT_POLICIES, percent: str = "number",
                 unreduced_fractions: bool = True, rel_tol: float = 0.0, float_rounding: int = 6,
                 timeout: float = 5.0, workers: int = 0):  # fmt: skip
        if isinstance(policies, str):
            policies = tuple(p.strip() for p in policies.split(",") if p.strip())
        unknown = [p for p in policies if p not in POLICIES]
        if unknown or not policies:
            raise ValueError(f"unknown answer policies {unknown}; known: {list(POLICIES)}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.policies = tuple(policies)
        self.options = MathOptions(percent, unreduced_fractions, rel_tol, float_rounding)
        self.timeout, self.workers = timeout, workers
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()

    def reference_answer(self, reference: str) -> str:
        """The gold answer: a marked final answer (``#### N``, ``\\boxed{}``, ...) or the whole string."""
        found = extract_answer(reference, tuple(p for p in self.reference_policies if p in MARKER_POLICIES))
        if found.status == "ambiguous":
            raise VerifierError(f"reference names several answers {list(found.candidates)}: {reference[:80]!r}")
        if found.status == "ok":
            value = found.answer
        else:  # a bare reference: the whole (last line of the) string
            value = clean_value(extract_answer(reference, ("last-line",)).answer or "")
        if not value:
            raise VerifierError(f"reference has no answer: {reference[:80]!r}")
        return value

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        golds = [self.reference_answer(r) for r in references]
        verdicts: list[Verdict | None] = [None] * len(completions)
        slow: list[int] = []
        preds: list[str] = [""] * len(completions)
        for i, c in enumerate(completions):
            found = extract_answer(c, self.policies)
            if found.status == "none":
                verdicts[i] = self._outcome("no_answer", "no final answer found")
            elif found.status == "ambiguous":
                verdicts[i] = self._outcome("ambiguous", f"several final answers: {list(found.candidates)}")
            else:
                preds[i] = found.answer or ""
                if plain_number(golds[i]) is not None and plain_number(preds[i]) is not None:
                    verdicts[i] = self._outcome(*compare(golds[i], preds[i], self.options))
                else:
                    slow.append(i)
        if slow:
            for i, res in zip(slow, self._map([(golds[i], preds[i], self.options) for i in slow])):
                if res.status == "timeout":
                    verdicts[i] = self._outcome("timeout", f"equivalence check took over {self.timeout:g} s")
                elif res.status == "error":
                    verdicts[i] = self._outcome("parse_error", f"equivalence check failed: {res.error.splitlines()[0]}")
                else:
                    outcome, detail = res.value
                    if outcome == "gold_error":
                        raise VerifierError(detail)
                    verdicts[i] = self._outcome(outcome, detail)
        return verdicts  # type: ignore[return-value]

    def _map(self, items):
        with self._lock:  # one batch at a time through this verifier's pool
            if self._pool is None:
                self._pool = WorkerPool(self.workers)
            return self._pool.map(compare, items, self.timeout)

    def _outcome(self, outcome: str, detail: str) -> Verdict:
        score = 1.0 if outcome == "correct" else 0.0
        return Verdict(score, {"outcome": score}, self.tag, detail, outcome)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __getstate__(self):  # a verifier sent to another process starts its own pool there
        state = dict(self.__dict__)
        state["_pool"], state["_lock"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


class GSM8K(MathAnswer):
    """GSM8K: references as ``... #### N`` (the dataset's form) or a bare number."""

    name, version = "gsm8k", "1"
    reference_policies = ("gsm8k",)


register("math")(MathAnswer)
register("gsm8k")(GSM8K)
