"""Pure tensor maths of the training loop, each piece a small named function.

No I/O, models or loops live here; the trainer picks them by name from the config.
"""

from veriloop.algorithms.advantages import (
    STD_MODES,
    gae_advantages,
    group_advantages,
    process_advantages,
    process_token_rewards,
    reinforce_advantages,
    rloo_advantages,
    zero_variance_groups,
)
from veriloop.algorithms.aggregation import AGGREGATION_MODES, aggregate_loss, aggregation_weight
from veriloop.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    importance_weighted_kl,
    kl_estimate,
    kl_exact,
)
from veriloop.algorithms.pass_at_k import maj_at_k, pass_at_k
from veriloop.algorithms.policy_loss import (
    clip_fractions,
    clipped_surrogate,
    dpo_loss,
    dual_clip_surrogate,
    gspo_surrogate,
    likelihood_objective,
    pg_objective,
    sequence_ratio,
)
from veriloop.algorithms.sampling import entropy_from_logprobs, sampling_logprobs, suppress_end_tokens
from veriloop.algorithms.shaping import length_cost, overlong_penalty

__all__ = [
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "STD_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "aggregate_loss",
    "aggregation_weight",
    "clip_fractions",
    "clipped_surrogate",
    "dpo_loss",
    "dual_clip_surrogate",
    "entropy_from_logprobs",
    "gae_advantages",
    "group_advantages",
    "gspo_surrogate",
    "importance_weighted_kl",
    "kl_estimate",
    "kl_exact",
    "likelihood_objective",
    "length_cost",
    "overlong_penalty",
    "maj_at_k",
    "pass_at_k",
    "pg_objective",
    "process_advantages",
    "process_token_rewards",
    "reinforce_advantages",
    "rloo_advantages",
    "sampling_logprobs",
    "suppress_end_tokens",
    "sequence_ratio",
    "zero_variance_groups",
]
