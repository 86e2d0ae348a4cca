"""Process reward models: the exact checker, Math-Shepherd labels, the PRM, its verifier and its CLI."""

import json
import math

import pytest
import torch

from veriloop.cli import main
from veriloop.models.loading import load_policy
from veriloop.models.tiny import build_char_tokenizer
from veriloop.prm import split_steps, step_read_positions
from veriloop.prm.label import LabelConfig, label_solutions, label_steps
from veriloop.prm.metrics import roc_auc
from veriloop.prm.model import PRM, aggregate, load_prm, prm_loss
from veriloop.prm.steps import positions_in_ids
from veriloop.prm.train import PRMTrainConfig, load_labels, shuffled_step_labels, targets, train_prm
from veriloop.rollout.sampler import Generation, SamplingParams
from veriloop.tasks.arithmetic import make_problem
from veriloop.verifiers import VerifierError, get
from veriloop.verifiers.arithmetic import sound_steps

# a trained PRM's held-out AUC against the exact step checker must exceed this (the two tests below)
AUC_FLOOR = 0.65

# ---------------------------------------------------------------- ground truth and metrics


def test_exact_checker_step_by_step():
    assert sound_steps("2+3=5;5*4=20;answer=20", "(2+3)*4") == [True, True, True]
    assert sound_steps("4*2+3=5;5*4=20", "(2+3)*4") == [False, False]  # not an equation
    assert sound_steps("2+3=6;6*4=24;answer=24", "(2+3)*4") == [False, False, False]  # false first step
    assert sound_steps("2+3=5;5*4=21;answer=21", "(2+3)*4") == [True, False, False]
    assert sound_steps("2+3=5;5*4=20;answer=21", "(2+3)*4") == [True, True, False]  # wrong final answer
    # the compensated slip: right answer, unsound from its first step
    assert sound_steps("7-3=-4;-4*2=8;answer=8", "(7-3)*2") == [False, False, False]
    assert sound_steps("3+4=7;", "(3+4)*(5-1)") == [True]  # a sound start, any order of independent steps
    assert sound_steps("5-1=4;3+4=7;7*4=28;answer=28", "(3+4)*(5-1)") == [True] * 4


def test_roc_auc_hand_values():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)  # a tie counts one half
    assert roc_auc([0.9, 0.1], [1, 0]) == 1.0 and roc_auc([0.1, 0.9], [1, 0]) == 0.0
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([0.1, 0.2], [1, 1])


def test_aggregations():
    s = [0.9, 0.5, 0.8]
    assert aggregate(s, "min") == 0.5 and aggregate(s, "last") == 0.8
    assert aggregate(s, "prod") == pytest.approx(0.36)
    assert aggregate([], "min") == 0.0
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(s, "mean")


def test_prm_losses_by_hand():
    logits, hard = torch.tensor([0.0, math.log(3.0)]), torch.tensor([1.0, 0.0])
    # bce: -(log 0.5 + log(1 - 0.75)) / 2
    assert float(prm_loss(logits, hard, "bce")) == pytest.approx(-(math.log(0.5) + math.log(0.25)) / 2)
    soft = torch.tensor([0.25, 0.75])
    assert float(prm_loss(logits, soft, "mse")) == pytest.approx(((0.5 - 0.25) ** 2 + 0.0**2) / 2)
    # soft-label cross-entropy is minimised at p = s: zero gradient at logit = log(s / (1 - s))
    z = torch.tensor([math.log(1 / 3), math.log(3.0)], requires_grad=True)
    prm_loss(z, soft, "soft_ce").backward()
    assert torch.allclose(z.grad, torch.zeros(2), atol=1e-7)
    with pytest.raises(ValueError, match="hard labels"):
        prm_loss(logits, soft, "bce")


def test_training_targets_per_step_and_cumulative():
    row = {
        "steps": ["a", "b", "c", "d"],
        "soft_labels": [0.5, 0.0, 1.0, 1.0],
        "hard_labels": [1.0, 0.0, 1.0, 1.0],
        "outcome": 1.0,
    }
    assert targets(row, "soft") == [0.5, 0.0, 1.0, 1.0]
    # a later step that reaches the answer again (a repaired mistake) does not mend the path: running min
    assert targets(row, "soft", cumulative=True) == [0.5, 0.0, 0.0, 0.0]
    assert targets(row, "hard", cumulative=True) == [1.0, 0.0, 0.0, 0.0]
    assert targets(row, "outcome") == [1.0] * 4


# ---------------------------------------------------------------- where steps are read


def test_read_positions_are_the_separators_and_the_last_token():
    tok = build_char_tokenizer()
    text = "2+3=5;5*4=20;answer=20"
    assert step_read_positions(tok, text, split_steps(text)) == [5, 12, 21]
    ids = tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
    assert positions_in_ids(tok, ids, text, split_steps(text)) == [5, 12, 21]


def test_positions_in_ids_when_the_sampled_tokens_differ_from_a_retokenization():
    tok = build_char_tokenizer()
    text = "2+3=5;answer=5"

    class Merged:  # a tokenizer that re-tokenizes differently from how the ids were sampled
        def __call__(self, s, add_special_tokens=False):
            return {"input_ids": [0]}

        def decode(self, ids, skip_special_tokens=False):
            return tok.decode(ids, skip_special_tokens=skip_special_tokens)

    ids = tok(text, add_special_tokens=False).input_ids
    assert positions_in_ids(Merged(), ids, text, split_steps(text)) == [5, 13]


# ---------------------------------------------------------------- Math-Shepherd labels


class ScriptedCompleter:
    """Completes each prefix with the listed continuations, in turn (a policy whose labels are known)."""

    def __init__(self, continuations: dict[str, list[str]]):
        self.tokenizer = build_char_tokenizer()
        self.continuations = continuations

    def encode_prompt(self, text):
        return self.tokenizer(text).input_ids

    def sample(self, prompt_ids, params, *, generator, n, stop_ids=()):
        ids, lps = [], []
        for p in prompt_ids:
            prefix = self.tokenizer.decode(p, skip_special_tokens=True).split("?", 1)[1]
            for k in range(n):
                options = self.continuations[prefix]
                text = options[k % len(options)]
                ids.append(self.tokenizer(text, add_special_tokens=False).input_ids + [self.tokenizer.eos_token_id])
                lps.append([0.0] * len(ids[-1]))
        return Generation(ids, lps, ["eos"] * len(ids))

    def completion_text(self, ids, finish):
        return self.tokenizer.decode(ids[:-1])


def test_math_shepherd_labels_by_hand():
    # (2+3)*4 = 20.  After "2+3=5;" 3 of 4 completions reach 20; after the wrong "2+3=5;5*4=21;" none does.
    completer = ScriptedCompleter(
        {
            "2+3=5;": ["5*4=20;answer=20", "5*4=20;answer=20", "5*4=20;answer=20", "5*4=9;answer=9"],
            "2+3=5;5*4=21;": ["answer=21"],
            "2+3=5;5*4=20;": ["answer=20"],
        }
    )
    p = make_problem("(2+3)*4")
    sols = [(p, "2+3=5;5*4=21;answer=21"), (p, "2+3=5;5*4=20;answer=20")]
    rows = label_solutions(
        sols,
        completer,
        get("arithmetic-outcome"),
        4,
        SamplingParams(),
        None,
        "semicolon",
        {"policy": "scripted", "task": "arithmetic"},
    )
    assert rows[0]["soft_labels"] == [0.75, 0.0, 0.0] and rows[0]["hard_labels"] == [1.0, 0.0, 0.0]
    assert rows[1]["soft_labels"] == [0.75, 1.0, 1.0] and rows[1]["hard_labels"] == [1.0, 1.0, 1.0]
    assert rows[0]["outcome"] == 0.0 and rows[1]["outcome"] == 1.0
    prov = rows[0]["provenance"]
    assert prov["completions"] == 4 and prov["verifier"] == "arithmetic-outcome@5" and prov["policy"] == "scripted"
    assert prov["splitter"] == "semicolon" and prov["sampling"]["temperature"] == 1.0


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """Labels from the shipped base on a few problems, and a PRM trained on them."""
    root = tmp_path_factory.mktemp("prm")
    policy = load_policy("builtin:base")
    train = LabelConfig(problems=96, solutions=4, completions=4, output=str(root / "train.jsonl"))
    held = LabelConfig(problems=24, solutions=2, completions=4, split="heldout", output=str(root / "held.jsonl"))
    val = LabelConfig(problems=24, solutions=2, completions=4, split="validation", output=str(root / "val.jsonl"))
    summary = label_steps(train, progress=False, policy=policy)
    label_steps(held, progress=False, policy=policy)
    label_steps(val, progress=False, policy=policy)
    cfg = PRMTrainConfig(data=train.output, eval_data=held.output, val_data=val.output, out=str(root / "prm"), epochs=3)
    return root, summary, train_prm(cfg, progress=False)


def test_the_epoch_is_chosen_on_validation_and_held_out_is_read_once(labelled):
    root, _, summary = labelled
    history = summary["validation_by_epoch"]
    assert [h["epoch"] for h in history] == [1, 2, 3] and summary["select"] == "targets"
    best = max(history, key=lambda h: h["auc_vs_targets"])
    assert summary["selected_epoch"] == best["epoch"]
    # the saved PRM is the selected epoch's: its validation AUC is that epoch's, recomputed from the files
    from veriloop.prm.train import evaluate_prm

    val = load_labels(str(root / "val.jsonl"))
    assert evaluate_prm(load_prm(root / "prm"), val)["auc_vs_targets"] == pytest.approx(
        best["auc_vs_targets"], abs=1e-4
    )
    problems = {r["reference"] for r in val}
    assert not problems & {r["reference"] for r in load_labels(str(root / "held.jsonl"))}
    assert not problems & {r["reference"] for r in load_labels(str(root / "train.jsonl"))}


def test_label_file_rows_are_consistent(labelled):
    root, summary, _ = labelled
    rows = load_labels(str(root / "train.jsonl"))
    assert summary["solutions"] == len(rows) > 0
    for r in rows:
        assert len(r["steps"]) == len(r["soft_labels"]) == len(r["hard_labels"]) == len(split_steps(r["completion"]))
        assert all(0 <= s <= 1 for s in r["soft_labels"])
        assert r["hard_labels"] == [float(s > 0) for s in r["soft_labels"]]
        assert r["soft_labels"][-1] == r["outcome"]  # the last step is the solution's own outcome
        assert r["provenance"]["policy"] == "builtin:base" and r["provenance"]["completions"] == 4


def test_trained_prm_reports_aucs_and_loads_as_a_verifier(labelled):
    root, _, summary = labelled
    ev = summary["eval"]
    # The reported AUCs are the ones the maths gives: recompute them from the saved PRM and the held-out file.
    held = load_labels(str(root / "held.jsonl"))
    flat = [
        s
        for row in load_prm(root / "prm").score([r["prompt"] for r in held], [r["completion"] for r in held])
        for s in row
    ]
    truth = [x for r in held for x in sound_steps(r["completion"], r["reference"])]
    hard = [bool(x) for r in held for x in r["hard_labels"]]
    assert ev["steps"] == len(flat) == len(truth)
    assert ev["auc_vs_exact_checker"] == pytest.approx(roc_auc(flat, truth), abs=1e-4)
    assert ev["auc_vs_hard_labels"] == pytest.approx(roc_auc(flat, hard), abs=1e-4)
    assert ev["auc_vs_hard_labels"] > 0.6  # it learned something about its own labels
    # ... and its scores rank sound steps above unsound ones (python benchmarks/prm_controls.py: 0.697-0.727 over
    # training seeds 0-2, where PRMs trained on shuffled labels reach 0.50-0.57; see the next test)
    assert ev["auc_vs_exact_checker"] > AUC_FLOOR
    v = get("prm", path=str(root / "prm"))
    verdict = v.verify("2+3=5;5*4=20;answer=20", "(2+3)*4")
    assert len(verdict.steps) == 3 and all(0 < s < 1 for s in verdict.steps)
    assert verdict.score == pytest.approx(min(verdict.steps)) and verdict.version.startswith("prm@")
    last = get("prm", path=str(root / "prm"), aggregation="last").verify("2+3=5;5*4=20;answer=20", "(2+3)*4")
    assert last.score == pytest.approx(verdict.steps[-1])
    # the same weights score the same text the same way, through the model object too
    prm = load_prm(root / "prm")
    assert prm.score(["(2+3)*4?"], ["2+3=5;5*4=20;answer=20"])[0] == pytest.approx(list(verdict.steps))
    assert get("prm", path=str(root / "prm")).verify("", "(2+3)*4").score == 0.0


def test_a_prm_trained_on_shuffled_labels_stays_under_the_auc_floor(labelled):
    """The floor above is one a broken PRM cannot reach: each training row takes another row's step labels
    (``shuffled_step_labels``: no step-level signal left), and the same training reads them."""
    root, _, _ = labelled
    rows = load_labels(str(root / "train.jsonl"))
    shuffled = shuffled_step_labels(rows, seed=0)
    assert [len(r["soft_labels"]) for r in shuffled] == [len(r["steps"]) for r in rows]
    assert sum(r["soft_labels"] != s["soft_labels"] for r, s in zip(rows, shuffled)) > len(rows) // 2
    (root / "shuffled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shuffled))
    cfg = PRMTrainConfig(
        data=str(root / "shuffled.jsonl"),
        eval_data=str(root / "held.jsonl"),
        val_data=str(root / "val.jsonl"),
        out=str(root / "prm-shuffled"),
        epochs=3,
    )
    assert train_prm(cfg, progress=False)["eval"]["auc_vs_exact_checker"] < AUC_FLOOR


def test_prm_without_a_prompt_template_asks_for_prompts(tmp_path):
    prm = PRM(load_policy("builtin:base"), "semicolon", "")
    prm.save(tmp_path / "p")
    v = get("prm", path=str(tmp_path / "p"))
    with pytest.raises(VerifierError, match="prompts"):
        v.verify("1+1=2;answer=2", "1+1")
    assert len(v.verify_batch(["1+1=2;answer=2"], ["1+1"], prompts=["1+1?"])[0].steps) == 2


def test_prm_cli_score_and_errors(labelled, tmp_path, capsys):
    root, _, _ = labelled
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"reference": "(2+3)*4", "completion": "2+3=5;5*4=20;answer=20"}) + "\n")
    assert (
        main(
            [
                "prm",
                "score",
                "--prm",
                str(root / "prm"),
                "--input",
                str(inp),
                "--output",
                str(tmp_path / "o.jsonl"),
                "--aggregation",
                "prod",
            ]
        )
        == 0
    )
    row = json.loads((tmp_path / "o.jsonl").read_text())
    assert row["score"] == pytest.approx(math.prod(row["step_scores"]), rel=1e-5)
    assert main(["prm", "train", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["prm", "train", "--data", str(root / "train.jsonl"), "--labels", "soft", "--loss", "bce"]) == 2
    assert "0/1 targets" in capsys.readouterr().err
    with pytest.raises(VerifierError, match="not a PRM directory"):
        get("prm", path=str(tmp_path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "1+1?", "completion": "x"}) + "\n")
    assert main(["prm", "train", "--data", str(bad)]) == 2
    assert "row 1 lacks" in capsys.readouterr().err
