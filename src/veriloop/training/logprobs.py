"""Which distribution a log-prob is taken under: the rule, written once.

* ``"sampling"`` - the distribution the sampler drew from (temperature, then top-k and
  top-p): ratio objectives divide by the behaviour log-prob recorded under it, so the
  ratio compares like with like.
* ``"model"`` - the model's own distribution (temperature 1): likelihood (SFT, RFT) and DPO.
* the KL and the entropy compare the *temperature-scaled full* distributions; reference
  log-probs are taken under the KL's distribution, unless the objective itself reads them
  (DPO), then under the objective's.
"""

from __future__ import annotations

import torch

from veriloop.algorithms import sampling_logprobs


def temperature_of(sampling) -> float:
    return sampling.temperature if sampling.temperature > 0 else 1.0  # greedy: the model's own scale


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, sampling, distribution: str):
    """(log-probs of ``ids`` under ``distribution``, temperature-scaled full log-probs ``[.., V]``)."""
    temperature = temperature_of(sampling)
    full = torch.log_softmax(logits / temperature, dim=-1)
    if distribution == "model":
        dist = full if temperature == 1.0 else torch.log_softmax(logits, dim=-1)
    elif sampling.top_k == 0 and sampling.top_p == 1.0:
        dist = full
    else:
        dist = sampling_logprobs(logits, temperature, sampling.top_k, sampling.top_p)
    return dist.gather(-1, ids[..., None]).squeeze(-1), full


def reference_temperature(objective, sampling) -> float:
    """The reference's log-probs: under the objective's distribution when it reads them, else the KL's."""
    if objective.needs_reference and objective.distribution == "model":
        return 1.0
    return temperature_of(sampling)
