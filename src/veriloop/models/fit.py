"""The optimisation loop shared by the learned verifiers (a PRM, a reward model, a judge): seeded epochs of AdamW.

Each epoch visits ``examples`` in an order shuffled by one ``random.Random(seed)`` (the same orders on every run),
``batch_size`` a step; the step's loss is ``loss_of(batch)``, gradients are clipped to norm 1 and AdamW (no weight
decay) steps every parameter that requires a gradient.  The module is in train mode while it steps and in eval
mode for ``after_epoch(epoch)`` (a validation pass) and on return.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

from veriloop.logs import progress as progress_display


def fit_adamw(
    module: torch.nn.Module,
    examples: Sequence,
    loss_of: Callable[[list], torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    desc: str,
    progress: bool = False,
    after_epoch: Callable[[int], None] | None = None,
) -> list[float]:
    """Every step's loss (see the module's docstring)."""
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    steps_per_epoch = (len(examples) + batch_size - 1) // batch_size
    bar = progress_display(total=epochs * steps_per_epoch, desc=desc, unit="step", enabled=progress)
    losses: list[float] = []
    module.train()
    for epoch in range(1, epochs + 1):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for i in range(0, len(order), batch_size):
            value = loss_of([examples[j] for j in order[i : i + batch_size]])
            opt.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(float(value.detach()))
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
            bar.update(1)
        if after_epoch is not None:
            module.eval()
            after_epoch(epoch)
            module.train()
    bar.close()
    module.eval()
    return losses
