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
from veriloop.training.recipes import recipe_overrides


@dataclass
class TaskConfig:
    """Where problems come from."""

    name: str = field(default="arithmetic", metadata={"help": "task: arithmetic | jsonl | gsm8k"})
    data: str = field(
        default="", metadata={"help": "jsonl: train rows {prompt, reference}; gsm8k: train file (default: shipped)"}
    )
    heldout_data: str = field(
        default="", metadata={"help": "jsonl: held-out rows {prompt, reference}; gsm8k: test file (default: shipped)"}
    )
    validation_data: str = field(
        default="", metadata={"help": "jsonl: validation rows {prompt, reference} (what tuning reads); '' = none"}
    )
    heldout_size: int = field(default=0, metadata={"help": "gsm8k: evaluate on the first N test rows; 0 = all"})
    verifier: str = field(default="", metadata={"help": "jsonl task: outcome verifier of its references"})
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def build(self):
        if self.name == "arithmetic":
            return get_task("arithmetic", arithmetic=self.arithmetic, teacher=self.teacher)
        if self.name == "jsonl":
            return get_task("jsonl", data=self.data, heldout_data=self.heldout_data,
                            verifier=self.verifier or "arithmetic-outcome", validation_data=self.validation_data)  # fmt: skip
        if self.name == "gsm8k":
            return get_task("gsm8k", data=self.data, heldout_data=self.heldout_data, heldout_size=self.heldout_size)
        return get_task(self.name)

    def eval_verifiers(self) -> dict[str, str]:
        """Verifiers for evaluation: outcome always; format and process where the task has them."""
        if self.name == "arithmetic":
            return {"outcome": "arithmetic-outcome", "format": "arithmetic-format", "process": "arithmetic-process"}
        if self.name == "gsm8k":  # known without loading 8.8k rows to ask the task
            return {"outcome": self.verifier or "gsm8k"}
        return {"outcome": self.verifier or self.build().default_verifier}


@dataclass
class OptimConfig:
    """The optimizer (AdamW or SGD) with linear warm-up, then constant or cosine decay."""

    name: str = field(default="adamw", metadata={"help": "adamw | sgd"})
    lr: float = field(default=5e-5, metadata={"help": "peak learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay (matrices only)"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    adam_eps: float = field(default=1e-8, metadata={"help": "AdamW epsilon"})
    momentum: float = field(default=0.0, metadata={"help": "SGD momentum"})
    grad_clip: float = field(default=1.0, metadata={"help": "clip the global grad norm to this; 0 = off"})
    warmup_steps: int = field(default=0, metadata={"help": "optimizer steps of linear warm-up"})
    schedule: str = field(default="constant", metadata={"help": "after warm-up: constant | cosine (to 10%)"})

    def __post_init__(self):
        if self.name not in ("adamw", "sgd"):
            raise ValueError(f"optim.name must be adamw or sgd, got {self.name!r}")
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"optim.schedule must be constant or cosine, got {self.schedule!r}")
        if self.grad_clip < 0:
            raise ValueError(f"optim.grad_clip must be >= 0, got {self.grad_clip}")


ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce", "gae", "filter", "one", "process")
POLICY_LOSSES = ("clip", "dual-clip", "gspo", "pg", "likelihood", "dpo")
DATA_SOURCES = ("policy", "initial", "teacher", "task-teacher")


@dataclass
class RolloutConfig:
    """Where the completions of a step come from, and how many."""

    prompts_per_step: int = field(default=32, metadata={"help": "B: prompts per step"})
    group_size: int = field(default=8, metadata={"help": "G: completions per prompt"})
    source: str = field(
        default="policy",
        metadata={"help": "policy (current, online) | initial (frozen start, offline) | teacher (rollout.teacher "
                  "model) | task-teacher (the task's own traces, no sampling)"},
    )  # fmt: skip
    teacher: str = field(default="", metadata={"help": "teacher model directory for source=teacher"})
    dynamic_sampling: bool = field(
        default=False, metadata={"help": "drop groups with all-equal rewards and sample more prompts (DAPO)"}
    )
    max_resample_rounds: int = field(default=3, metadata={"help": "extra sampling rounds per step (dynamic sampling)"})
    lag: int = field(default=0, metadata={"help": "train on records sampled this many steps earlier (off-policy)"})
    max_staleness: int = field(
        default=0, metadata={"help": "drop records more than this many policy versions old; 0 = no limit"}
    )
    overlong_buffer: int = field(
        default=0, metadata={"help": "DAPO overlong shaping: length penalty over the last N tokens; 0 = off"}
    )

    def __post_init__(self):
        for name in ("prompts_per_step", "group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.source not in DATA_SOURCES:
            raise ValueError(f"rollout.source must be one of {DATA_SOURCES}, got {self.source!r}")
        if self.source == "teacher" and not self.teacher:
            raise ValueError("rollout.source=teacher needs rollout.teacher (a model directory)")
        if self.lag < 0 or self.max_staleness < 0 or self.max_resample_rounds < 0 or self.overlong_buffer < 0:
            raise ValueError("rollout.lag, max_staleness, max_resample_rounds and overlong_buffer must be >= 0")


@dataclass
class AdvantageConfig:
    """How rewards become advantages (the gradient coefficient of each token)."""

    estimator: str = field(
        default="grpo", metadata={"help": "grpo | dr_grpo | rloo | reinforce | gae | filter | one | process (PRM)"}
    )
    std: str = field(default="population", metadata={"help": "grpo group std: population | sample | none"})
    eps: float = field(default=1e-6, metadata={"help": "added to the group std (adv_eps; not the clip width)"})
    baseline: str = field(default="none", metadata={"help": "reinforce baseline: none | batch | constant"})
    baseline_value: float = field(default=0.0, metadata={"help": "reinforce constant baseline b (baseline=constant)"})
    gamma: float = field(default=1.0, metadata={"help": "gae discount"})
    lam: float = field(default=0.95, metadata={"help": "gae lambda"})
    accept_threshold: float = field(
        default=1.0, metadata={"help": "estimator filter (RFT, distill, DPO pairs): accepted where reward >= this"}
    )

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"advantage.estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.std not in STD_MODES:
            raise ValueError(f"advantage.std must be one of {STD_MODES}, got {self.std!r}")
        if self.baseline not in ("none", "batch", "constant"):
            raise ValueError(f"advantage.baseline must be none, batch or constant, got {self.baseline!r}")
        if self.eps < 0 or not 0 <= self.gamma <= 1 or not 0 <= self.lam <= 1:
            raise ValueError("advantage.eps must be >= 0 and gamma, lam in [0, 1]")


@dataclass
class LossConfig:
    """The policy objective and how per-token values become one loss."""

    policy_loss: str = field(default="clip", metadata={"help": "clip | dual-clip | gspo | pg | likelihood | dpo"})
    clip_eps_low: float = field(default=0.2, metadata={"help": "ratio clip below 1 - clip_eps_low"})
    clip_eps_high: float = field(default=0.2, metadata={"help": "ratio clip above 1 + clip_eps_high"})
    clip_ratio_c: float = field(default=3.0, metadata={"help": "dual-clip bound c (> 1) for negative advantages"})
    aggregation: str = field(
        default="seq-mean-token-mean", metadata={"help": "seq-mean-token-mean | token-mean | seq-mean-token-sum-norm"}
    )
    entropy_coef: float = field(default=0.0, metadata={"help": "entropy bonus weight (added to the objective)"})
    dpo_beta: float = field(default=0.1, metadata={"help": "DPO beta"})
    tis_cap: float = field(
        default=0.0,
        metadata={"help": "truncated importance sampling: recompute old log-probs, weight by min(ratio, cap); 0 = off"},
    )

    def __post_init__(self):
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(f"loss.policy_loss must be one of {POLICY_LOSSES}, got {self.policy_loss!r}")
        if self.aggregation not in AGGREGATION_MODES:
            raise ValueError(f"loss.aggregation must be one of {AGGREGATION_MODES}, got {self.aggregation!r}")
        if self.clip_eps_low < 0 or self.clip_eps_high < 0:
            raise ValueError("loss.clip_eps_low and clip_eps_high must be >= 0")
        if self.clip_ratio_c <= 1:
            raise ValueError(f"loss.clip_ratio_c must be > 1, got {self.clip_ratio_c}")
        if self.dpo_beta <= 0 or self.tis_cap < 0:
            raise ValueError("loss.dpo_beta must be > 0 and loss.tis_cap >= 0")


@dataclass
class KLConfig:
    """KL to a frozen reference: estimator, weight, placement, control, refresh."""

    beta: float = field(default=0.1, metadata={"help": "KL weight; 0 = no reference model and no reference pass"})
    estimator: str = field(default="k3", metadata={"help": "k1 | k2 | k3 | exact (sum over the vocabulary)"})
    placement: str = field(default="loss", metadata={"help": "loss (GRPO) | reward (PPO-RLHF: subtracted per token)"})
    controller: str = field(
        default="fixed", metadata={"help": "fixed | adaptive (Ziegler et al.: beta steered towards kl.target)"}
    )
    target: float = field(default=6.0, metadata={"help": "adaptive controller: target KL per completion (nats)"})
    horizon: int = field(default=10000, metadata={"help": "adaptive controller: horizon in completions"})
    reset_every: int = field(
        default=0, metadata={"help": "iterative RL: set the reference to the current policy every N steps; 0 = never"}
    )

    def __post_init__(self):
        if self.beta < 0:
            raise ValueError(f"kl.beta must be >= 0, got {self.beta}")
        if self.estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl.estimator must be one of {KL_ESTIMATORS}, got {self.estimator!r}")
        if self.placement not in ("loss", "reward"):
            raise ValueError(f"kl.placement must be loss or reward, got {self.placement!r}")
        if self.controller not in ("fixed", "adaptive"):
            raise ValueError(f"kl.controller must be fixed or adaptive, got {self.controller!r}")
        if self.placement == "reward" and self.estimator == "exact":
            raise ValueError("kl.placement=reward needs a per-token estimator (k1, k2 or k3), not exact")
        if self.reset_every < 0:
            raise ValueError(f"kl.reset_every must be >= 0, got {self.reset_every}")
        if self.placement == "loss" and self.estimator == "k1" and self.beta > 0:
            # d/dtheta k1 = d/dtheta log pi, and E_pi[d log pi] = 0: the term would do nothing on average.
            raise ValueError(
                "kl.estimator=k1 with kl.placement=loss is refused: differentiating k1 = log(pi/ref) at samples "
                "from pi has zero expected gradient, so the KL term would only add noise. In the loss use k2 "
                "(gradient of KL(pi||ref)), k3 (gradient of KL(ref||pi)) or exact; or put k1 in the reward "
                "(kl.placement=reward), where it gives the gradient of KL(pi||ref)"
            )


@dataclass
class UpdateConfig:
    """How many optimizer steps one batch feeds, and in what pieces."""

    inner_updates: int = field(default=2, metadata={"help": "mu: passes over each batch"})
    mini_batches: int = field(default=1, metadata={"help": "optimizer steps per pass (the batch split into this many)"})
    micro_batch_size: int = field(
        default=128, metadata={"help": "sequences per forward/backward (gradient accumulation)"}
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={"help": "leave out completions whose gradient is exactly 0 (advantage 0 everywhere and no KL or "
                  "entropy term in the loss), so skipping never changes the update"},
    )
    mask_truncated: bool = field(
        default=False, metadata={"help": "leave completions cut at max_new_tokens out of the loss"}
    )

    def __post_init__(self):
        for name in ("inner_updates", "mini_batches", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"update.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class CriticConfig:
    """The value model of estimator gae (PPO proper): the policy's backbone plus a scalar head."""

    lr: float = field(default=1e-4, metadata={"help": "critic learning rate (AdamW)"})
    value_clip: float = field(
        default=0.2, metadata={"help": "clip value updates to +-this around the old values; 0 = off"}
    )
    warmup_steps: int = field(
        default=0, metadata={"help": "the first N steps train only the critic (the policy is not updated)"}
    )

    def __post_init__(self):
        if self.lr <= 0 or self.value_clip < 0 or self.warmup_steps < 0:
            raise ValueError("critic.lr must be > 0, value_clip and warmup_steps >= 0")


@dataclass
class ProcessConfig:
    """Process supervision (estimator process): PRM step rewards, outcome mix, iterative PRM refresh."""

    prm: str = field(default="", metadata={"help": "PRM directory (`veriloop prm train`) that scores every step"})
    process_weight: float = field(default=1.0, metadata={"help": "weight of the process-supervised advantage"})
    outcome_weight: float = field(
        default=0.0,
        metadata={"help": "weight of the group-normalised outcome advantage added to it (0 = process only)"},
    )
    refresh_every: int = field(
        default=0,
        metadata={"help": "every N steps relabel recent samples with the current policy and refit the PRM; 0 = never"},
    )
    refresh_completions: int = field(default=4, metadata={"help": "refresh: completions N of each step prefix"})
    refresh_solutions: int = field(default=256, metadata={"help": "refresh: most recent solutions labelled, at most"})
    refresh_replay: float = field(default=0.1, metadata={"help": "refresh: share of older labelled data replayed"})
    refresh_epochs: int = field(default=1, metadata={"help": "refresh: passes over the new data"})
    refresh_lr: float = field(default=1e-4, metadata={"help": "refresh: PRM learning rate"})
    replay_data: str = field(default="", metadata={"help": "refresh: the PRM's original label file (replay pool)"})

    def __post_init__(self):
        if self.process_weight < 0 or self.outcome_weight < 0:
            raise ValueError("process.process_weight and outcome_weight must be >= 0")
        if self.refresh_every < 0 or self.refresh_completions < 1 or self.refresh_solutions < 1:
            raise ValueError("process.refresh_every must be >= 0, refresh_completions and refresh_solutions >= 1")
        if not 0 <= self.refresh_replay < 1 or self.refresh_epochs < 1 or self.refresh_lr <= 0:
            raise ValueError("process.refresh_replay must be in [0, 1), refresh_epochs >= 1, refresh_lr > 0")


@dataclass
class TrainConfig:
    """``veriloop train``: one loop for SFT, RFT, DPO, REINFORCE, RLOO, PPO, GRPO and variants."""

    algo: str = field(default="grpo", metadata={"help": "recipe whose defaults apply (see `veriloop algos`)"})
    policy: str = field(default="builtin:base", metadata={"help": "model directory or builtin:base"})
    reference: str = field(default="", metadata={"help": "KL/DPO reference model; empty = the starting policy"})
    run_dir: str = field(default="runs/grpo", metadata={"help": "where config, metrics, records, checkpoints go"})
    seed: int = field(default=0, metadata={"help": "run seed: every random draw derives from it"})
    steps: int = field(default=200, metadata={"help": "training steps (one batch of B x G completions each)"})
    max_minutes: float = field(default=0.0, metadata={"help": "stop after this much wall time; 0 = no limit"})
    max_samples: int = field(
        default=0, metadata={"help": "stop once this many completions were sampled (sample budget); 0 = no limit"}
    )
    verifier: str = field(default="arithmetic", metadata={"help": "reward verifier (see `veriloop verifiers`)"})
    checkpoint_every: int = field(default=20, metadata={"help": "save a resumable checkpoint every N steps"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep"})
    save_rollouts: bool = field(default=True, metadata={"help": "write every record to rollouts/step-N.jsonl.gz"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.7, max_new_tokens=64))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    @staticmethod
    def config_defaults(data: dict) -> dict:
        """The recipe named by ``algo`` supplies defaults under the user's own keys."""
        try:
            return recipe_overrides(str(data.get("algo", "grpo")))
        except KeyError as e:
            raise ValueError(e.args[0]) from None

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1")
        if self.max_samples < 0 or self.max_minutes < 0:
            raise ValueError("max_samples and max_minutes must be >= 0 (0 = no limit)")
        if self.loss.policy_loss == "gspo" and self.advantage.estimator == "gae":
            raise ValueError("loss.policy_loss=gspo needs one advantage per completion, not gae's per-token ones")
        if self.rollout.overlong_buffer > self.sampling.max_new_tokens:
            raise ValueError(
                f"rollout.overlong_buffer ({self.rollout.overlong_buffer}) must be <= sampling.max_new_tokens "
                f"({self.sampling.max_new_tokens}): the penalty ramps over the last tokens before the limit"
            )
        est, G = self.advantage.estimator, self.rollout.group_size
        if est in ("grpo", "dr_grpo", "rloo") and G < 2:
            raise ValueError(
                f"rollout.group_size must be >= 2 for estimator {est}, got {G}: a group of one completion "
                "has nothing to be compared with (its advantage is 0)"
            )
        if self.loss.policy_loss == "dpo" and G < 2:
            raise ValueError("loss.policy_loss=dpo needs rollout.group_size >= 2 to form accepted/rejected pairs")
        if self.rollout.source != "task-teacher" and self.sampling.temperature <= 0 and G > 1:
            raise ValueError("sampling.temperature must be > 0 when sampling groups (greedy groups have no variance)")
        if self.loss.policy_loss == "likelihood" and est not in ("filter", "one"):
            raise ValueError("loss.policy_loss=likelihood takes no advantages: set advantage.estimator filter or one")
        if self.loss.policy_loss == "dpo" and est != "filter":
            raise ValueError("loss.policy_loss=dpo pairs accepted with rejected: set advantage.estimator filter")
        if self.loss.policy_loss not in ("likelihood", "dpo") and est in ("filter", "one"):
            raise ValueError(f"loss.policy_loss={self.loss.policy_loss} needs an advantage estimator, not {est}")
        if est == "process" and not self.process.prm:
            raise ValueError(
                "advantage.estimator=process needs process.prm (a PRM directory from `veriloop prm train`)"
            )
        if est == "process" and self.process.outcome_weight > 0 and G < 2:
            raise ValueError("process.outcome_weight > 0 needs rollout.group_size >= 2 (group-normalised outcomes)")
        if self.rollout.source == "task-teacher" and self.loss.policy_loss != "likelihood":
            raise ValueError("rollout.source=task-teacher has no behaviour log-probs: use loss.policy_loss likelihood")
        self._refuse_options_that_would_do_nothing()

    def _refuse_options_that_would_do_nothing(self) -> None:
        """An option the chosen method never reads is an error, not a silent no-op.

        A value differing from the field's default counts as set (setting the default explicitly is harmless).
        """
        est, loss, adv = self.advantage.estimator, self.loss, self.advantage
        default_adv, default_loss = AdvantageConfig(), LossConfig()
        if est not in ("grpo", "process") and (adv.std != default_adv.std or adv.eps != default_adv.eps):
            hint = " (Dr. GRPO only centres: r - mean; for std-normalised advantages use estimator grpo)"
            raise ValueError(
                f"advantage.std / advantage.eps are read only by estimators grpo and process; estimator {est} "
                f"ignores them{hint if est == 'dr_grpo' else ''}"
            )
        if est != "gae" and self.critic != CriticConfig():
            raise ValueError(f"critic.* options apply only to estimator gae (PPO's value model), not {est}")
        if est != "process" and self.process != ProcessConfig():
            raise ValueError(f"process.* options apply only to estimator process (--algo grpo_process), not {est}")
        if est != "reinforce" and (adv.baseline != default_adv.baseline or adv.baseline_value != 0.0):
            raise ValueError(f"advantage.baseline / baseline_value are read only by estimator reinforce, not {est}")
        if loss.policy_loss == "dpo":
            ignored = [f"loss.{k}" for k in ("aggregation", "entropy_coef", "tis_cap")
                       if getattr(loss, k) != getattr(default_loss, k)]  # fmt: skip
            if self.kl.beta > 0:
                ignored.append("kl.beta")
            if ignored:
                raise ValueError(
                    f"{', '.join(ignored)} do not apply to loss.policy_loss=dpo: its loss is -log sigmoid(beta * "
                    "margin) of whole-sequence log-prob sums against the reference (the reference is its KL "
                    "anchor, weighted by loss.dpo_beta); there is no per-token aggregation, entropy bonus or "
                    "rollout-engine correction"
                )


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
    eval_problems: int = field(default=200, metadata={"help": "validation problems in the periodic evaluation"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(lr=2e-3, weight_decay=0.01, warmup_steps=200, schedule="cosine")
    )

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if self.policy != "builtin:init" and self.model != TinyModelConfig():
            raise ValueError(
                f"model.* options shape a new built-in model and apply only to policy builtin:init; policy "
                f"{self.policy!r} is loaded with its own architecture"
            )


@dataclass
class EvalRunConfig:
    """``veriloop eval``: held-out evaluation of a policy (and of the task's teacher)."""

    policy: str = field(default="builtin:base", metadata={"help": "model directory or builtin:base"})
    split: str = field(
        default="heldout", metadata={"help": "heldout (report) | validation (choices and tuning read this one)"}
    )
    out: str = field(default="", metadata={"help": "write the result as JSON here"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    task: TaskConfig = field(default_factory=TaskConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        if self.split not in ("heldout", "validation"):
            raise ValueError(f"split must be heldout or validation, got {self.split!r}")
