"""Final-answer extraction and maths equivalence: the forms that must pass, the ones that must not."""

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veriloop.verifiers import VerifierError, get
from veriloop.verifiers.answers import extract_answer, normalize_text
from veriloop.verifiers.audit import argued_answers_suite, run_audit
from veriloop.verifiers.mathequiv import MathOptions, compare

GSM8K_DIR = Path(__file__).resolve().parent.parent / "src" / "veriloop" / "data" / "gsm8k"
FAMILIES = (
    "negation",
    "contrast",
    "self-correction",
    "hedge or range",
    "conditional answer",
    "quoted from the question",
)


@pytest.mark.parametrize(
    "text, answer, policy",
    [
        ("2+3=5;5*4=20;answer=20", "20", "answer"),
        ("2+3=5;5*4=20;答案=20", "20", "答案"),
        ("So she has 72 clips.\n#### 72", "72", "gsm8k"),
        ("We get $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", "boxed"),
        ("Adding up, the answer is 42.", "42", "the-answer-is"),
        ("work...\n17", "17", "last-line"),
        ("答案：１２。", "12", "答案"),  # full-width digits and Chinese punctuation
        ("#### 7,425,000", "7,425,000", "gsm8k"),
        ("\\boxed{\u22125}", "-5", "boxed"),  # U+2212 minus
        ("The answer is $18.", "18", "the-answer-is"),
        ("the final answer is 15 gallons * 8 pints / gallon = 120 pints", "120", "the-answer-is"),
        ("\\boxed{\\frac{a}{b}} and again \\boxed{\\frac{a}{b}}", "\\frac{a}{b}", "boxed"),  # same value twice
    ],
)
def test_extraction_policies(text, answer, policy):
    found = extract_answer(text)
    assert (found.status, found.answer, found.policy) == ("ok", answer, policy)


@pytest.mark.parametrize(
    "text",
    [
        "answer=20 or 9",
        "答案=20或9",
        "\\boxed{5} ... \\boxed{6}",
        "#### 5\nso \\boxed{6}",
        "The answer is 3 or 4.",
        "answer=20;answer=9",
    ],
)
def test_two_different_final_answers_are_ambiguous(text):
    assert extract_answer(text).status == "ambiguous"


def test_no_answer_and_bad_policy():
    assert extract_answer("", ("answer",)).status == "none"
    assert extract_answer("I think it is 5", ("answer", "gsm8k")).status == "none"  # no marker, no last-line policy
    with pytest.raises(ValueError, match="unknown answer policies"):
        extract_answer("x", ("guess",))


def test_normalize_text():
    assert normalize_text("１２，３４５\u2212６＝") == "12,345-6="
    assert normalize_text("48/2 = <<48/2=24>>24") == "48/2 = 24"


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("0.5", "1/2"),
        ("1/2", "0.5"),
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("7425000", "7,425,000"),
        ("12", "12.0"),
        ("-5", "-5"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("\\frac{\\pi}{2}", "\\pi/2"),
        ("50", "50%"),
    ],
)
def test_equivalent_forms(gold, pred):
    assert compare(gold, pred)[0] == "correct"


@pytest.mark.parametrize("gold, pred", [("0.5", "0.51"), ("3", "13"), ("\\frac{1}{2}", "\\frac{1}{3}"), ("12", "-12")])
def test_different_values(gold, pred):
    assert compare(gold, pred)[0] == "wrong"


def test_policy_options():
    assert compare("0.5", "50%", MathOptions(percent="number"))[0] == "wrong"
    assert compare("0.5", "50%", MathOptions(percent="fraction"))[0] == "correct"
    assert compare("50", "50%", MathOptions(percent="fraction"))[0] == "wrong"
    assert compare("0.5", "50%", MathOptions(percent="either"))[0] == "correct"
    assert compare("1/2", "2/4")[0] == "correct"
    assert compare("1/2", "2/4", MathOptions(unreduced_fractions=False))[0] == "wrong"
    assert compare("3.14159", "3.1416", MathOptions(rel_tol=1e-4))[0] == "correct"
    assert compare("3.14159", "3.1416")[0] == "wrong"
    with pytest.raises(ValueError, match="percent"):
        MathOptions(percent="maybe")


@pytest.fixture(scope="module")
def math_verifier():
    v = get("math", timeout=3.0, workers=2)
    yield v
    v.close()


def test_math_verifier_outcomes(math_verifier):
    cases = {
        "The answer is $\\boxed{\\frac{1}{2}}$": ("correct", 1.0),
        "so \\boxed{0.5}": ("correct", 1.0),
        "\\boxed{0.6}": ("wrong", 0.0),
        "no idea": ("no_answer", 0.0),  # the last line is prose, not a maths answer: never parsed
        "\\boxed{1/2} or \\boxed{1/3}": ("ambiguous", 0.0),
        "\\boxed{\\frac{1}{}": ("", 0.0),  # an unbalanced box is no box; its last line is no value
    }
    verdicts = math_verifier.verify_batch(list(cases), ["\\frac{1}{2}"] * len(cases))
    got = {c: (v.outcome, v.score) for c, v in zip(cases, verdicts)}
    for c in list(cases)[:5]:
        assert got[c] == cases[c], (c, got[c])
    assert got["\\boxed{\\frac{1}{}"][1] == 0.0


def test_unparseable_prediction_and_gold(math_verifier):
    v = math_verifier.verify("\\boxed{\\frac{}{}}", "\\frac{1}{2}")
    assert v.score == 0.0 and v.outcome in ("parse_error", "wrong")
    with pytest.raises(VerifierError, match=r"reference .*frac\{\}\{\}.* does not parse"):
        math_verifier.verify("\\boxed{1}", "\\boxed{\\frac{}{}}")
    with pytest.raises(VerifierError, match=r"reference has no answer"):
        math_verifier.verify("\\boxed{1}", "   ")


def test_time_limit_works_off_the_main_thread(math_verifier):
    # A comparison that sympy cannot finish quickly becomes the outcome `timeout`, from a thread,
    # within the limit (math-verify's own signal-based limit cannot work here).
    hard = "\\boxed{(x+1)^{100000} - (x+1)^{100000}}"
    out = {}
    t = threading.Thread(target=lambda: out.update(v=math_verifier.verify(hard, "(x+2)^{99999}")))
    t.start()
    t.join(timeout=30)
    assert not t.is_alive()
    assert out["v"].outcome in ("timeout", "wrong") and out["v"].score == 0.0
    assert math_verifier.verify("\\boxed{0.5}", "1/2").score == 1.0  # the pool recovered


def test_every_gsm8k_gold_solution_scores_one_against_its_reference():
    v = get("gsm8k")
    for split, n in (("train", 7473), ("test", 1319)):
        rows = [json.loads(line) for line in (GSM8K_DIR / f"{split}.jsonl").read_text().splitlines()]
        assert len(rows) == n
        verdicts = v.verify_batch([r["answer"] for r in rows], [r["answer"] for r in rows])
        wrong = [(r["answer"][-80:], x.details) for r, x in zip(rows, verdicts) if x.score != 1.0]
        assert not wrong, wrong[:5]
    v.close()


def test_gsm8k_reads_numbers_only():
    v = get("gsm8k")
    assert v.version == "5" and v.verify("#### 18", "#### 18").score == 1.0
    assert v.verify("#### 9*2", "#### 18").outcome == "no_answer"  # an expression is not a GSM8K answer
    assert v.verify("#### 2^3", "#### 8").outcome == "no_answer"
    assert v.verify("#### 1/2", "0.5").score == 1.0  # a fraction is a number
    assert v.verify("\\boxed{\\frac{1}{2}}", "0.5").score == 1.0
    assert v.verify("#### 1 000", "#### 1000").score == 1.0


def test_gsm8k_reference_forms():
    v = get("gsm8k")
    assert v.verify("so the total is\n#### 1,250", "1250").score == 1.0  # bare-number reference
    assert v.verify("The answer is 1250.", "blah\n#### 1250").score == 1.0
    assert v.verify("#### 125", "#### 1250").score == 0.0
    assert v.verify("answer=13", "#### 3").score == 0.0  # no substring matching


def test_verify_command_grades_a_file(tmp_path, capsys):
    from veriloop import cli

    rows = [
        {"completion": "#### 72", "reference": "x\n#### 72", "id": 1},
        {"completion": "The answer is 71.", "reference": "#### 72", "id": 2},
        {"completion": "72 or 73", "reference": "#### 72", "id": 3},
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli.main(["verify", "--verifier", "gsm8k", "--input", str(src), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in graded] == [1, 2, 3]  # extra columns kept, order kept
    assert [(g["score"], g["outcome"]) for g in graded] == [(1.0, "correct"), (0.0, "wrong"), (0.0, "ambiguous")]
    assert graded[0]["verifier"] == "gsm8k@5" and "components" in graded[0]
    assert "3 rows" in printed and "mean score 0.3333" in printed

    src.write_text('{"completion": "1"}\n')
    assert cli.main(["verify", "--verifier", "gsm8k", "--input", str(src), "--output", str(out)]) == 2
    assert "in.jsonl:1" in capsys.readouterr().err


def test_verify_uses_every_core_and_gives_the_same_answers(tmp_path):
    from veriloop.verifiers.batch import grade_pairs

    pairs = [(f"\\boxed{{\\frac{{{k}}}{{2}}}}", f"{k / 2}") for k in range(1, 40)] + [("\\boxed{3}", "4")] * 10
    one, _ = grade_pairs("math", pairs, {"workers": 1}, 1, chunk_size=8)
    many, _ = grade_pairs("math", pairs, {}, 2, chunk_size=8)
    assert one == many and sum(g["score"] for g in one) == 39


@pytest.mark.parametrize("name", ["gsm8k", "math", "arithmetic-outcome", "arithmetic-process"])
def test_audit_suites_have_no_false_accepts_or_rejects(name):
    from veriloop.verifiers.audit import BUILTIN_SUITES, run_audit

    verifier = get(name)
    report = run_audit(name, verifier, BUILTIN_SUITES[name]())
    categories = {r["category"] for r in report.rows}
    if name in ("gsm8k", "math"):
        assert {
            "substring trap",
            "several answers",
            "echoing the question",
            "format without content",
            "prompt injection",
            "equivalent form",
            *FAMILIES,
            "honest look-alike",
        } <= categories
    assert report.false_accepts == 0 and report.false_rejects == 0, report.table()


def test_audit_command_with_user_cases(tmp_path, capsys):
    from veriloop import cli

    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        json.dumps({"completion": "#### 5", "reference": "#### 5", "expect": "reject", "category": "my probe"}) + "\n"
    )
    report = tmp_path / "audit.json"
    code = cli.main(["audit", "gsm8k", "--cases", str(cases), "--no-builtin", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 1 and "my probe" in out and "false accepts: 1" in out  # the verifier (rightly) accepted it
    assert json.loads(report.read_text())["false_accepts"] == 1
    cases.write_text('{"completion": "x", "reference": "y", "expect": "maybe"}\n')
    assert cli.main(["audit", "gsm8k", "--cases", str(cases)]) == 2
    assert "cases.jsonl:1" in capsys.readouterr().err


def test_weighted_sum_with_length_shaping_keeps_every_component():
    v = get("weighted", weights={"gsm8k": 1.0, "length": 0.5}, options={"length": {"max_chars": 40, "buffer": 20}})
    short, long_ = "#### 72", "x" * 30 + "\n#### 72"  # 38 chars: 18 past the soft start of 20
    a, b = v.verify_batch([short, long_], ["#### 72", "#### 72"])
    assert (a.score, a.components) == (1.0, {"outcome": 1.0, "length_penalty": 0.0})
    assert b.components["length_penalty"] == pytest.approx(-18 / 20)
    assert b.score == pytest.approx(1.0 - 0.5 * 18 / 20) and b.outcome == "correct"
    with pytest.raises(ValueError, match="buffer"):
        get("length", max_chars=10, buffer=20)


def test_worker_pool_survives_a_crashing_call():
    import operator
    import os

    from veriloop.verifiers.pool import WorkerPool

    with WorkerPool(2) as pool:
        crashed = pool.map(os._exit, [(3,)], timeout=5)  # the call kills its worker process
        assert crashed[0].status == "error" and "died" in crashed[0].error
        raised = pool.map(operator.truediv, [(1, 0)], timeout=5)  # an exception is reported, the worker lives
        assert raised[0].status == "error" and "ZeroDivisionError" in raised[0].error
        assert [r.value for r in pool.map(operator.add, [(1, 2), (3, 4), (5, 6)], timeout=5)] == [3, 7, 11]


# ---------------------------------------------------------------- arguing around the answer


@pytest.mark.parametrize(
    "text, status, reason",
    [
        ("The answer is not 18. It is 17.", "none", "negated"),
        ("The answer isn't 18.", "none", "negated"),  # not the marker "answer is"; the last line negates 18
        ("#### 18 is wrong", "none", "negated"),
        ("\\boxed{18} is not the answer.", "none", "negated"),
        ("#### 18\nActually, 18 is wrong.", "none", "negated"),  # stated, then denied
        ("The answer is not 18.\n#### 18", "none", "negated"),
        ("\\boxed{18}\n\nWait, that's not right.", "none", "retracted"),
        ("The final answer is 17. Oops, 18.", "ambiguous", "revised"),
        ("answer: 17. Wait, actually it's 18", "ambiguous", "revised"),
        ("#### 17 ... no, 18", "ambiguous", "revised"),
        ("#### 17\n18", "ambiguous", "revised"),  # a later bare number
        ("#### 17\nThe answer is about 18.", "ambiguous", "revised"),  # a later statement of another value
        ("\\boxed{17} (typo: 18)", "ambiguous", "revised"),
        ("between 17 and 19", "ambiguous", "range"),
        ("#### 17 to 19", "ambiguous", "range"),
        ("The answer is 18 or 19.", "ambiguous", "several"),
        ("The answer is 17, 18.", "ambiguous", "several"),  # a bare list outside a box
        ("about 18", "none", "hedged"),
        ("The answer is ~18.", "none", "hedged"),
        ("The answer is 18?", "none", "hedged"),
        ("#### 18 or so", "none", "hedged"),
        ("\\boxed{18} or so", "none", "hedged"),
        ("答案是18吗", "none", "hedged"),
        ("If she sold 24, the answer is 18.", "none", "conditional"),
        ("Suppose she sold 24. Then the answer is 18.", "none", "conditional"),
        ("the answer is 18 if we ignore the tax", "none", "conditional"),
        ("\\boxed{18}, assuming no tax.", "none", "conditional"),
        ("Tom has 18 apples. How many apples does he have?", "none", "prose"),  # the question, echoed
        ("The answer is: Tom has 18 apples.", "none", "prose"),
        ("\\boxed{\\text{Tom has 18 apples}}", "none", "prose"),
        ("She has 18 apples.", "none", "prose"),  # free text does not fall through to a number in it
        ("Given that she sold 24, the answer is 18.", "none", "conditional"),  # "given" opening a clause
        ("When x = 2, the answer is 18.", "none", "conditional"),
        ("Assume she sold 24. Then the answer is 18.", "none", "conditional"),
        ("The answer is 18, provided she sold 24.", "none", "conditional"),
        ("\\boxed{18} when x = 2", "none", "conditional"),  # "when" after the value
        ("The answer is 18. If you ignore the tax, it changes.", "none", "conditional"),  # the next sentence
        ("#### 18\nAssuming no tax.", "none", "conditional"),  # ... also on the next line
        ("The answer is 18. The total is 19.", "ambiguous", "revised"),  # a restatement of another value
        ("The question says she sold clips to $\\boxed{18}$ friends.", "none", "prose"),  # says it is an echo
        ("According to the problem, Tom has $\\boxed{18}$ apples.", "none", "prose"),
        ("So she has $\\boxed{18}$ apples?", "none", "hedged"),  # a box in a question
        ("answer: the number in the question is 18", "none", "prose"),  # "the X is N" pointing at the question
        ("Answer: Tom has 18 apples.", "none", "prose"),  # a sentence, not "the <quantity> is N"
        ("$x \\approx 11$", "none", "hedged"),
        ("We get $x = 17$. Wait, actually $x = 18$.", "ambiguous", "revised"),  # a paragraph's last maths, revised
    ],
)
def test_argued_answers_are_not_answers(text, status, reason):
    found = extract_answer(text)
    assert (found.status, found.reason) == (status, reason), found


@pytest.mark.parametrize(
    "text, answer",
    [
        ("The answer is 17, not 18.", "17"),  # a contrast names its first value
        ("#### 17 rather than 18", "17"),
        ("not 18 but 17", "17"),
        ("\\boxed{17}, not 18", "17"),
        ("Not counting the tax, the total is 18.\n#### 18", "18"),  # the marked value is clean
        ("18 is not divisible by 4, so the groups are uneven.\n#### 18", "18"),
        ("If she sold 24 in April, we add the rest.\nThe answer is 18.", "18"),  # the condition is not the answer's
        ("The answer is 18. Let me double-check: 9 + 9 = 18.", "18"),
        ("The answer is $\\boxed{18}$. (It is not 17.)", "18"),
        ("The answer is 18 dollars per hour.", "18"),
        ("The answer is: **18**", "18"),
        ("The answer is\n18", "18"),  # the value on the next line
        ("x >= 5", "x >= 5"),  # a relation is not cut at its '='
        # ordinary words that are no condition (math-verify's latex_notation_math[3], matrix_extraction[6])
        ("We are given that she sold 24 clips.\nThe answer is 18.", "18"),
        (
            "The answer is 18. I hope it is correct. Note: the solution provided assumes no tax. Please let me know "
            "if you have any questions.",
            "18",
        ),
        ("When multiplying by 2, the answer is 18.", "18"),
        ("#### 18\nIf you have any questions, let me know.", "18"),
        # contrasts ("it's not N, it's M"): number_extraction[13], [16]
        ("The answer is not 19, it is 18.", "18"),
        ("the number is not 10 which is 1,000.99\u20ac", "1,000.99"),
        ("not it's not 10 it's 1,000.99m\u00b2", "1,000.99"),
        # after an explicit marker, "the <quantity> is N" names N: additional_cases[4], edge_cases[6]
        ("Final Answer: The largest $n$ is 34.", "34"),
        ("Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", "120"),
        ("Final Answer: The final answer is $20 \\%$. I hope it is correct.", "20%"),  # one statement; \\% is a percent
        # 'Answer' opening a line before delimited maths: latex_notation[0]-[3]
        ("Answer $ 9 $", "9"),
        ("Answer \\[ 9 \\]", "9"),
        ("Answer \\( 9 \\)", "9"),
        ("Answer $$ 9 $$", "9"),
        ("1 000", "1000"),
        ("1000,99", "1000.99"),
        ("#### 1,000", "1,000"),  # number_extraction[2], [5]
        ("The distance is $\\boxed{125\\textnormal{ miles}}.$", "125"),  # latex_notation_math[25]
        ("$x=1/3\\approx1.3$", "x=1/3"),  # relations_math[16]: the exact value, then a decimal of it
        ("<think>Is it 17? Wait, 19.</think>\nThe answer is 18.", "18"),  # only what follows the reasoning
    ],
)
def test_clean_answers_next_to_argument_words(text, answer):
    found = extract_answer(text)
    assert (found.status, found.answer) == ("ok", answer), found


def test_kind_number_and_prefix_policy():
    assert extract_answer("#### 1/2", kind="number").answer == "1/2"
    assert extract_answer("The answer is x >= 5.", kind="number").status == "none"  # a number after cleaning only
    assert extract_answer("#### 2^3", kind="number").status == "none"
    assert extract_answer("#### 17-19", kind="number").reason == "range"  # as maths, 17-19 is the number -2
    assert extract_answer("#### 2^3").answer == "2^3"  # a maths expression (kind="maths", the default)
    assert extract_answer("result=7", ("prefix=result",)).answer == "7"
    assert extract_answer("result=7", ("answer",)).status == "none"
    with pytest.raises(ValueError, match="kind"):
        extract_answer("1", kind="word")
    found = extract_answer("So \\boxed{\\frac{1}{2}}.\nThe answer is 0.5")  # two strings: a maths check may equate
    assert (found.status, found.reason, found.spans) == ("ambiguous", "distinct", ("\\boxed{\\frac{1}{2}}", "0.5"))


def test_argued_answer_families_score_zero_on_both_verifiers(math_verifier):
    cases = argued_answers_suite()
    rejects = [c for c in cases if c.expect == "reject"]
    assert {c.category for c in rejects} == set(FAMILIES)
    assert 2 * len(rejects) >= 200 and all(sum(c.category == f for c in rejects) >= 20 for f in FAMILIES)
    for name, verifier in (("gsm8k", get("gsm8k")), ("math", math_verifier)):
        report = run_audit(name, verifier, cases)
        assert report.false_accepts == 0 and report.false_rejects == 0, report.table()


def test_argued_answer_families_fool_a_reader_that_takes_the_last_number():
    # The cases are not vacuous: each family holds the reference, so a reader that takes the last
    # number of the completion (or a lenient extractor) accepts some of every family.
    import re

    from veriloop.verifiers import from_reward_function

    def last_number(prompts, completions, reference, **_):
        return [float(re.findall(r"\d+", c)[-1:] == [r]) for c, r in zip(completions, reference)]

    report = run_audit("last-number", from_reward_function(last_number), argued_answers_suite())
    fooled = {r["category"]: r["false"] for r in report.rows if r["expect"] == "reject"}
    assert set(fooled) == set(FAMILIES) and all(n > 0 for n in fooled.values()), fooled


# ---------------------------------------------------------------- real models' final-answer forms

REAL_FORMS = GSM8K_DIR.parents[1] / "verifiers" / "data" / "audit" / "development" / "real-forms.jsonl"
HOSTILE_FAMILIES = {
    "hostile-negated",
    "hostile-retracted",
    "hostile-conditional",
    "hostile-hedged",
    "hostile-two-values",
    "hostile-closing",
    "hostile-label-sentence",
    "math-hostile",
}


def _real_forms() -> list[dict]:
    return [json.loads(line) for line in REAL_FORMS.read_text(encoding="utf-8").splitlines()]


def test_real_forms_cases_are_well_formed():
    rows = _real_forms()
    assert len(rows) >= 400 and all(r["labelled_by"] == "reading" and r["note"] for r in rows)
    assert all(r["verifiers"] and set(r["verifiers"]) <= {"gsm8k", "math"} for r in rows)
    assert len({(r["completion"], r["reference"]) for r in rows}) == len(rows)
    expects = {f: {r["expect"] for r in rows if r["family"] == f} for f in {r["family"] for r in rows}}
    assert HOSTILE_FAMILIES <= set(expects) and all(expects[f] == {"reject"} for f in HOSTILE_FAMILIES)
    forms = set(expects) - HOSTILE_FAMILIES  # every form: a right value (accept) and a wrong one (reject)
    assert all(expects[f] == {"accept", "reject"} for f in forms), expects
    assert {
        "end-of-turn",
        "stop-string",
        "currency-and-separators",
        "percent",
        "negative-values",
        "closing-sentence",
        "label-sentence",
        "self-verification",
        "corrected-working",
        "pleasantries",
        "intensifier",
        "restated-question",
        "retraction-phrasings",
        "conditional",
        "math-boxed",
        "minerva",
    } <= forms


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_real_forms_have_no_false_accepts_or_rejects(name, math_verifier):
    rows = [r for r in _real_forms() if name in r["verifiers"]]
    verifier = math_verifier if name == "math" else get(name)
    verdicts = verifier.verify_batch([r["completion"] for r in rows], [r["reference"] for r in rows])
    wrong = [
        f"{r['expect']} [{r['family']}] ref {r['reference'][-12:]!r}: {r['completion'][-120:]!r} -> {v.outcome}"
        for r, v in zip(rows, verdicts)
        if (v.score > 0 if r["expect"] == "reject" else v.score < 1)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "text, reply_text",
    [
        ("The answer is 72.<|im_end|>\n<|im_start|>user\nAnd 96?", "The answer is 72."),
        ("#### 72</s>", "#### 72"),
        ("#### 72<\uff5cend\u2581of\u2581sentence\uff5c>", "#### 72"),  # DeepSeek's end token (full-width bars)
        ("#### 72<end_of_turn>\n<start_of_turn>user", "#### 72"),
        ("<|im_start|>assistant\n#### 72", " assistant\n#### 72"),  # a token before any text is no text
        ("The answer is 72.\n\nQuestion: Weng earns $12 an hour.", "The answer is 72."),  # the next example
        ("Question: How many clips?\nAnswer: 72", "Question: How many clips?\nAnswer: 72"),  # a restated question
        ("The answer is 72.\n\nQuestion: Is that right?", "The answer is 72.\n\nQuestion: Is that right?"),
        ("<think>52?</think>\nThe answer is 72.", "\nThe answer is 72."),
    ],
)
def test_where_the_reply_ends(text, reply_text):
    from veriloop.verifiers.reply import reply

    assert reply(normalize_text(text)) == reply_text


def test_currency_dollars_are_not_maths_delimiters():
    from veriloop.verifiers.maths_text import mark_currency

    assert mark_currency("She earns $12 * 5 = $60.\n\n#### $60") == "She earns \\$12 * 5 = \\$60.\n\n#### \\$60"
    assert mark_currency("costs $5.\n\nSo $10") == "costs \\$5.\n\nSo \\$10"  # a blank line ends inline maths
    for maths in ("$5$", "$1,250$", "$2^5 = 32$", "$x$ and $y$", "$$\\boxed{5}$$", "\\$5 and $x$"):
        assert mark_currency(maths) == maths


@pytest.mark.parametrize(
    "value, cleaned",
    [
        ("\\$1{,}250", "1,250"),
        ("USD 1,250", "1,250"),
        ("1,250$", "1,250"),
        ("$ 1,250", "1,250"),
        ("1,\\!250", "1,250"),
        ("1\\,250", "1250"),
        ("\\boxed{\\$1,250}", "1,250"),
        ("-5°F", "-5"),
        ("30^\\circ", "30"),
        ("75\\%", "75%"),
        ("__ 72", "72"),
        ("-$5", "-5"),
        ("\\frac14", "\\frac14"),
    ],
)
def test_clean_value_reads_real_number_forms(value, cleaned):
    from veriloop.verifiers.answer_values import clean_value, is_clean

    assert clean_value(value) == cleaned and is_clean(cleaned, "number")


@pytest.mark.parametrize(
    "text, answer",
    [
        ("48 + 24 = 72\nNatalia sold 72 clips altogether.", "72"),  # the working's result, restated
        ("She sold 48 and 24.\nNatalia sold **72** clips.", "72"),  # the value in bold
        ("She sold 48 and 24.\nSo Natalia sold 72 clips.", "72"),  # a conclusion connective
        ("She sold 48 and 24.\nNatalia sold 72 clips altogether.", None),  # none of them: prose
        ("She sold 48 in April.\nNatalia sold 48 clips in April.", None),  # the question's number: an operand
        ("Were she to sell 24 more, she would sell 9 * 8 = 72.\nShe would sell 72 clips.", None),  # a supposition
        ("48 + 24 = 72\nFinal Answer: Natalia sold 72 clips altogether.", "72"),  # a label, then a sentence
        ("Final Answer: Tom has 18 apples.", None),  # nothing worked out: it may echo the question
        ("48 + 24 = 72\nNatalia sold 72 clips altogether.\nDoes that make sense?", "72"),  # addressed to the reader
        ("48 + 24 = 72\nNatalia sold 72 clips altogether.\nHow many in June?", None),  # a new question
    ],
)
def test_unmarked_sentences_that_state_a_result(text, answer):
    found = extract_answer(text, kind="number")
    assert (found.answer if found.status == "ok" else None) == answer, found


def test_a_conjunction_is_one_answer_for_maths_and_alternatives_are_two(math_verifier):
    pair = "12\\text{ and }13"
    assert math_verifier.verify("The answer is $12$ and $13$.", pair).score == 1.0
    assert math_verifier.verify("The answer is $\\boxed{12 $ and $13}$.", pair).score == 1.0  # a broken box
    assert math_verifier.verify("The answer is $12$ and $13$.", "12").score == 0.0  # two values for one
    assert math_verifier.verify("The answer is $12$ or $13$.", pair).outcome == "ambiguous"
    assert get("gsm8k").verify("The answer is 12 and 13.", "12").score == 0.0  # a pair is no number
    assert extract_answer('The answer is "72".', kind="number").answer == "72"  # a quoted value


def test_interim_boxes_before_a_final_answer_are_working():
    text = "May: $48 / 2 = \\boxed{24}$ clips.\nFinal Answer: The final answer is $72$."
    assert extract_answer(text).answer == "72"
    assert extract_answer("\\boxed{24}\nThe final answer is 72.").status == "ambiguous"  # a box of its own


# ---------------------------------------------------------------- properties of the real forms

END_TOKENS = [
    "<|eot_id|>",
    "<|im_end|>",
    "</s>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<|end|>",
    "<eos>",
    "<|im_end|>\n<|im_start|>user\nAre you sure? Maybe it is 96.",
    "</s>\n\nQ: Is it 96?\nA: 96",
]


@settings(max_examples=80, deadline=None)
@given(row=st.sampled_from(_real_forms()), token=st.sampled_from(END_TOKENS), joint=st.sampled_from(["", "\n"]))
def test_an_end_of_turn_token_never_changes_a_verdict(math_verifier, row, token, joint):
    for name in row["verifiers"]:
        verifier = math_verifier if name == "math" else get(name)
        before, after = verifier.verify_batch(
            [row["completion"], row["completion"] + joint + token], [row["reference"]] * 2
        )
        assert (before.score, before.outcome) == (after.score, after.outcome), (name, row["completion"][-80:], token)


NUMBER_FORMS = [
    lambda n: f"{n:,}",
    lambda n: f"${n:,}",
    lambda n: f"{n:,} dollars",
    lambda n: f"${n:,}.00",
    lambda n: f"USD {n:,}",
    lambda n: f"{n:,}".replace(",", " "),
    lambda n: f"{n:,}".replace(",", "{,}"),
    lambda n: "\\$" + f"{n:,}".replace(",", "{,}"),
    lambda n: f"{n:,}".replace(",", ",\\!"),
]
ACCEPTED_FORMS = [
    "The answer is {V}.",
    "#### {V}",
    "**Answer:** {V}",
    "So the answer is **{V}**.",
    "Final Answer: The final answer is {V}. I hope it is correct.",
    "The final answer is $\\boxed{{{V}}}$.",
]


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(min_value=1000, max_value=99_999_999),
    form=st.sampled_from(NUMBER_FORMS),
    statement=st.sampled_from(ACCEPTED_FORMS),
)
def test_separators_and_currency_never_change_an_accepted_verdict(math_verifier, n, form, statement):
    plain, formatted = statement.format(V=n), statement.format(V=form(n))
    for verifier in (get("gsm8k"), math_verifier):
        assert verifier.verify(plain, str(n)).score == 1.0, plain
        assert verifier.verify(formatted, str(n)).score == 1.0, (verifier.name, formatted)
        assert verifier.verify(formatted, str(n + 1)).score == 0.0, (verifier.name, formatted)
