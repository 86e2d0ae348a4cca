"""A Bradley-Terry preference reward model (seed 003 s.5.1): the loss by hand, the pair file's checks, a model
trained on pairs from the built-in task ranking held-out pairs above chance, and the model as a reward source (its
r is the reward, the rules recorded beside it) and as a DPO pair source (best over worst)."""

import json
import math
import subprocess
import sys

import pytest
import torch

from veriloop.config import ConfigError, build_config
from veriloop.errors import InputError
from veriloop.io import read_jsonl
from veriloop.models.loading import load_policy
from veriloop.preference.model import RewardModel, bradley_terry_loss, load_reward_model
from veriloop.preference.pairs import PairsConfig, load_pairs, make_pairs, verifier_pairs
from veriloop.preference.train import RMTrainConfig, pair_accuracy, train_reward_model
from veriloop.preference.verifier import PreferenceVerifier
from veriloop.training.config import TrainConfig
from veriloop.training.loop.objectives import dpo_pairs
from veriloop.training.trainer import Trainer

pytestmark = pytest.mark.timeout(400)


# ------------------------------------------------------------------------------------------------ by hand


def test_the_bradley_terry_loss_by_hand():
    # equal rewards: P(chosen) = 1/2, loss log 2; margin 2: log(1 + e^-2); margin -3: log(1 + e^3)
    assert float(bradley_terry_loss(torch.tensor([0.4]), torch.tensor([0.4]))) == pytest.approx(math.log(2))
    assert float(bradley_terry_loss(torch.tensor([1.5]), torch.tensor([-0.5]))) == pytest.approx(0.1269280110)
    value = bradley_terry_loss(torch.tensor([1.5, 0.0]), torch.tensor([-0.5, 3.0]))
    assert float(value) == pytest.approx((0.1269280110 + 3.0485873516) / 2)
    # a margin of -1000 costs 1000, not inf: logsigmoid, not log(sigmoid)
    assert float(bradley_terry_loss(torch.tensor([-1000.0]), torch.tensor([0.0]))) == pytest.approx(1000.0)
    # its gradient pushes the chosen up and the rejected down by sigmoid(-margin) / N each
    c, r = torch.tensor([1.5], requires_grad=True), torch.tensor([-0.5], requires_grad=True)
    bradley_terry_loss(c, r).backward()
    assert float(c.grad) == pytest.approx(-1 / (1 + math.exp(2))) and float(r.grad) == pytest.approx(
        1 / (1 + math.exp(2))
    )


def test_pair_accuracy_counts_a_tie_one_half():
    assert pair_accuracy([1.0, 0.0, 2.0, 5.0], [0.0, 1.0, 2.0, -1.0]) == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    with pytest.raises(ValueError):
        pair_accuracy([], [])


def test_dpo_pairs_best_over_worst_by_hand():
    rewards = torch.tensor([[0.3, -1.2, 0.9, 0.9], [0.5, 0.5, 0.5, 0.5], [-2.0, 4.0, -2.0, 1.0]])
    # row 0: best 0.9 (the first of two, index 2), worst -1.2 (index 1); row 1: all equal, no pair; row 2: 4.0
    # (index 9) over the first -2.0 (index 8)
    assert dpo_pairs(rewards, 1.0, "best-worst") == [(2, 1), (9, 8)]
    # the threshold rule, as before: accepted (>= 1.0) zipped with rejected, per row
    assert dpo_pairs(rewards, 1.0) == [(9, 8), (11, 10)]
    with pytest.raises(ValueError, match="best-worst"):
        dpo_pairs(rewards, 1.0, "middle")


def test_verifier_pairs_zip_correct_with_wrong_and_keep_a_repeated_pair_once():
    texts = ["a", "b", "a", "c", "d", "a"]
    ok = [True, False, True, False, False, True]
    # correct a, a, a against wrong b, c, d: (a, b), (a, c), (a, d); each solution once
    assert verifier_pairs(texts, ok) == [("a", "b"), ("a", "c"), ("a", "d")]
    assert verifier_pairs(["a", "a", "b", "b"], [True, True, False, False]) == [("a", "b")]
    assert verifier_pairs(["a", "b"], [True, True]) == []


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "1+1?", "chosen": "2"}, "row 2: no 'rejected' field"),
        ({"prompt": "1+1?", "chosen": "2", "rejected": 3}, "row 2: field 'rejected' is a int"),
        ({"prompt": "1+1?", "chosen": "2", "rejected": "2"}, "row 2: 'chosen' and 'rejected' are the same"),
        (["1+1?", "2", "3"], "row 2: a pair is a JSON object"),
    ],
)
def test_a_wrong_pair_file_is_named_by_file_row_and_field(tmp_path, row, message):
    path = tmp_path / "pairs.jsonl"
    good = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError, match=message) as e:
        load_pairs(str(path))
    assert str(path) in str(e.value)


def test_a_missing_or_empty_pair_file_is_said(tmp_path):
    with pytest.raises(FileNotFoundError, match="veriloop rm pairs"):
        load_pairs(str(tmp_path / "none.jsonl"))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="no rows"):
        load_pairs(str(tmp_path / "empty.jsonl"))


def test_an_untrained_reward_model_scores_every_completion_the_same(tmp_path):
    """The head starts at zero: every r is 0, so every pair is a tie (accuracy exactly 1/2) before training."""
    rm = RewardModel(load_policy("builtin:base"))
    assert rm.score(["12+3?", "12+3?"], ["12+3=15;answer=15", "12+3=14;answer=14"]) == [0.0, 0.0]


# ------------------------------------------------------------------------------------------- trained on pairs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Pairs of the base's own solutions (a correct one over a wrong one, the outcome rule's verdicts): 256 training
    and 100 held-out problems x 8 samples; a reward model trained 3 epochs on them, the held-out pairs read once."""
    root = tmp_path_factory.mktemp("rm")
    policy = load_policy("builtin:base")
    train = make_pairs(PairsConfig(problems=256, output=str(root / "train.jsonl"), seed=1), False, policy=policy)
    held = make_pairs(
        PairsConfig(problems=100, split="heldout", output=str(root / "held.jsonl"), seed=3), False, policy=policy
    )
    summary = train_reward_model(
        RMTrainConfig(data=str(root / "train.jsonl"), eval_data=str(root / "held.jsonl"), out=str(root / "rm")), False
    )
    return root, train, held, summary


def test_the_pairs_are_a_correct_solution_over_a_wrong_one_with_their_provenance(trained):
    root, made, _, _ = trained
    rows = load_pairs(str(root / "train.jsonl"))
    assert len(rows) == made["pairs"] > 100
    from veriloop.verifiers import get

    outcome = get("arithmetic-outcome")
    for r in rows[:40]:
        assert outcome.verify(r["chosen"], r["reference"]).score == 1.0
        assert outcome.verify(r["rejected"], r["reference"]).score < 1.0
        assert r["provenance"]["verifier"] == outcome.tag and r["provenance"]["policy"] == "builtin:base"


def test_the_reward_model_ranks_held_out_pairs_above_chance(trained):
    root, _, held, summary = trained
    ev = summary["eval"]
    assert ev["pairs"] == held["pairs"] > 40
    # measured 0.66 (seed 0, this machine and torch build); an untrained model is at exactly 0.5 (every r ties)
    assert ev["accuracy"] >= 0.6 and ev["loss"] < math.log(2) and ev["mean_margin"] > 0
    saved = json.loads((root / "rm" / "rm.json").read_text())
    assert saved["kind"] == "bradley-terry" and saved["metrics"]["eval"] == ev
    assert saved["pair_provenance"]["verifier"].startswith("arithmetic-outcome@")
    # the saved model scores as the trained one did
    rm = load_reward_model(root / "rm")
    rows = load_pairs(str(root / "held.jsonl"))
    chosen = rm.score([r["prompt"] for r in rows], [r["chosen"] for r in rows])
    rejected = rm.score([r["prompt"] for r in rows], [r["rejected"] for r in rows])
    assert round(pair_accuracy(chosen, rejected), 4) == ev["accuracy"]


def test_the_reward_model_is_a_reward_source_with_the_rules_recorded_beside_it(trained, tmp_path):
    root = trained[0]
    cfg = build_config(
        TrainConfig,
        {},
        {
            "run_dir": str(tmp_path / "run"),
            "reward_model": str(root / "rm"),
            "steps": 1,
            "rollout.prompts_per_step": 4,
            "rollout.group_size": 4,
            "threads": 1,
        },
    )
    Trainer(cfg, progress=False).train()
    records = read_jsonl(tmp_path / "run" / "rollouts" / "step-000001.jsonl.gz")
    verifier = PreferenceVerifier(path=str(root / "rm"), audit="arithmetic")
    again = verifier.verify_batch(
        [r["completion"] for r in records], [r["reference"] for r in records], prompts=[r["prompt"] for r in records]
    )
    rules = [
        json.loads(json.dumps(v.components))
        for v in verifier.audit.verify_batch([r["completion"] for r in records], [r["reference"] for r in records])
    ]
    for r, v, rule in zip(records, again, rules):
        assert r["reward"] == pytest.approx(v.score, abs=1e-5)  # the reward is r(prompt, completion)
        assert r["reward_components"]["reward_model"] == pytest.approx(v.score, abs=1e-5)
        assert r["reward_components"]["outcome"] == rule["outcome"]  # the rules, recorded, not rewarded
        assert r["verifier"].startswith("bradley-terry@")
    assert len({round(r["reward"], 6) for r in records}) > 1
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["accuracy"] == pytest.approx(sum(rule["outcome"] for rule in rules) / len(rules))


def test_dpo_takes_its_pairs_best_over_worst_from_the_reward_model(trained, tmp_path):
    root = trained[0]
    cfg = build_config(
        TrainConfig,
        {},
        {
            "algo": "dpo",
            "run_dir": str(tmp_path / "run"),
            "reward_model": str(root / "rm"),
            "loss.dpo_pairs": "best-worst",
            "steps": 1,
            "rollout.prompts_per_step": 4,
            "rollout.group_size": 4,
            "threads": 1,
        },
    )
    Trainer(cfg, progress=False).train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "dpo_loss" in row and row["dpo_loss"] == pytest.approx(math.log(2), abs=1e-3)  # first step: policy = ref


def test_the_reward_model_options_are_checked_before_a_run(tmp_path, trained):
    with pytest.raises(ConfigError, match="no rm.json"):
        build_config(TrainConfig, {}, {"run_dir": str(tmp_path / "r"), "reward_model": str(tmp_path)})
    with pytest.raises(ConfigError, match="selection.filter with reward_model"):
        build_config(
            TrainConfig,
            {},
            {"run_dir": str(tmp_path / "r"), "reward_model": str(trained[0] / "rm"), "selection.filter": True},
        )
    with pytest.raises(ConfigError, match="dpo_pairs"):  # an option of DPO's, set for a clipped objective
        build_config(TrainConfig, {}, {"run_dir": str(tmp_path / "r"), "loss.dpo_pairs": "best-worst"})
    with pytest.raises(InputError, match="audit"):
        PreferenceVerifier(path=str(trained[0] / "rm"))
    # the registry finds it (the package's own entry point), as it finds the prm verifier
    from veriloop.verifiers import get

    found = get("preference", path=str(trained[0] / "rm"), audit="arithmetic")
    assert found.tag == PreferenceVerifier(path=str(trained[0] / "rm"), audit="arithmetic").tag


def test_the_command_line_scores_pairs_and_refuses_a_bad_file(trained, tmp_path):
    root = trained[0]
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "veriloop.cli", "-q", "rm", *a], capture_output=True, text=True, timeout=120
    )
    done = run("score", "--rm", str(root / "rm"), "--input", str(root / "held.jsonl"), "--output", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["accuracy"] == trained[3]["eval"]["accuracy"]
    assert {"reward_chosen", "reward_rejected"} <= read_jsonl(tmp_path / "o")[0].keys()
    (tmp_path / "bad.jsonl").write_text('{"prompt": "1?", "chosen": "1"}\n')
    bad = run("train", "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "rm"))
    assert bad.returncode == 2 and "row 1: no 'rejected' field" in bad.stderr and "Traceback" not in bad.stderr
