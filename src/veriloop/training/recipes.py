"""Every method as a configuration of one loop (DeepSeekMath, section 5.2.1).

Seen from the gradient, methods differ in three things only: where the data comes from
(``rollout.source``), where the reward comes from (``verifier``), and the coefficient that
multiplies each token's log-prob gradient (``advantage.estimator`` + ``loss.policy_loss``):

| recipe      | data                 | coefficient                                   |
|-------------|----------------------|-----------------------------------------------|
| sft         | the task's traces    | 1                                             |
| rft         | frozen initial policy| 1[accepted]                                   |
| online_rft  | current policy       | 1[accepted]                                   |
| distill     | a teacher model      | 1[accepted]                                   |
| dpo         | frozen initial policy| beta sigma'(.) on accepted vs rejected pairs  |
| reinforce   | current policy       | r (KL in the reward)                          |
| rloo        | current policy       | r - mean of the others (KL in the reward)     |
| ppo         | current policy       | GAE with a learned critic (KL in the reward)  |
| grpo        | current policy       | (r - mean) / std, clipped, KL in the loss     |
| dr_grpo     | current policy       | r - mean, constant length normaliser          |
| gspo        | current policy       | grpo advantage, sequence-level ratio          |
| dapo        | current policy       | clip-higher, token-mean, dynamic sampling, overlong shaping, no KL |

A recipe only sets defaults: ``--algo rloo --loss.policy_loss clip`` is RLOO with PPO's clip.
"""

from __future__ import annotations

from dataclasses import dataclass

from veriloop.errors import UnknownNameError


@dataclass(frozen=True)
class Recipe:
    description: str
    overrides: dict  # dotted config keys -> values, applied under the user's YAML and flags
    made_by: str = "veriloop train"  # the command named in the final model's provenance file


_LIKELIHOOD = {
    "advantage.estimator": "filter",
    "loss.policy_loss": "likelihood",
    "kl.beta": 0.0,
    "update.inner_updates": 1,
}
_ONLINE_PG = {
    "loss.policy_loss": "pg",
    "update.inner_updates": 1,
    "kl.placement": "reward",
    "kl.estimator": "k1",
    "kl.beta": 0.05,
}

RECIPES: dict[str, Recipe] = {
    "grpo": Recipe("GRPO: group-normalised outcome advantages, PPO clip, k3 KL in the loss", {}),
    "grpo_process": Recipe(
        "process-supervised GRPO: PRM step rewards normalised over the group, summed from each step on "
        "(needs --process.prm)",
        {"advantage.estimator": "process"},
    ),
    "dr_grpo": Recipe(
        "Dr. GRPO: centred rewards (no std), constant length normaliser",
        {"advantage.estimator": "dr_grpo", "loss.aggregation": "seq-mean-token-sum-norm"},
    ),
    "gspo": Recipe(
        "GSPO: GRPO advantages with the sequence-level (length-normalised) likelihood ratio",
        {"loss.policy_loss": "gspo", "loss.clip_eps_low": 3e-4, "loss.clip_eps_high": 4e-4},
    ),
    "dapo": Recipe(
        "DAPO: clip-higher, token-mean, dynamic sampling, overlong shaping, no KL",
        {
            "loss.clip_eps_high": 0.28,
            "loss.aggregation": "token-mean",
            "rollout.dynamic_sampling": True,
            "rollout.overlong_buffer": 16,
            "update.mask_truncated": False,  # the overlong ramp penalises cut completions: they stay in the loss
            "kl.beta": 0.0,
        },
    ),
    "rloo": Recipe(
        "RLOO: leave-one-out baseline, REINFORCE objective, KL in the reward",
        {"advantage.estimator": "rloo", **_ONLINE_PG},
    ),
    "reinforce": Recipe(
        "REINFORCE: the raw reward as coefficient, KL in the reward",
        {"advantage.estimator": "reinforce", "update.skip_zero_advantage": True, **_ONLINE_PG},
    ),
    "ppo": Recipe(
        "PPO: GAE with a learned critic, clipped surrogate, per-token KL in the reward",
        {
            "advantage.estimator": "gae",
            "rollout.group_size": 1,
            "rollout.prompts_per_step": 256,
            "kl.placement": "reward",
            "kl.estimator": "k1",
            "kl.beta": 0.05,
            "update.skip_zero_advantage": False,
        },
    ),
    "sft": Recipe(
        "SFT: the task's own traces, coefficient 1, token-mean cross-entropy",
        {
            **_LIKELIHOOD,
            "advantage.estimator": "one",
            "rollout.source": "task-teacher",
            "rollout.group_size": 1,
            "rollout.prompts_per_step": 128,
            "loss.aggregation": "token-mean",
            "optim.lr": 2e-4,
        },
        made_by="veriloop sft",
    ),
    "rft": Recipe(
        "RFT: samples of the frozen initial policy, coefficient 1[accepted]",
        {**_LIKELIHOOD, "rollout.source": "initial", "optim.lr": 2e-4},
    ),
    "online_rft": Recipe(
        "online RFT: samples of the current policy, coefficient 1[accepted]",
        {**_LIKELIHOOD, "rollout.source": "policy", "optim.lr": 2e-4},
    ),
    "distill": Recipe(
        "filtered distillation: a teacher samples, the verifier filters, the student imitates",
        {**_LIKELIHOOD, "rollout.source": "teacher", "optim.lr": 2e-4},
    ),
    "dpo": Recipe(
        "DPO: accepted vs rejected completions of one prompt from the frozen initial policy",
        {
            "advantage.estimator": "filter",
            "loss.policy_loss": "dpo",
            "rollout.source": "initial",
            "kl.beta": 0.0,
            "update.inner_updates": 1,
            "optim.lr": 2e-5,  # measured: 1e-4 collapses greedy accuracy on the built-in task (0.69 -> 0.49)
        },
    ),
}


def recipe_overrides(name: str) -> dict:
    if name not in RECIPES:
        raise UnknownNameError(f"unknown algo {name!r}; known: {', '.join(sorted(RECIPES))}")
    return dict(RECIPES[name].overrides, algo=name)


# ``veriloop sft``: the sft recipe from a new built-in model (how the shipped base is made), with the
# optimizer settings of a run from scratch; the recipe alone (``train --algo sft``) continues a model.
SFT_COMMAND_DEFAULTS = {
    "algo": "sft",
    "policy": "builtin:init",
    "run_dir": "runs/sft",
    "steps": 3000,
    "eval_every": 500,
    "save_rollouts": False,
    "checkpoint_every": 500,
    "optim": {"lr": 2e-3, "weight_decay": 0.01, "warmup_steps": 200, "schedule": "cosine"},
}
