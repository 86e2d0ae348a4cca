"""The critic of PPO proper: V(s_t) for every completion token's state.

For a transformers policy the critic is a copy of the policy's backbone with a scalar head
(zero-initialised, so it starts at V = 0), trained by its own AdamW on the clipped value loss

    0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)

where R are the GAE returns.  For a candidate policy (exact mode) the one state's value is a
single learnable scalar.
"""

from __future__ import annotations

import copy

import torch

from veriloop.algorithms import aggregate_loss
from veriloop.models.batch import PolicyBatch, select, to_device
from veriloop.models.value_head import ValueHead
from veriloop.training.loop.optim import OptimConfig, backward_scaled, build_optimizer, clip_grad_norm
from veriloop.training.loop.share import ONE_RANK


class ValueModel(torch.nn.Module):
    def __init__(self, policy_model: torch.nn.Module):
        super().__init__()
        self.backbone = copy.deepcopy(policy_model.get_decoder())  # the transformer without the LM head
        self.backbone.requires_grad_(True)
        device = policy_model.get_input_embeddings().weight.device
        self.head = ValueHead(policy_model.config.hidden_size).to(device)  # float32 whatever the backbone's dtype

    def forward(self, batch: PolicyBatch) -> torch.Tensor:
        """``[N, T]``: the value of the state before each completion token (float32, on the CPU)."""
        batch = to_device(batch, self.head.weight.device)
        out = self.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        h = out.last_hidden_state
        idx = batch.logit_index[:, :, None].expand(-1, -1, h.shape[-1])
        return self.head(torch.gather(h, 1, idx).float()).cpu()


class ScalarValue(torch.nn.Module):
    """One value for the single state of exact mode."""

    def __init__(self):
        super().__init__()
        self.value = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))

    def forward(self, batch: PolicyBatch) -> torch.Tensor:
        return self.value.expand(batch.completion_ids.shape).float()


class Critic:
    def __init__(self, policy, cfg):  # cfg: the run's TrainConfig (the option tree sits above the loop)
        self.cfg = cfg
        self.ranks = ONE_RANK  # this process's share of each mini-batch (a rank's: RankShare)
        is_lm = hasattr(policy.model, "get_decoder") and hasattr(policy.model, "config")
        self.model = ValueModel(policy.model) if is_lm else ScalarValue()
        if all(p.dtype in (torch.float32, torch.float64) for p in self.model.parameters()):
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.critic.lr)
        else:  # a low-precision backbone: float32 masters (AdamW's default decay, on matrices)
            self.optimizer = build_optimizer(self.model, OptimConfig(lr=cfg.critic.lr, weight_decay=0.01))

    @torch.no_grad()
    def values(self, batch: PolicyBatch) -> torch.Tensor:
        self.model.eval()
        out = torch.zeros_like(batch.completion_mask)
        for rows in torch.arange(batch.input_ids.shape[0]).split(self.cfg.update.micro_batch_size):
            sub = select(batch, rows)
            out[rows, : sub.completion_ids.shape[1]] = self.model(sub)
        return out * batch.completion_mask

    def update(self, batch: PolicyBatch, returns: torch.Tensor, old_values: torch.Tensor, gen) -> dict:
        """Same passes and mini-batches as the policy; returns the mean value loss."""
        c, u = self.cfg.critic, self.cfg.update
        total, count = 0.0, 0
        n = batch.input_ids.shape[0]
        for _ in range(u.inner_updates):
            order = torch.randperm(n, generator=gen) if u.mini_batches > 1 else torch.arange(n)
            for mb in order.chunk(u.mini_batches):
                self.optimizer.zero_grad(set_to_none=True)
                mb_mask = batch.completion_mask[mb]
                for rows in self.ranks.split(mb, u.micro_batch_size):
                    sub = select(batch, rows)
                    T, mask = sub.completion_ids.shape[1], sub.completion_mask
                    v = self.model(sub)
                    ret, old = returns[rows, :T], old_values[rows, :T]
                    loss_t = (v - ret) ** 2
                    if c.value_clip > 0:
                        clipped = old + (v - old).clamp(-c.value_clip, c.value_clip)
                        loss_t = torch.maximum(loss_t, (clipped - ret) ** 2)
                    loss = 0.5 * aggregate_loss(loss_t, mask, "token-mean")
                    backward_scaled(self.optimizer, loss * float(mask.sum()) / max(float(mb_mask.sum()), 1.0))
                    total += float(loss.detach()) * float(mask.sum())
                    count += float(mask.sum())
                self.ranks.sync_grads(self.model)
                clip_grad_norm(self.model, self.cfg.optim.grad_clip, self.optimizer)
                self.optimizer.step()
        total, count = self.ranks.add_up(total, count)
        return {"value_loss": total / max(count, 1.0)}

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
