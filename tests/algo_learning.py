"""What the two every-recipe learning modules share (`test_every_algo_learns_on_cpu.py` and
`test_more_algos_learn_on_cpu.py`): the budget, the held-out evaluation and one run per seed.

Short real runs (30 steps of 8 prompts x 8 completions; PPO gets 64 prompts of one completion, so every
method sees the same 1,920 completions), greedy evaluation on 200 held-out problems, averaged over two
fixed seeds: one 30-step run's gain varies by about 0.03 between seeds (online_rft over seeds 0-3:
0.73-0.80), as much as the margin asked for.  The recipes are split over two modules only so that
pytest-xdist (whole files per worker) can give them to both workers: together they are half the suite.
"""

from veriloop.config import build_config
from veriloop.evaluation.evaluate import EvalConfig, evaluate
from veriloop.models.loading import load_policy
from veriloop.training.config import TrainConfig
from veriloop.training.trainer import Trainer

STEPS, PROMPTS, GROUP, HELDOUT, SEEDS, MARGIN = 30, 8, 8, 200, (0, 1), 0.04
# Written out, not derived from RECIPES: a recipe added without a learning test in either module fails
# test_every_recipe_is_covered.  distill needs grpo's policy as its teacher, so both are in the first module,
# grpo first.
FIRST = ["grpo", "distill", "dpo", "dr_grpo", "gspo", "online_rft", "rft", "rloo", "sft"]
SECOND = ["dapo", "grpo_process", "ppo", "reinforce"]


def settings(algo, run_dir):
    budget = (
        {"rollout.prompts_per_step": PROMPTS * GROUP, "rollout.group_size": 1}
        if algo == "ppo"
        else {"rollout.prompts_per_step": PROMPTS, "rollout.group_size": GROUP}
    )
    return {
        "algo": algo,
        "run_dir": str(run_dir),
        "steps": STEPS,
        "seed": 0,
        "save_rollouts": False,
        "checkpoint_every": 10**6,
        "task.arithmetic.heldout_size": HELDOUT,
        **budget,
    }


def heldout(policy, cfg):
    return evaluate(policy, cfg.task.build().heldout(), cfg.task.eval_verifiers(), EvalConfig(n_samples=0))


def base_heldout_accuracy():
    cfg = build_config(TrainConfig, {}, {"task.arithmetic.heldout_size": HELDOUT})
    return heldout(load_policy(cfg.policy), cfg).greedy_accuracy


def assert_algo_improves(algo, root, base_accuracy, extra):
    """Train ``algo`` once per seed under ``root/algo/seed-S`` and ask for MARGIN over the base on average."""
    accuracies = []
    for seed in SEEDS:
        run_dir = root / algo / f"seed-{seed}"
        cfg = build_config(TrainConfig, {}, {**settings(algo, run_dir), "seed": seed, **extra})
        Trainer(cfg, progress=False).train()
        accuracies.append(heldout(load_policy(str(run_dir / "final")), cfg).greedy_accuracy)
    after = sum(accuracies) / len(accuracies)
    print(f"{algo}: held-out greedy {base_accuracy:.3f} -> {after:.3f} (seeds {SEEDS}: {accuracies})")
    assert after >= base_accuracy + MARGIN, (algo, base_accuracy, accuracies)
