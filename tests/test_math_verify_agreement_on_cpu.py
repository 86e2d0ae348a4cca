"""The ``math`` verifier against math-verify's own test expectations (``data/math_verify_cases.jsonl``,
Math-Verify @ 5d148cf, Apache-2.0) and its known false positives.  Every difference is a documented
policy (``data/math_verify_differences.json``), and every policy has a test here."""

import re

import pytest

from veriloop.verifiers import VerifierError, get
from veriloop.verifiers.answers import extract_answer
from veriloop.verifiers.mathequiv import judge, parse_answer
from veriloop.verifiers.maths import mask_maths
from veriloop.verifiers.mathverify_suite import (
    DATA,
    EQUIVALENT_FORMS,
    FALSE_POSITIVE_PROBES,
    REFUSED_PROBES,
    classify,
    load_cases,
    load_differences,
    measure,
)

# The six cases that test a non-default option: math-verify 0.9.0 itself gives another verdict at
# its default options (latex + expression extraction, float_rounding=6, strict, no set-relation).
EXCLUDED = {
    "test_all.py::test_latex_notation[5]": "latex-only extraction: the number on its own line is read by expr",
    "test_all.py::test_latex_notation[6]": "latex-only extraction, as above",
    "test_all.py::test_complex_math_expressions[7]": "float_rounding=2",
    "test_all.py::test_complex_math_expressions[13]": "float_rounding=2",
    "test_all.py::test_set_rel_assymetry[2]": "allow_set_relation_comp=True",
    "test_strict.py::test_strict_variable_comparison[1]": "strict=False",
}


@pytest.fixture(scope="module")
def math():
    v = get("math", workers=2)
    yield v
    v.close()


@pytest.fixture(scope="module")
def agreement(math):
    return measure(math)


def test_the_data_names_its_source_commit_and_licence():
    header, cases = load_cases()
    assert header["source"] == "https://github.com/huggingface/Math-Verify"
    assert header["commit"] == "5d148cfaaf99214c2e4ffb4bc497ab042c592a7a" and "Apache-2.0" in header["licence"]
    assert (DATA / "MATH_VERIFY_LICENCE").read_text().lstrip().startswith("Apache License")
    assert len(cases) == 275 and len({c.id for c in cases}) == 275
    assert all(c.mv_test_options == c.expected for c in cases)  # math-verify 0.9.0 passes its own tests
    assert {c.id for c in cases if not c.applies} == set(EXCLUDED)


def test_every_difference_is_a_documented_policy(agreement):
    assert agreement.cases == 269
    documented = load_differences()
    found = classify(agreement.differences)  # raises on a difference that no policy explains
    changed = {i: found.get(i, "now agrees") for i in set(found) | set(documented) if found.get(i) != documented.get(i)}
    fix = "check them, then `python -m veriloop.verifiers.mathverify_suite --write`"
    assert not changed, f"the differences with math-verify changed ({fix}): {changed}"


def test_agreement_with_math_verify_is_at_least_95_percent(agreement):
    assert agreement.rate >= 0.95, f"{agreement.agreements}/{agreement.cases}"


# Cases the answer reader used to misread (each now gets math-verify's verdict), and why.
FORMER_MISREADINGS = {
    "test_all.py::test_number_extraction[2]": "1 000: a space between thousands",
    "test_all.py::test_number_extraction[5]": "1000,99: a decimal comma",
    "test_all.py::test_number_extraction[13]": "not 10 which is 1,000.99: a contrast names 1,000.99",
    "test_all.py::test_number_extraction[14]": "the same text at other options",
    "test_all.py::test_number_extraction[16]": "it's not 10 it's 1,000.99m²: a contrast",
    "test_all.py::test_latex_notation[0]": "Answer \\[ 9 \\]: 'Answer' opening a line before delimited maths",
    "test_all.py::test_latex_notation[1]": "Answer $ 9 $",
    "test_all.py::test_latex_notation[2]": "Answer $$ 9 $$",
    "test_all.py::test_latex_notation[3]": "Answer \\( 9 \\)",
    "test_all.py::test_latex_notation_math[3]": "'the solution provided', 'if you have any questions': no condition",
    "test_all.py::test_latex_notation_math[25]": "\\textnormal{ miles} is a unit",
    "test_all.py::test_relations_math[13]": "x = ... = 1/3 \\approx 11 states 1/3 exactly",
    "test_all.py::test_relations_math[16]": "x = 1/3 \\approx 1.3 states 1/3 exactly",
    "test_all.py::test_matrix_extraction[6]": "'When multiplying by identity:' is no condition",
    "test_all.py::test_math_extraction_edge_cases[2]": "a paragraph is read by its last sentence with maths",
    "test_all.py::test_math_extraction_edge_cases[6]": "Final Answer: The volume of $ABCDEFGH$ is 120.",
    "test_all.py::test_math_extraction_edge_cases[13]": "Final Answer: The final answer is ...: one statement",
    "test_all.py::test_math_extraction_additional_cases[2]": "Final Answer: The maximum number of points ... is 19.",
    "test_all.py::test_math_extraction_additional_cases[4]": "Final Answer: The largest $n$ is 34.",
    "test_open_thoughts.py::test_open_thoughts[17]": "the reasoning before </think> is not the answer",
}


def test_former_misreadings_now_agree_with_math_verify(math):
    by_id = {c.id: c for c in load_cases()[1]}
    cases = [by_id[i] for i in FORMER_MISREADINGS]
    verdicts = math.verify_batch([c.pred for c in cases], [c.gold for c in cases])
    assert all(c.applies for c in cases)
    assert [(c.id, v.outcome) for c, v in zip(cases, verdicts) if int(v.score == 1.0) != c.expected] == []


# --- our equivalence policies that math-verify 0.9.0's tests disagree with -----------------------


def test_euler_e_is_a_number_not_a_unit(math):
    assert math.verify("$\\boxed{1 + \\frac{1}{\\mathrm{e}}}$", "$1 - \\frac{1}{\\mathrm{e}}$").outcome == "wrong"
    assert math.verify("\\boxed{1 - \\frac{1}{\\mathrm{e}}}", "$1 - \\frac{1}{e}$").outcome == "correct"


def test_a_number_read_out_of_latex_that_fails_to_parse_is_no_answer(math):
    # math-verify reads 4\sqrt(2) (not LaTeX) as 4 and 1 - \frac{1}{\mathrm{s}} as 1
    assert parse_answer("$4\\sqrt(2)$") == [] and parse_answer("$1 - \\frac{1}{\\mathrm{s}}$") == []
    assert math.verify("$\\boxed{4\\sqrt(2)}$", "$4$").score == 0.0
    with pytest.raises(VerifierError, match="does not parse"):  # math-verify test_numina_cases[24]: malformed
        math.verify("W(x)=1orW(x)=-1", "\\\\boxed{W(n) = 1 \\\\text{ and } W(n) = -1")


def test_a_reference_must_parse_to_a_value(math):
    # math-verify test_open_thoughts[7] compares the unparsed text of both sides as strings
    with pytest.raises(VerifierError, match="does not parse"):
        math.verify(
            "$$\\boxed{x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}}$$",
            "$$x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}$$",
        )


# --- the answer reader's rules (answers.py) behind the other differences --------------------------


# reason -> (completion, reference, outcome, what the verdict says): each remaining policy's own test
READING_RULE_TESTS = {
    "prose": ("Final Answer: Jane started growing Sphere 3 hours ago.", "$3$", "no_answer", "(prose)"),
    # a condition that sets a value ("If $x = 2$"); one that only names a variable ("If the value was $x$") is none
    "conditional": ("If $x = 2$, the loss is $\\boxed{28\\%}$.", "$28\\%$", "no_answer", "(conditional)"),
    "hedged": ("$x\\approx11$", "$11$", "no_answer", "(hedged)"),  # relations_math[15]
    "distinct": ("\\boxed{200} and then \\boxed{255}", "$255$", "ambiguous", "several different"),
    # an unmarked paragraph: its answer 12 is a number in prose, so the last delimited maths ($d$) is read
    # (a closing sentence opened by "Therefore" names its one number: that is read, answer_rules.closing_value)
    "last-maths": ("We are given that $d$ divides 90. There are 12 sequences.", "$12$", "wrong", "d"),
}
EQUIVALENCE_TESTS = {  # the equivalence policies' cases, each tested above by name
    "test_yujianll.py::test_string_extraction[9]": test_euler_e_is_a_number_not_a_unit,
    "test_numina_cases.py::test_numina_cases[24]": test_a_number_read_out_of_latex_that_fails_to_parse_is_no_answer,
    "test_open_thoughts.py::test_open_thoughts[7]": test_a_reference_must_parse_to_a_value,
}


@pytest.mark.parametrize("reason", sorted(READING_RULE_TESTS))
def test_answer_reading_rules_behind_the_differences(math, reason):
    completion, reference, outcome, says = READING_RULE_TESTS[reason]
    v = math.verify(completion, reference)
    assert (v.outcome, v.score) == (outcome, 0.0) and says in v.details, v


def test_every_remaining_difference_names_a_policy_with_its_own_test():
    for case, doc in load_differences().items():
        assert doc["kind"] in ("equivalence", "answer-reading") and doc["rule"], case
        if doc["kind"] == "equivalence":
            assert case in EQUIVALENCE_TESTS, case
        else:
            reason = re.search(r"\([\w.]+: ([\w-]+)\)$", doc["rule"]).group(1)
            assert reason in READING_RULE_TESTS, (case, reason)


# --- known false positives, and the honest forms next to them -------------------------------------


def test_no_known_false_positive_is_accepted(math):
    verdicts = math.verify_batch([c for _, c, _ in FALSE_POSITIVE_PROBES], [r for r, _, _ in FALSE_POSITIVE_PROBES])
    accepted = [(p, v.outcome) for p, v in zip(FALSE_POSITIVE_PROBES, verdicts) if v.score > 0]
    assert not accepted
    for ref, comp, _ in REFUSED_PROBES:  # math-verify accepts; we refuse the reference (no reward)
        with pytest.raises(VerifierError, match="reference .* does not parse"):
            math.verify(comp, ref)


def test_equivalent_equations_and_forms_are_accepted(math):
    verdicts = math.verify_batch([c for _, c in EQUIVALENT_FORMS], [r for r, _ in EQUIVALENT_FORMS])
    assert [(c, v.outcome) for (_, c), v in zip(EQUIVALENT_FORMS, verdicts) if v.score != 1.0] == []


@pytest.mark.parametrize(
    "gold, spans, outcome",
    [
        ("$x + y = 1$", ["$x - y = 1$"], "wrong"),  # different lines
        ("x + y - 1 = 0", ["x - y - 1 = 0"], "wrong"),  # both normalise to 0 (Math-Verify#60)
        ("$x = 2$", ["$2 = x$"], "correct"),  # an assignment either way round
        ("$2x = 4$", ["$x = 2$"], "correct"),  # the same equation, solved
        ("$x = 2$", ["$2x = 4$"], "wrong"),  # an unsolved equation does not state x
        ("$0$", ["$2x + 3y = 0$"], "wrong"),  # an equation in variables is not its right side
        ("$30$", ["$5 \\times 6 = 30$"], "correct"),  # a worked computation names its result
        ("$1$", ["$x + y = 1$"], "correct"),  # as math-verify: the left side names the quantity
        ("$\\{1, 2\\}$", ["\\boxed{1}", "\\boxed{2}"], "correct"),  # a set answer given in parts
        ("$1$", ["\\boxed{1}", "\\boxed{2}"], "ambiguous"),  # two values for one
        ("0.5", ["\\boxed{\\frac{1}{2}}", "0.5"], "correct"),  # one value, two forms
        ("$\\frac{1}{2^{99}}$", ["$\\frac{1}{2^{98}}$"], "wrong"),  # exact numbers compared exactly
        ("$\\frac{1}{3}$", ["0.333333"], "correct"),  # floats still round (float_rounding=6)
    ],
)
def test_equivalence_policies(gold, spans, outcome):
    assert judge(gold, spans)[0] == outcome


def test_pure_maths_is_masked_from_the_prose_rules():
    text = "$\\boxed{(\\frac{1}{5}, \\frac{1}{6})}$ and $14{,}916$, $18$, $x \\approx 3$, $\\text{odd}$"
    masked, names = mask_maths(text)
    assert masked == "$\\boxed{\\vlmathaaa}$ and $\\vlmathaab$, $18$, $x \\approx 3$, $\\text{odd}$"
    assert names == {"\\vlmathaaa": "(\\frac{1}{5}, \\frac{1}{6})", "\\vlmathaab": "14{,}916"}
    # the reader takes a placeholder as one clean maths value with no numbers in it
    found = extract_answer("The answer is $\\vlmathaaa$.")
    assert (found.status, found.answer) == ("ok", "\\vlmathaaa")


def test_display_maths_and_sentences_on_the_last_line(math):
    assert math.verify("Answer \\[\n9\n\\]", "$9$").outcome == "correct"  # was a parse error
    assert math.verify("So:\n$$\n\\frac{1}{2}\n$$", "0.5").outcome == "correct"
    assert math.verify("We find that $x \\lt 3$.", "$x < 3$").outcome == "correct"
    assert math.verify("Restating the question: a box holds $18$ pencils.", "18").score == 0.0  # prose
    assert (
        math.verify(
            "The identity matrix is $ \\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix} $.",
            "$\\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix}$",
        ).outcome
        == "correct"
    )


def test_tuple_and_interval_references_parse(math):
    # these raised VerifierError ("reference does not parse") before
    assert math.verify("\\boxed{[0, 1)}", "$[0,1)$").outcome == "correct"
    assert math.verify("\\boxed{(0, 9)}", "$[0,9)$").outcome == "wrong"
    assert math.verify("$\\boxed{(3, 2)}$", "$(p,q)=(3,2)$").outcome == "correct"
