"""Pure tensor maths of the training loop, each piece a small named function.

No I/O, models or loops live here; the trainer calls these by name.
"""

from veriloop.algorithms.advantages import ADVANTAGE_ESTIMATORS, group_advantages, zero_variance_groups
from veriloop.algorithms.aggregation import AGGREGATION_MODES, aggregate_loss, aggregation_weight
from veriloop.algorithms.kl import KL_ESTIMATORS, kl_estimate, kl_exact
from veriloop.algorithms.pass_at_k import pass_at_k
from veriloop.algorithms.policy_loss import clip_fractions, clipped_surrogate
from veriloop.algorithms.sampling import entropy_from_logprobs, sampling_logprobs

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "aggregate_loss",
    "aggregation_weight",
    "clip_fractions",
    "clipped_surrogate",
    "entropy_from_logprobs",
    "group_advantages",
    "kl_estimate",
    "kl_exact",
    "pass_at_k",
    "sampling_logprobs",
    "zero_variance_groups",
]
