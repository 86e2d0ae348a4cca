"""The option tree of every command: one dataclass per component, each field with help.

``veriloop <command> --help`` lists these fields as ``--section.field`` flags; a YAML file
given with ``--config`` holds the same keys nested.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from veriloop.algorithms.advantages import STD_MODES
from veriloop.algorithms.aggregation import AGGREGATION_MODES
from veriloop.algorithms.kl import KL_ESTIMATORS
from veriloop.evaluation.evaluate import EvalConfig
from veriloop.models.tiny import TinyModelConfig
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks import get_task
from veriloop.tasks.arithmetic import ArithmeticConfig, TeacherConfig


@dataclass
class TaskConfig:
    """Where problems come from."""

    name: str = field(default="arithmetic", metadata={"help": "task: arithmetic | jsonl"})
    data: str = field(default="", metadata={"help": "jsonl task: train rows {prompt, reference}"})
    heldout_data: str = field(default="", metadata={"help": "jsonl task: held-out rows {prompt, reference}"})
    verifier: str = field(default="", metadata={"help": "jsonl task: outcome verifier of its references"})
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def build(self):
        if self.name == "arithmetic":
            return get_task("arithmetic", arithmetic=self.arithmetic, teacher=self.teacher)
        if self.name == "jsonl":
            return get_task(
                "jsonl", data=self.data, heldout_data=self.heldout_data, verifier=self.verifier or "arithmetic-outcome"
            )
        return get_task(self.name)

    def eval_verifiers(self) -> dict[str, str]:
        """Verifiers for evaluation: outcome always; format and process where the task has them."""
        if self.name == "arithmetic":
            return {"outcome": "arithmetic-outcome", "format": "arithmetic-format", "process": "arithmetic-process"}
        return {"outcome": self.verifier or self.build().default_verifier}


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then constant or cosine decay."""

    lr: float = field(default=5e-5, metadata={"help": "peak learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW decoupled weight decay"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    adam_eps: float = field(default=1e-8, metadata={"help": "AdamW epsilon"})
    grad_clip: float = field(default=1.0, metadata={"help": "clip the global grad norm to this; 0 = off"})
    warmup_steps: int = field(default=0, metadata={"help": "optimizer steps of linear warm-up"})
    schedule: str = field(default="constant", metadata={"help": "after warm-up: constant | cosine (to 10%)"})

    def __post_init__(self):
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"optim.schedule must be constant or cosine, got {self.schedule!r}")
        if self.grad_clip < 0:
            raise ValueError(f"optim.grad_clip must be >= 0, got {self.grad_clip}")


@dataclass
class GRPOConfig:
    """The GRPO update: groups, advantages, clipped surrogate, KL, aggregation."""

    prompts_per_step: int = field(default=32, metadata={"help": "B: prompts per step"})
    group_size: int = field(default=8, metadata={"help": "G: completions per prompt (>= 2)"})
    inner_updates: int = field(default=2, metadata={"help": "mu: passes of the clipped surrogate over each batch"})
    mini_batches: int = field(default=1, metadata={"help": "optimizer steps per pass (the batch split into this many)"})
    micro_batch_size: int = field(
        default=128, metadata={"help": "sequences per forward/backward (gradient accumulation)"}
    )
    adv_std: str = field(default="population", metadata={"help": "group std: population | sample | none"})
    adv_eps: float = field(default=1e-6, metadata={"help": "added to the group std (not the clip width)"})
    clip_eps_low: float = field(default=0.2, metadata={"help": "ratio clip below 1 - clip_eps_low"})
    clip_eps_high: float = field(default=0.2, metadata={"help": "ratio clip above 1 + clip_eps_high"})
    kl_beta: float = field(default=0.1, metadata={"help": "weight of the KL to the reference; 0 = no reference pass"})
    kl_estimator: str = field(default="k3", metadata={"help": "KL estimator: k1 | k2 | k3"})
    loss_agg: str = field(
        default="seq-mean-token-mean",
        metadata={"help": "seq-mean-token-mean | token-mean | seq-mean-token-sum-norm"},
    )
    skip_zero_variance_groups: bool = field(
        default=True, metadata={"help": "leave groups with all-equal rewards out of the update (they carry only KL)"}
    )
    mask_truncated: bool = field(
        default=False, metadata={"help": "leave completions cut at max_new_tokens out of the loss"}
    )

    def __post_init__(self):
        if self.group_size < 2:
            raise ValueError(
                f"grpo.group_size must be >= 2, got {self.group_size}: a group of one completion "
                "has advantage 0 (nothing to compare it with)"
            )
        for name in ("prompts_per_step", "inner_updates", "mini_batches", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"grpo.{name} must be >= 1, got {getattr(self, name)}")
        if self.adv_std not in STD_MODES:
            raise ValueError(f"grpo.adv_std must be one of {STD_MODES}, got {self.adv_std!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"grpo.kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        if self.loss_agg not in AGGREGATION_MODES:
            raise ValueError(f"grpo.loss_agg must be one of {AGGREGATION_MODES}, got {self.loss_agg!r}")
        if self.kl_beta < 0 or self.adv_eps < 0:
            raise ValueError("grpo.kl_beta and grpo.adv_eps must be >= 0")


@dataclass
class TrainConfig:
    """``veriloop train``: GRPO from a policy checkpoint."""

    policy: str = field(default="builtin:base", metadata={"help": "model directory or builtin:base"})
    reference: str = field(default="", metadata={"help": "KL reference model; empty = the starting policy"})
    run_dir: str = field(default="runs/grpo", metadata={"help": "where config, metrics, records, checkpoints go"})
    seed: int = field(default=0, metadata={"help": "run seed: every random draw derives from it"})
    steps: int = field(default=200, metadata={"help": "GRPO steps (one batch of B x G rollouts each)"})
    max_minutes: float = field(default=0.0, metadata={"help": "stop after this much wall time; 0 = no limit"})
    verifier: str = field(default="arithmetic", metadata={"help": "reward verifier (see `veriloop verifiers`)"})
    checkpoint_every: int = field(default=20, metadata={"help": "save a resumable checkpoint every N steps"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep"})
    save_rollouts: bool = field(default=True, metadata={"help": "write every record to rollouts/step-N.jsonl.gz"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.7, max_new_tokens=64))
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.sampling.temperature <= 0:
            raise ValueError("sampling.temperature must be > 0 for GRPO (greedy groups have no variance)")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1")


@dataclass
class SFTConfig:
    """``veriloop sft``: supervised fine-tuning on the task's teacher traces."""

    policy: str = field(
        default="builtin:init", metadata={"help": "starting model: builtin:init, builtin:base or a directory"}
    )
    run_dir: str = field(default="runs/sft", metadata={"help": "where metrics and the final model go"})
    export: str = field(default="", metadata={"help": "also save the final model here (e.g. src/veriloop/assets/base)"})
    seed: int = field(default=0, metadata={"help": "seed of data order and initialisation"})
    steps: int = field(default=3000, metadata={"help": "optimizer steps"})
    max_minutes: float = field(default=0.0, metadata={"help": "stop after this much wall time; 0 = no limit"})
    batch_size: int = field(default=128, metadata={"help": "traces per step"})
    eval_every: int = field(default=500, metadata={"help": "greedy held-out accuracy every N steps; 0 = never"})
    eval_problems: int = field(default=200, metadata={"help": "held-out problems in the periodic evaluation"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(lr=2e-3, weight_decay=0.01, warmup_steps=200, schedule="cosine")
    )

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")


@dataclass
class EvalRunConfig:
    """``veriloop eval``: held-out evaluation of a policy (and of the task's teacher)."""

    policy: str = field(default="builtin:base", metadata={"help": "model directory or builtin:base"})
    out: str = field(default="", metadata={"help": "write the result as JSON here"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
