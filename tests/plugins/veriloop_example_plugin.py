"""A package-external plugin: one advantage estimator and one policy objective, registered by name.

``veriloop --plugin veriloop_example_plugin train --advantage.estimator centred_sign
--loss.policy_loss capped_pg`` trains with them (tests/test_registry_on_cpu.py).
"""

import torch

from veriloop.algorithms import pg_objective
from veriloop.registry import ESTIMATORS, OBJECTIVES
from veriloop.training.loop.estimators import Estimator, broadcast
from veriloop.training.loop.objectives import Objective

CALLS = {"estimator": 0, "objective": 0}


def centred_sign(x, cfg):
    """sign(r - group mean): +1 above the group's mean, -1 below, 0 for a flat group."""
    CALLS["estimator"] += 1
    return broadcast(torch.sign(x.rewards - x.rewards.mean(dim=1, keepdim=True)), x.mask)


class CappedPG(Objective):
    """ratio x advantage with the ratio capped at 2 (no clipping below)."""

    description = "ratio (capped at 2) x advantage"

    def per_token(self, lp, den, adv, mask, c):
        CALLS["objective"] += 1
        return pg_objective(torch.exp(lp - den).clamp(max=2.0), adv)


ESTIMATORS.register("centred_sign", Estimator(centred_sign, "sign(r - group mean)", min_group_size=2))
OBJECTIVES.register("capped_pg", CappedPG())
