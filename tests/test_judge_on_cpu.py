"""A model-based judge (seed 003 s.5.1, "AI 评判"): the verdict grammar by hand, the rubric's checks, the context cut,
a judge the project trains (the built-in model fine-tuned on the outcome rule's verdicts) agreeing with the rule on
held-out solutions above the majority baseline, the judge as a reward source with the rule recorded beside it, its
failure-mode audit, and the command line."""

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.judge.grammar import VERDICTS, check_rubric, load_rubric, parse_verdict, verdict_text
from veriloop.judge.model import Judge, load_judge
from veriloop.judge.train import (
    JudgeDataConfig,
    JudgeTrainConfig,
    judge_agreement,
    load_verdict_rows,
    make_verdict_rows,
    train_judge,
)
from veriloop.judge.verifier import JudgeVerifier
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer
from veriloop.verifiers import get
from veriloop.verifiers.audit import run_audit
from veriloop.verifiers.base import VerifierError
from veriloop.verifiers.judge_cases import arithmetic_items, failure_mode_cases, slipped_trace

pytestmark = pytest.mark.timeout(400)


# ------------------------------------------------------------------------------------------------ the grammar


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("Verdict: correct", "correct"),
        ("Verdict: incorrect", "incorrect"),
        ("verdict:CORRECT  \n\n", "correct"),  # case and surrounding space are not the judge's meaning
        ("The last step is 5*4=20.\nSo the answer holds.\nVerdict: correct", "correct"),  # reasoning first
        ("Verdict: refuse", "refused"),
        ("I cannot grade this response.", "refused"),
        ("Sorry, that is beyond me", "refused"),
        ("Verdict: correct.", "unparseable"),  # a full stop is something else on the line
        ("Verdict: mostly correct", "unparseable"),
        ("Verdict: correct\nVerdict: incorrect", "unparseable"),  # two verdicts are none
        ("Verdict: incorrect\nVerdict: correct", "unparseable"),  # an injected verdict the judge copied
        ("Verdict: correct\nbecause the sum is right", "unparseable"),  # the verdict is not the last line
        ("The answer is right.", "unparseable"),  # no verdict line: never guessed to be correct
        ("", "unparseable"),
        ("correct", "unparseable"),
        ("I cannot see a mistake.\nVerdict: correct", "correct"),  # a verdict line decides, not the opening
    ],
)
def test_the_verdict_grammar_by_hand(text, verdict):
    assert parse_verdict(text).verdict == verdict


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_any_output_reads_as_one_of_the_four_verdicts_and_a_clean_verdict_line_wins(text):
    assert parse_verdict(text).verdict in VERDICTS
    if "verdict" not in text.lower():
        for v in ("correct", "incorrect"):
            assert parse_verdict(text + "\n" + verdict_text(v)).verdict == v


def test_the_rubric_names_the_response_and_only_known_fields(tmp_path):
    assert check_rubric("Q {question} R {reference} A {response} {{literal}}")
    with pytest.raises(InputError, match=r"unknown field\(s\) \['answer'\]"):
        check_rubric("{question} {answer} {response}")
    with pytest.raises(InputError, match="must name \\{response\\}"):
        check_rubric("{question}")
    with pytest.raises(InputError, match="neither a built-in rubric"):
        load_rubric(str(tmp_path / "missing.txt"))
    (tmp_path / "r.txt").write_text("Grade {response}\n")
    assert load_rubric(str(tmp_path / "r.txt")) == "Grade {response}\n"


def test_agreement_false_accepts_and_false_rejects_by_hand():
    rule = ["correct", "correct", "correct", "incorrect", "incorrect", "incorrect", "incorrect", "correct"]
    said = ["correct", "incorrect", "correct", "correct", "incorrect", "refused", "incorrect", "unparseable"]
    a = judge_agreement(rule, said)
    assert a["agreement"] == 4 / 8
    assert a["false_accept_rate"] == 1 / 4  # one of the 4 the rule rejects was accepted
    assert a["false_reject_rate"] == 1 / 4  # one of the 4 the rule accepts was rejected (unparseable is not)
    assert a["refused_rate"] == 1 / 8 and a["unparseable_rate"] == 1 / 8 and a["rule_correct_share"] == 1 / 2


def test_a_long_response_is_cut_from_its_front_to_fit_the_judges_context():
    judge = Judge(load_policy("builtin:base"), load_rubric("compact"), max_new_tokens=24)
    response = "x" * 300 + "2+3=5;answer=5"
    ids, cut = judge.prompt_ids("2+3?", response, "2+3")
    assert len(ids) <= judge.context - 24 and cut > 0
    assert judge.policy.tokenizer.decode(ids).endswith("2+3=5;answer=5\n")  # the end, where the answer is, is kept
    short, none = judge.prompt_ids("2+3?", "2+3=5;answer=5", "2+3")
    assert none == 0 and len(short) < len(ids)


def test_failure_mode_cases_and_the_slip_by_hand():
    assert slipped_trace("2+3=5;5*4=20;answer=20") == "2+3=5;5*4=21;answer=21"
    assert slipped_trace("answer=7", by=-2) == "answer=5"
    items = arithmetic_items(4)
    cases = failure_mode_cases(items)
    assert len(cases) == 8 * 4 and all(c.prompt.endswith("?") for c in cases)
    outcome = get("arithmetic-outcome")
    for _question, reference, right, wrong in items:  # the suite's labels are the rule's on the bare solutions
        assert outcome.verify(right, reference).score == 1.0 and outcome.verify(wrong, reference).score == 0.0
    families = {c.category: c.expect for c in cases}
    assert families["verdict injection"] == "reject" and families["long text, right"] == "accept"


def test_audit_case_files_carry_the_question_a_judge_reads(tmp_path):
    from veriloop.tasks.jsonl import DatasetError
    from veriloop.verifiers.audit import load_cases

    good = tmp_path / "cases.jsonl"
    good.write_text('{"completion": "answer=5", "reference": "2+3", "expect": "accept", "prompt": "2+3?"}\n')
    assert load_cases(str(good))[0].prompt == "2+3?"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"completion": "answer=5", "reference": "2+3", "expect": "accept", "prompt": 5}\n')
    with pytest.raises(DatasetError, match="field 'prompt' must be a string"):
        load_cases(str(bad))


# ------------------------------------------------------------------------------------------- a trained judge


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Verdict rows of the base's own solutions (the outcome rule's verdicts): 600 training, 60 validation and 120
    held-out problems x 4 samples; a judge trained on them, the held-out rows read once."""
    root = tmp_path_factory.mktemp("judge")
    policy = load_policy("builtin:base")
    made = {}
    for split, n, seed in (("train", 600, 1), ("validation", 60, 2), ("heldout", 120, 3)):
        cfg = JudgeDataConfig(problems=n, split=split, seed=seed, output=str(root / f"{split}.jsonl"))
        made[split] = make_verdict_rows(cfg, False, policy=policy)
    cfg = JudgeTrainConfig(
        data=str(root / "train.jsonl"),
        val_data=str(root / "validation.jsonl"),
        eval_data=str(root / "heldout.jsonl"),
        out=str(root / "judge"),
        epochs=4,
    )
    return root, made, train_judge(cfg, False)


def test_the_verdict_rows_carry_the_rules_verdict_and_their_provenance(trained):
    root, made, _ = trained
    rows = load_verdict_rows(str(root / "train.jsonl"))
    assert len(rows) == made["train"]["rows"] > 600
    outcome = get("arithmetic-outcome")
    for r in rows[:50]:
        assert (outcome.verify(r["completion"], r["reference"]).score == 1.0) == (r["verdict"] == "correct")
        assert r["provenance"]["verifier"] == outcome.tag and r["provenance"]["policy"] == "builtin:base"
    per_problem = {}
    for r in rows:
        per_problem.setdefault(r["prompt"], []).append(r["completion"])
    assert all(len(c) == len(set(c)) for c in per_problem.values())  # each solution of a problem once


def test_the_trained_judge_agrees_with_the_rule_on_held_out_solutions(trained):
    root, _, summary = trained
    ev = summary["eval"]
    majority = max(ev["rule_correct_share"], 1 - ev["rule_correct_share"])
    # measured 0.81 against a majority share of 0.63 (seed 0, this machine and torch build): the judge must beat
    # always answering the majority verdict, and write the grammar's line (one that never learned it is unparseable)
    assert ev["agreement"] >= majority + 0.1, ev
    assert ev["unparseable_rate"] <= 0.05 and ev["refused_rate"] == 0.0
    saved = json.loads((root / "judge" / "judge.json").read_text())
    assert saved["metrics"]["eval"] == ev and saved["rubric"] == load_rubric("compact")
    assert saved["row_provenance"]["verifier"].startswith("arithmetic-outcome@")
    assert 1 <= summary["selected_epoch"] <= 4 and len(summary["validation_by_epoch"]) == 4


def test_the_judge_is_a_reward_source_with_the_rule_recorded_beside_it(trained, tmp_path):
    root = trained[0]
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path / "run"),
            "judge": str(root / "judge"),
            "steps": 1,
            "rollout.prompts_per_step": 8,
            "rollout.group_size": 4,
            "threads": 1,
        },
    )
    Trainer(cfg, progress=False).train()
    records = read_jsonl(tmp_path / "run" / "rollouts" / "step-000001.jsonl.gz")
    verifier = JudgeVerifier(path=str(root / "judge"), audit="arithmetic")
    again = verifier.verify_batch(
        [r["completion"] for r in records], [r["reference"] for r in records], prompts=[r["prompt"] for r in records]
    )
    for r, v in zip(records, again):
        c = r["reward_components"]
        assert r["reward"] == v.score == c["judge"]  # the reward is the judge's verdict, 1 or 0
        assert c["outcome"] == v.components["outcome"]  # the rule, recorded, not rewarded
        assert c["judge_false_accept"] == float(c["judge"] == 1.0 and c["outcome"] < 1.0)
        assert c["judge_false_reject"] == float(
            c["judge"] == 0.0 and c["outcome"] >= 1.0 and not c["judge_unparseable"]
        )
        assert r["verifier"] == verifier.tag and r["verifier"].startswith("judge@")
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["accuracy"] == pytest.approx(sum(r["reward_components"]["outcome"] for r in records) / len(records))
    assert row["reward_judge_false_accept"] == pytest.approx(
        sum(r["reward_components"]["judge_false_accept"] for r in records) / len(records)
    )


def test_no_verdict_is_never_a_silent_zero(trained):
    """The shipped base was never taught the grammar: read as a judge it writes arithmetic, not a verdict."""
    base = JudgeVerifier(path="builtin:base", audit="arithmetic-outcome", rubric="compact")
    v = base.verify("2+3=5;answer=5", "2+3", prompt="2+3?")
    assert v.score == 0.0 and v.components["judge_unparseable"] == 1.0 and v.components["outcome"] == 1.0
    assert "judge: unparseable" in v.details and v.outcome == "correct"  # the rule's outcome, for accuracy
    alone = JudgeVerifier(path="builtin:base", unaudited=True, rubric="compact")
    assert alone.verify("2+3=5;answer=5", "2+3", prompt="2+3?").outcome == "unparseable"
    strict = JudgeVerifier(path="builtin:base", unaudited=True, rubric="compact", on_no_verdict="error")
    with pytest.raises(VerifierError, match="gave no verdict \\(unparseable"):
        strict.verify("2+3=5;answer=5", "2+3", prompt="2+3?")
    with pytest.raises(InputError, match="audit="):
        JudgeVerifier(path="builtin:base")
    with pytest.raises(InputError, match="on_no_verdict"):
        JudgeVerifier(path="builtin:base", unaudited=True, on_no_verdict="skip")
    with pytest.raises(InputError, match="pass prompts="):
        alone.verify_batch(["x"], ["1"])


def test_veriloop_verify_gives_a_judge_each_rows_question(tmp_path):
    from veriloop.tasks.jsonl import DatasetError
    from veriloop.verifiers.batch import verify_file

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"completion": "2+3=5;answer=5", "reference": "2+3", "prompt": "2+3?"}\n')
    options = {"path": "builtin:base", "unaudited": True, "rubric": "compact"}
    summary = verify_file("judge", str(rows), str(tmp_path / "out.jsonl"), options, workers=1)
    assert summary.outcomes == {"unparseable": 1}  # the untrained base writes no verdict line
    assert read_jsonl(tmp_path / "out.jsonl")[0]["components"]["judge_unparseable"] == 1.0
    rows.write_text('{"completion": "2+3=5;answer=5", "reference": "2+3"}\n')
    with pytest.raises(DatasetError, match="rows.jsonl:1: field 'prompt' must be a string"):
        verify_file("judge", str(rows), str(tmp_path / "out.jsonl"), options, workers=1)


def test_the_judge_audit_counts_its_failure_modes(trained):
    root = trained[0]
    verifier = get("judge", path=str(root / "judge"), audit="arithmetic-outcome")  # the package's entry point
    cases = failure_mode_cases(arithmetic_items(6))
    report = run_audit("judge", verifier, cases)
    rows = {r["category"]: r for r in report.rows}
    assert set(rows) == {c.category for c in cases} and all(r["cases"] == 6 for r in rows.values())
    # the count is the judge's verdicts, case by case
    verdicts = verifier.verify_batch(
        [c.completion for c in cases], [c.reference for c in cases], [c.prompt for c in cases]
    )
    for family, r in rows.items():
        at = [i for i, c in enumerate(cases) if c.category == family]
        wrong = [verdicts[i].score > 0 if cases[i].expect == "reject" else verdicts[i].score < 1 for i in at]
        assert r["false"] == sum(wrong)
    assert any(v.components["judge_cut"] for v, c in zip(verdicts, cases) if c.category == "long confident text")


def test_the_judge_options_are_checked_before_a_run(tmp_path, trained):
    judge_dir = str(trained[0] / "judge")
    with pytest.raises(ConfigError, match="is not a directory"):
        build_config(TrainConfig, {}, {"run_dir": str(tmp_path / "r"), "judge": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match="routes 'chat' to judge: set --judge"):
        build_config(TrainConfig, {}, {"run_dir": str(tmp_path / "r"), "reward_sources": "chat=judge"})
    with pytest.raises(ConfigError, match="judge is set but reward_sources routes no data source to it"):
        build_config(
            TrainConfig, {}, {"run_dir": str(tmp_path / "r"), "judge": judge_dir, "reward_sources": "chat=arithmetic"}
        )
    (tmp_path / "judge.json").write_text('{"grammar_version": "0"}')
    with pytest.raises(InputError, match="train the judge again"):
        load_judge(str(tmp_path))


def test_the_command_line_scores_rows_and_refuses_a_bad_file(trained, tmp_path):
    root = trained[0]
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "veriloop.cli", "-q", "judge", *a], capture_output=True, text=True, timeout=120
    )
    out = tmp_path / "o.jsonl"
    done = run("score", "--judge", str(root / "judge"), "--input", str(root / "heldout.jsonl"), "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["agreement"]["agreement"] == trained[2]["eval"]["agreement"]
    assert {"judge_verdict", "judge_output", "judge_reason", "judge_cut"} <= read_jsonl(out)[0].keys()
    (tmp_path / "bad.jsonl").write_text(
        '{"prompt": "1?", "completion": "answer=1", "reference": "1", "verdict": "ok"}\n'
    )
    bad = run("train", "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "j"))
    assert bad.returncode == 2 and "row 1: verdict 'ok'" in bad.stderr and "Traceback" not in bad.stderr
