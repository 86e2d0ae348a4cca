"""Every `--algo` recipe trains the shipped base on the built-in task and beats it on held-out problems
(the budget and the margin: `algo_learning.py`).  This module: the recipes with something of their own
to train or score with (PPO's critic, grpo_process's PRM), DAPO's dynamic sampling and REINFORCE;
`test_every_algo_learns_on_cpu.py` the rest, and the check that every recipe is in one of the two.

``grpo_process`` scores steps with a PRM trained here on Math-Shepherd labels of the base's own samples,
and adds the outcome advantage (``process.outcome_weight 1``): PRM rewards alone are exploited by the
policy (docs/concepts/process-rewards.md).
"""

import pytest
from algo_learning import SECOND, assert_algo_improves, base_heldout_accuracy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("more-algos")


@pytest.fixture(scope="module")
def base_accuracy():
    return base_heldout_accuracy()


@pytest.fixture(scope="module")
def prm_dir(root):
    from veriloop.prm.label import LabelConfig, label_steps
    from veriloop.prm.train import PRMTrainConfig, train_prm

    labels = LabelConfig(problems=100, solutions=4, completions=4, output=str(root / "prm-labels.jsonl"))
    label_steps(labels, progress=False)
    train_prm(PRMTrainConfig(data=labels.output, out=str(root / "prm"), epochs=2), progress=False)
    return str(root / "prm")


@pytest.mark.parametrize("algo", SECOND)
def test_algo_improves_heldout_accuracy(algo, root, base_accuracy, request):
    extra = {}
    if algo == "grpo_process":
        extra = {"process.prm": request.getfixturevalue("prm_dir"), "process.outcome_weight": 1.0}
    assert_algo_improves(algo, root, base_accuracy, extra)
