"""math-verify's own test expectations, as an agreement measure and audit cases for ``math``.

``data/math_verify_cases.jsonl`` holds the test parameters of math-verify (gold, prediction,
expected verdict, options; extracted by ``scripts/extract_math_verify_cases.py``, Apache-2.0, see
its header line and ``data/MATH_VERIFY_LICENCE``) with math-verify 0.9.0's own verdict at the
test's options and at its default options.  A case *applies at default options* when those two
verdicts agree; the others test a non-default option (latex-only extraction, ``float_rounding``,
``strict=False``, ``allow_set_relation_comp``) and are excluded, by that rule alone.

``data/math_verify_differences.json`` lists every applicable case where the ``math`` verifier
(default options) disagrees, each with the policy that explains it: one of ours in ``mathequiv``
(``kind: equivalence``, listed by case in ``EQUIVALENCE_POLICIES``) or a rule of the answer reader
(``answers.py`` / ``answer_rules.py``, ``kind: answer-reading``, the rule the verdict names; or
``maths.py``'s reading of an unmarked last line by its last delimited maths).  A difference that
none explains is an error (``classify`` raises).  The test keeps the file exact; ``python -m
veriloop.verifiers.mathverify_suite`` prints the measure, ``--write`` rewrites the file after a
deliberate change of policy.

As audit cases (``audit_cases``) each applicable case carries math-verify's test expectation as its
label, or a person's reading where one was recorded (``data/audit/development/math-verify-read.jsonl``:
the cases where our verdict differs, read one by one); never our verifier's verdict.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from veriloop.io import read_jsonl
from veriloop.verifiers.audit_case import AuditCase
from veriloop.verifiers.maths import LAST_MATHS

DATA = Path(__file__).resolve().parent / "data"
CASES_FILE, DIFFERENCES_FILE = DATA / "math_verify_cases.jsonl", DATA / "math_verify_differences.json"

# Known math-verify false positives (its issue tracker and our own probes): (reference, completion,
# where it comes from).  Every one must score 0; ``veriloop audit math`` runs them.
FALSE_POSITIVE_PROBES = [
    ("$1 - \\frac{1}{\\mathrm{e}}$", "$\\boxed{1 + \\frac{1}{\\mathrm{e}}}$", "Math-Verify#14: \\mathrm{e} as a unit"),
    ("$1 - \\frac{1}{e}$", "The answer is $1 + \\frac{1}{e}$.", "sign of 1/e"),
    ("$x + y = 1$", "\\boxed{x - y = 1}", "two linear equations"),
    ("$x - y = 1$", "The answer is $x + y = 1$.", "two linear equations"),
    ("$2x = 4$", "\\boxed{x = 3}", "two linear equations"),
    ("x + y - 1 = 0", "\\boxed{x - y - 1 = 0}", "both sides normalise to 0"),
    ("3*x-1*y+13=0", "3x + 4y + 14=0", "Math-Verify#60: both read as the number 0"),
    ("$y = 2x + 1$", "\\boxed{y = 3x + 1}", "two lines"),
    ("$0$", "\\boxed{2x + 3y = 0}", "an equation is not its right side"),
    ("$x = 2$", "\\boxed{2x = 4}", "an unsolved equation does not state x"),
    ("$x^2 = 4$", "\\boxed{x = 2}", "one root of two"),
    ("$x \\leq 5$", "\\boxed{x \\geq 5}", "inequality direction"),
    ("$\\frac{1}{2004!}$", "\\boxed{\\frac{1}{2006!}}", "Math-Verify#14: tiny values chopped to 0"),
    ("$\\frac{1}{2^{99}}$", "\\boxed{\\frac{1}{2^{98}}}", "Math-Verify#14: tiny values chopped to 0"),
    ("$\\frac{2^{2005}+1}{3 \\cdot 2^{2006}}$", "\\boxed{\\frac{1}{3 \\cdot 2^{2006}}}", "Math-Verify#14: tiny"),
    ("$n=2, 3, 4$", "$n=1, 2, 3$", "Math-Verify#14"),
    ("$D = (0, 1)$", "$D = (0, 1.5)$", "Math-Verify#14"),
    ("$F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}$", "$F_n = \\sum_{k=0}^{n-2} F_k F_{n-k-2}$", "Math-Verify#14"),
    ("$19, 46, \\text{ and } 82$", "\\boxed{21, 36, 82}", "Math-Verify#14"),
    ("$\\pm 2021$", "\\boxed{2021}", "Math-Verify#14"),
    ("$12:00$", "\\boxed{1:00}", "Math-Verify#14"),
    ("$4$", "$\\boxed{4\\sqrt(2)}$", "Math-Verify#41: malformed \\sqrt read as 4"),
    ("$\\text{13}$", "\\boxed{14}", "Math-Verify#37"),
]
# Probes whose reference we refuse (VerifierError: it does not parse), so no reward can come from them.
REFUSED_PROBES = [
    ("$1, 2, \\ldots, n$", "\\boxed{1, 3, 5, \\ldots, 2n-1}", "Math-Verify#14"),
    ("$1:2:3:\\ldots$", "\\boxed{1:4:9:\\ldots}", "Math-Verify#14"),
]
# Honest forms next to the probes: equivalent equations and answers that must still score 1.
EQUIVALENT_FORMS = [
    ("$x = 2$", "\\boxed{2 = x}"),
    ("$x = 2$", "\\boxed{2}"),
    ("$2x = 4$", "\\boxed{x = 2}"),
    ("$2x+4y-3=0$", "\\boxed{y=-\\frac{1}{2}x+\\frac{3}{4}}"),
    ("$34x+45y-20z+100=0$", "\\boxed{-34x-45y+20z-100=0}"),
    ("$\\frac{1}{3}$", "\\boxed{k = \\frac{1}{3}}"),
    ("$1 - \\frac{1}{e}$", "\\boxed{1 - \\frac{1}{\\mathrm{e}}}"),
    ("$\\frac{1}{2^{99}}$", "\\boxed{2^{-99}}"),
    ("$(1, 2)$", "\\boxed{(1,2)}"),
    ("$\\{1, 2\\}$", "\\boxed{1} and \\boxed{2}"),
    ("$x \\geq 5$", "Therefore $x \\geq 5$ is the solution."),
    ("$9$", "Answer \\[\n9\n\\]"),
]


# Our equivalence policies that math-verify 0.9.0's tests disagree with, by case.
EQUIVALENCE_POLICIES = {
    "test_yujianll.py::test_string_extraction[9]": "1 - 1/e is not 1 + 1/e: \\mathrm{e} is Euler's number "
    "(math-verify 0.9.0 drops it as a unit and reads both as 1; its later tests expect 0)",
    "test_numina_cases.py::test_numina_cases[24]": "a number read out of LaTeX that fails to parse is no answer: "
    "this malformed reference (an unclosed box) raises VerifierError",
    "test_open_thoughts.py::test_open_thoughts[7]": "a reference must parse to a value (math-verify would compare "
    "the unparsed text of gold and prediction as strings): it raises VerifierError",
}
# Of those, the cases whose reference the verifier refuses (VerifierError): not audit cases.
REFERENCE_ERRORS = {"test_numina_cases.py::test_numina_cases[24]", "test_open_thoughts.py::test_open_thoughts[7]"}
# The answer reader's rules (answer_rules.py, answers.py), by the reason a verdict names.
READING_RULES = {
    "prose": "a sentence with a number in it is prose, not an answer (it may be quoted from the question)",
    "conditional": "an answer in a sentence with a condition (if, suppose, assuming; given, when opening a clause) "
    "is no answer",
    "negated": "a statement that negates a number (not 10, ...) is no answer",
    "retracted": "an answer the text takes back is no answer",
    "hedged": "an approximate answer (x \\approx 11, about, ~) is a hedge, no answer",
    "several": "one statement that names several numbers is ambiguous",
    "range": "a range of values (between 2000 and 3000, 17-19) in the answer's statement is ambiguous",
    "revised": "a different number after the stated answer revises it: ambiguous",
    "distinct": "final answers with different values (several boxes) are ambiguous, unless they are the parts "
    "of a set answer",
    "last-maths": "an unmarked last line that is a sentence names its last delimited maths, never a plain number "
    "in its prose: the number stated in prose is not read",
}
_FILES = {"last-maths": "maths.py", "distinct": "answers.py"}


@dataclass(frozen=True)
class Case:
    id: str
    gold: str
    pred: str
    expected: int
    options: dict = field(hash=False, compare=False)
    mv_test_options: int = 0
    mv_default_options: int = 0

    @property
    def applies(self) -> bool:
        """math-verify gives the same verdict at its default options as at the test's."""
        return self.mv_test_options == self.mv_default_options


def load_cases(path: Path = CASES_FILE) -> tuple[dict, list[Case]]:
    """(header, cases): the header names the source repository, commit and licence."""
    rows = read_jsonl(path)
    header, cases = rows[0], []
    for r in rows[1:]:
        options = {k: r[k] for k in ("match_types", "precision", "strict", "allow_set_relation_comp", "harness")}
        cases.append(
            Case(r["id"], r["gold"], r["pred"], r["expected"], options, r["mv_test_options"], r["mv_default_options"])
        )
    return header, cases


def load_differences(path: Path = DIFFERENCES_FILE) -> dict[str, dict]:
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass
class Agreement:
    cases: int  # applicable cases (the denominator)
    agreements: int
    excluded: list[str]  # ids of cases that test a non-default option
    differences: dict[str, str]  # id -> our outcome and details

    @property
    def rate(self) -> float:
        return self.agreements / self.cases

    def text(self, documented: dict[str, dict]) -> str:
        lines = [
            f"math-verify agreement: {self.agreements}/{self.cases} = {self.rate:.1%} "
            f"({len(self.excluded)} cases excluded: they test a non-default option)"
        ]
        by_rule = Counter(documented.get(i, {}).get("rule", "UNDOCUMENTED") for i in self.differences)
        lines += [f"  {n:3d}  {rule}" for rule, n in by_rule.most_common()]
        return "\n".join(lines)


def measure(verifier) -> Agreement:
    """Run ``verifier`` (the ``math`` verifier at its default options) on every applicable case."""
    from veriloop.verifiers.base import VerifierError, is_correct

    _, cases = load_cases()
    applicable = [c for c in cases if c.applies]
    differences = {}
    for c in applicable:
        try:
            v = verifier.verify(c.pred, c.gold)
            got, why = int(is_correct(v)), f"{v.outcome}: {v.details}"
            if v.details.startswith(LAST_MATHS):  # the verifier says it judged the last delimited maths
                details = v.details[len(LAST_MATHS) + 2 :]
                label = " (last-maths)" if v.outcome in ("wrong", "parse_error") else ""
                why = f"{v.outcome}{label}: {details}"
        except VerifierError as e:  # a reference we cannot read: no reward, so not an agreement with 1
            got, why = 0, f"VerifierError: {e}"
        if got != c.expected:
            differences[c.id] = why[:300]
    return Agreement(
        len(applicable), len(applicable) - len(differences), [c.id for c in cases if not c.applies], differences
    )


def classify(differences: dict[str, str]) -> dict[str, dict]:
    """``{id: {"kind", "rule"}}`` for each difference (id -> our verdict); raises on one that no
    documented policy explains."""
    out, unexplained = {}, []
    for i, why in differences.items():
        m = re.match(
            r"(?:no_answer: no final answer found|ambiguous: several final answers|wrong|parse_error) "
            r"\(([\w-]+)\)",
            why,
        )
        reason = m.group(1) if m else ("distinct" if why.startswith("ambiguous: several different") else "")
        if i in EQUIVALENCE_POLICIES:
            out[i] = {"kind": "equivalence", "rule": EQUIVALENCE_POLICIES[i]}
        elif reason in READING_RULES:
            where = _FILES.get(reason, "answer_rules.py")
            out[i] = {"kind": "answer-reading", "rule": f"{READING_RULES[reason]} ({where}: {reason})"}
        else:
            unexplained.append(f"{i}: {why}")
    if unexplained:
        raise ValueError("differences with math-verify that no documented policy explains:\n" + "\n".join(unexplained))
    return out


READINGS_FILE = DATA / "audit" / "development" / "math-verify-read.jsonl"


def read_ids(path: Path = READINGS_FILE) -> set[str]:
    """The math-verify cases that a person read and labelled (``id`` field of the readings file)."""
    return {r["id"] for r in read_jsonl(path)}


def audit_cases() -> list[AuditCase]:
    """For ``veriloop audit math`` (development part): every applicable case labelled as math-verify's
    test expects it, except those a person read and labelled in ``READINGS_FILE`` (they are audited
    from that file, by that reading) and the two whose reference we refuse (an audit grades, it does
    not raise); plus the false-positive probes and equivalent forms (labelled by reading).  No label
    here comes from our verifier: the documented differences decide nothing."""
    _, cases = load_cases()
    read = read_ids()
    out = []
    for c in cases:
        if not c.applies or c.id in REFERENCE_ERRORS or c.id in read:
            continue
        out.append(
            AuditCase(
                c.pred,
                c.gold,
                "accept" if c.expected else "reject",
                "math-verify case",
                c.id,
                source="math-verify tests",
                labelled_by="math-verify tests",
            )
        )
    out += [AuditCase(c, r, "reject", "math-verify false positive", note) for r, c, note in FALSE_POSITIVE_PROBES]
    out += [AuditCase(comp, ref, "accept", "equivalent equation or form") for ref, comp in EQUIVALENT_FORMS]
    return out


def main(argv: list[str]) -> None:
    from veriloop.verifiers import get

    if "-h" in argv or "--help" in argv:
        print(
            "usage: python -m veriloop.verifiers.mathverify_suite [--write]\n\n"
            "Measure the math verifier's agreement with math-verify's own tests (default options) and\n"
            "list every difference with the policy behind it.\n\n"
            "  --write  rewrite data/math_verify_differences.json from this run (after a deliberate\n"
            "           change of policy; fails if a difference has no documented policy)"
        )
        return

    verifier = get("math")
    try:
        header, _ = load_cases()
        result = measure(verifier)
    finally:
        verifier.close()
    documented = classify(result.differences) if "--write" in argv else load_differences()
    if "--write" in argv:
        DIFFERENCES_FILE.write_text(json.dumps(documented, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"source: {header['source']} @ {header['commit']} ({header['licence']})")
    print(result.text(documented))
    for i, why in result.differences.items():
        print(f"  {i}: {documented.get(i, {}).get('rule', 'UNDOCUMENTED')} -- ours: {why[:120]}")


if __name__ == "__main__":
    main(sys.argv[1:])
