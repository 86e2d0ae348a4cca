"""Every `--algo` recipe trains the shipped base on the built-in task and beats it on held-out problems
(the budget and the margin: `algo_learning.py`).  This module: grpo and the recipes that are GRPO with
another estimator or loss, and the likelihood recipes; `test_more_algos_learn_on_cpu.py` the rest.

``distill`` imitates the filtered samples of the policy this module's ``grpo`` run produced.  ``sft``
learns from a correct teacher (the task's teacher with its slips off): the base was already fine-tuned to
convergence on the slipping teacher, so more of that data cannot improve it (the benchmark shows both).
"""

import pytest
from algo_learning import FIRST, SECOND, assert_algo_improves, base_heldout_accuracy

from veriloop.training.recipes import RECIPES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("algos")


@pytest.fixture(scope="module")
def base_accuracy():
    return base_heldout_accuracy()


def test_every_recipe_is_covered():
    both = FIRST + SECOND
    assert len(both) == len(set(both)) and FIRST[0] == "grpo"
    assert set(both) == set(RECIPES), f"recipes without a learning test: {sorted(set(RECIPES) - set(both))}"


@pytest.mark.parametrize("algo", FIRST)
def test_algo_improves_heldout_accuracy(algo, root, base_accuracy):
    teacher = root / "grpo" / "seed-0" / "final"  # distill imitates grpo's policy
    extra = {"rollout.teacher": str(teacher)} if algo == "distill" else {}
    if algo == "sft":
        extra = {"task.teacher.multiplication_slip": 0.0, "task.teacher.subtraction_slip": 0.0}
    if algo == "distill" and not teacher.is_dir():
        pytest.fail("distill runs after grpo (its teacher); run the whole module")
    assert_algo_improves(algo, root, base_accuracy, extra)
