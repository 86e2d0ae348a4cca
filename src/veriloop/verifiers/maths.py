"""``gsm8k`` and ``math``: final-answer extraction, then equivalence under explicit options.

Outcomes (``Verdict.outcome``): ``correct`` (score 1), ``wrong``, ``no_answer``, ``ambiguous``,
``parse_error`` (the prediction does not parse), ``timeout``, ``error`` (all score 0).  ``error``
means the check itself failed (its worker process crashed or was killed, or the comparison
raised): no judgement was made, so a trainer should drop the row rather than learn from its 0.
A reference with no usable answer raises ``VerifierError``, and a worker pool that cannot start
or keep its workers alive raises ``WorkerPoolError``: errors, never rewards.

``math`` reads the completion with ``answers.extract_answer`` (its rules against negated,
hedged, conditional, retracted and revised answers, the polarity of each statement's sentence and
the document's last assertion decide; docs/answer-reading.md) on a copy whose pure maths is masked
(``mask_maths``: the numbers inside one tuple are not several answers), then hands math-verify
each stated answer as written (``maths_form``: ``x + y = 1`` is not cut to ``1``), judged by value
(``mathequiv.judge``).  An unmarked last line that is a sentence names its last delimited maths
(not a plain number: that is prose); a display block (``\\[ ... \\]``, ``$$ ... $$``) that ends the
text is the last line.  The reference is read whole by math-verify (its box, its final answer;
several boxes are one set), or the value after ``####``.  Agreement with math-verify's own tests
is measured in ``mathverify_suite``.  ``gsm8k`` compares one cleaned answer string.

Plain numbers are compared in-process (exact decimals); anything else goes to math-verify in
a ``WorkerPool`` with a hard time limit per comparison, so grading works from any thread and a
pathological expression costs at most ``timeout`` seconds.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from veriloop.errors import InputError
from veriloop.verifiers.answer_values import is_clean
from veriloop.verifiers.answers import (
    DEFAULT_POLICIES,
    MARKER_POLICIES,
    POLICIES,
    clean_value,
    extract_answer,
    normalize_text,
)
from veriloop.verifiers.base import Verdict, Verifier, VerifierError
from veriloop.verifiers.mathequiv import MathOptions, compare, compare_plain, judge, plain_number
from veriloop.verifiers.maths_text import (  # noqa: F401  (LAST_MATHS, mask_maths: re-exported)
    LAST_MATHS,
    delimited_maths,
    last_block,
    mark_currency,
    mask_maths,
    maths_form,
    unmask,
)
from veriloop.verifiers.pool import WorkerPool
from veriloop.verifiers.reply import reply

_GOLD = re.compile(r"(?s)(?:.*\n)?[ \t]*####[ \t]*([^\n]+?)\s*")  # a GSM8K gold solution's last line


def _call(fn: Callable, args: tuple):
    """Run in a pool worker: ``fn(*args)`` (the pool calls one function; this one dispatches)."""
    return fn(*args)


def _raw(item) -> str:
    return item[0] if isinstance(item, tuple) else item  # a policy finds (value, start, end) or a value


class MathAnswer(Verifier):
    """Extract the completion's one final answer and compare it with the reference's."""

    name, version = "math", "5"  # 5: round 3 (answer-reading.md); 4: real models' final-answer forms
    reference_policies: tuple[str, ...] = ("boxed", "gsm8k", "answer", "答案", "the-answer-is")
    read_spans = True  # math: values judged by math-verify as stated; False (gsm8k): one cleaned answer string

    def __init__(
        self,
        policies: tuple[str, ...] | list[str] | str = DEFAULT_POLICIES,
        percent: str = "number",
        unreduced_fractions: bool = True,
        rel_tol: float = 0.0,
        float_rounding: int = 6,
        timeout: float = 5.0,
        workers: int = 0,
    ):
        if isinstance(policies, str):
            policies = tuple(p.strip() for p in policies.split(",") if p.strip())
        unknown = [p for p in policies if p not in POLICIES]
        if unknown or not policies:
            raise InputError(f"unknown answer policies {unknown}; known: {list(POLICIES)}")
        if timeout <= 0:
            raise InputError(f"timeout must be > 0 seconds, got {timeout}")
        self.policies = tuple(policies)
        self.options = MathOptions(percent, unreduced_fractions, rel_tol, float_rounding)
        self.timeout, self.workers = timeout, workers
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()

    def reference_answer(self, reference: str) -> str:
        """The gold answer: a marked final answer (``#### N``, ``\\boxed{}``, ...) or the whole string."""
        gold = _GOLD.fullmatch(reference)  # GSM8K's own form, one "#### N" ending it: no sentence to read
        if gold and reference.count("####") == 1 and is_clean(clean_value(gold[1]), "number"):
            return clean_value(gold[1])
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

    def reference_text(self, reference: str) -> str:
        """What math-verify reads as the gold: the value after ``####`` if any, else the whole reference
        (math-verify finds its boxed or final answer; several boxes are one set)."""
        marked = [clean_value(_raw(v)) for v in POLICIES["gsm8k"](normalize_text(reference)) if _raw(v).strip()]
        if marked:
            return marked[-1]
        if not reference.strip():
            raise VerifierError(f"reference has no answer: {reference[:80]!r}")
        return reference.strip()

    def verify(self, completion: str, reference: str) -> Verdict:
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: list[str], references: list[str]) -> list[Verdict]:
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        verdicts: list[Verdict | None] = [None] * len(completions)
        jobs: list[tuple[int, Callable, tuple]] = []  # (row, function, args) for the worker pool
        last_maths: set[int] = set()  # rows whose value is the last delimited maths of an unmarked line
        golds = [self.reference_text(r) if self.read_spans else self.reference_answer(r) for r in references]
        for i, c in enumerate(completions):
            if not self.read_spans:  # gsm8k: one cleaned answer string
                found = extract_answer(c, self.policies, kind="number")  # a GSM8K answer is a number
                if found.status == "none":  # the reason, as for math: "no final answer found (retracted)"
                    verdicts[i] = self._outcome("no_answer", f"no final answer found ({found.reason or 'none'})")
                elif found.status == "ambiguous":
                    verdicts[i] = self._outcome(
                        "ambiguous", f"several final answers ({found.reason}): {list(found.candidates)}"
                    )
                elif plain_number(golds[i]) is not None and plain_number(found.answer or "") is not None:
                    verdicts[i] = self._outcome(*compare(golds[i], found.answer or "", self.options))
                else:
                    jobs.append((i, compare, (golds[i], found.answer or "", self.options)))
                continue
            values = self._values(c)
            if isinstance(values, Verdict):
                verdicts[i] = values
                continue
            values, via_last_maths = values
            if via_last_maths:
                last_maths.add(i)
            plain = self._plain(golds[i], values)
            if plain is not None:
                verdicts[i] = self._outcome(*plain)
            else:
                jobs.append((i, judge, (golds[i], tuple(values), self.options)))
        for (i, _, _), res in zip(jobs, self._map([(fn, args) for _, fn, args in jobs])):
            if res.status == "timeout":
                verdicts[i] = self._outcome("timeout", f"equivalence check took over {self.timeout:g} s")
            elif res.status == "error":  # the check failed (a crashed worker, an exception): not a verdict
                verdicts[i] = self._outcome("error", f"equivalence check failed: {res.error.splitlines()[0]}")
            else:
                outcome, detail = res.value
                if outcome == "gold_error":
                    raise VerifierError(detail)
                verdicts[i] = self._outcome(outcome, detail)
        for i in last_maths:  # say which reading a rejected value came from
            v = verdicts[i]
            if v is not None and v.outcome != "correct":
                verdicts[i] = self._outcome(v.outcome, f"{LAST_MATHS}: {v.details}")
        return verdicts  # type: ignore[return-value]

    def _values(self, completion: str) -> tuple[list[str], bool] | Verdict:
        """The stated answer(s) to judge (``maths_form``), or the verdict when there is nothing to judge.

        The reply is read (``reply.reply``: up to its end-of-turn token), with currency dollars
        escaped (``maths_text.mark_currency``).  ``extract_answer`` decides: its rules against negated,
        hedged, conditional and revised answers stand.  Statements with different strings
        (``reason="distinct"``) are judged by value in the worker: ``\\boxed{1/2}`` and "the answer is
        0.5" are one answer, the parts of a set answer are read together, anything else is ambiguous.
        An unmarked last line that is a sentence ("Therefore $x \\geq 5$ is the solution.") names its last
        delimited maths.
        """
        completion = mark_currency(reply(normalize_text(completion)))  # the reply; "$12 * 5 = $60" is money
        masked, names = mask_maths(completion)
        found = extract_answer(masked, self.policies)
        spans = [unmask(s, names) for s in getattr(found, "spans", ())]
        unmarked = not any(
            _raw(x).strip() for p in self.policies if p in MARKER_POLICIES for x in POLICIES[p](completion)
        )
        last_line = unmarked and "last-line" in self.policies
        if last_line and "\n" in last_block(completion):  # a display block ends the text
            block = delimited_maths(completion, numbers=True)
            return ([block], False) if block else self._outcome("no_answer", "no final answer found")
        if found.status == "ok":
            return [maths_form(s) for s in spans] or [unmask(found.answer or "", names)], False
        if found.status == "ambiguous":
            if getattr(found, "reason", "") == "distinct" and spans:
                return [maths_form(s) for s in spans], False
            shown = [unmask(v, names) for v in found.candidates]
            return self._outcome("ambiguous", f"several final answers ({found.reason}): {shown}")
        reason = getattr(found, "reason", "")
        fallback = delimited_maths(completion) if last_line else None
        if fallback is not None and reason in ("prose", "no final answer", ""):
            return [fallback], True
        return self._outcome("no_answer", f"no final answer found ({reason or 'none'})")

    def _plain(self, gold: str, values: list[str]) -> tuple[str, str] | None:
        """In-process verdict when the reference and every value are plain numbers, else None."""
        g, nums = plain_number(gold), [plain_number(v) for v in values]
        if g is None or not nums or any(n is None for n in nums):
            return None
        if len(set(nums)) > 1:
            return "ambiguous", f"several different final answers: {values}"
        return ("correct", "") if compare_plain(g, nums[0], self.options) else ("wrong", f"{values[0]} != {gold}")

    def _map(self, jobs: list[tuple[Callable, tuple]]):
        if not jobs:
            return []
        with self._lock:  # one batch at a time through this verifier's pool
            if self._pool is None:
                self._pool = WorkerPool(self.workers, preload=("veriloop.verifiers.mathequiv", "math_verify"))
            return self._pool.map(_call, jobs, self.timeout)

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

    name, version = "gsm8k", "5"
    reference_policies = ("gsm8k",)
    read_spans = False
