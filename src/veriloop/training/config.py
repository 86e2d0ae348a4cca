"""The ``veriloop train`` option tree: the sections training owns, and the whole tree.

Each package owns its own section (``task`` in ``tasks/config.py``, ``rollout`` in
``rollout/config.py``, ``process`` in ``prm/config.py``, ``optim`` in ``training/loop/optim.py``);
the generic dataclass <-> YAML <-> flags machinery is ``veriloop/config.py``.  Validation
asks the registries (``veriloop/registry.py``): an estimator or objective registered from
outside the package is checked by what it declares, exactly like a built-in one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from veriloop.algorithms.advantages import StdMode
from veriloop.algorithms.aggregation import Aggregation
from veriloop.algorithms.kl import KLEstimator
from veriloop.config import check_typed
from veriloop.models.device import DType, Placement
from veriloop.models.loading import PromptFormat
from veriloop.models.lora import LoraConfig
from veriloop.models.tiny import TinyModelConfig
from veriloop.options import declare, dotted_defaults, refuse_unread
from veriloop.prm.config import ProcessConfig
from veriloop.registry import ESTIMATORS, LEARNERS, OBJECTIVES, VERIFIERS
from veriloop.rollout.config import RayConfig, RolloutConfig, SelectionConfig, VLLMConfig
from veriloop.rollout.sampler import SamplingParams
from veriloop.tasks.config import TaskConfig
from veriloop.training import option_scopes
from veriloop.training.capabilities import check_capabilities
from veriloop.training.loop.optim import OptimConfig
from veriloop.training.loop.signals import check_signal_options
from veriloop.training.recipes import recipe_overrides
from veriloop.training.run.alarms import AlarmsConfig
from veriloop.training.run.export import refuse_shipped_base
from veriloop.training.run.tracking import check_report_to
from veriloop.verifiers.program import check_reasoning_verifier


@dataclass
class AdvantageConfig:
    """How rewards become advantages (the gradient coefficient of each token)."""

    estimator: str = field(
        default="grpo",
        metadata={
            "help": "the advantage estimator (process: PRM step rewards; gae: a learned critic)",
            "registry": ESTIMATORS,
        },
    )
    std: StdMode = field(default="population", metadata={"help": "grpo group std"})
    eps: float = field(default=1e-6, metadata={"help": "added to the group std (adv_eps; not the clip width)", "ge": 0})
    baseline: Literal["none", "batch", "constant"] = field(default="none", metadata={"help": "reinforce baseline"})
    baseline_value: float = field(default=0.0, metadata={"help": "reinforce constant baseline b (baseline=constant)"})
    gamma: float = field(default=1.0, metadata={"help": "gae discount", "ge": 0, "le": 1})
    lam: float = field(default=0.95, metadata={"help": "gae lambda", "ge": 0, "le": 1})
    accept_threshold: float = field(
        default=1.0, metadata={"help": "estimator filter (RFT, distill, DPO pairs): accepted where reward >= this"}
    )

    def __post_init__(self):
        check_typed(self, "advantage")
        ESTIMATORS.get(self.estimator)  # an unknown name is refused with the known ones


@dataclass
class LossConfig:
    """The policy objective and how per-token values become one loss."""

    policy_loss: str = field(default="clip", metadata={"help": "the policy objective", "registry": OBJECTIVES})
    clip_eps_low: float = field(default=0.2, metadata={"help": "ratio clip below 1 - clip_eps_low", "ge": 0})
    clip_eps_high: float = field(default=0.2, metadata={"help": "ratio clip above 1 + clip_eps_high", "ge": 0})
    clip_ratio_c: float = field(default=3.0, metadata={"help": "dual-clip bound c for negative advantages", "gt": 1})
    aggregation: Aggregation = field(
        default="seq-mean-token-mean", metadata={"help": "how per-token losses become one (docs/concepts)"}
    )
    entropy_coef: float = field(default=0.0, metadata={"help": "entropy bonus weight (added to the objective)"})
    dpo_beta: float = field(default=0.1, metadata={"help": "DPO beta", "gt": 0})
    dpo_pairs: Literal["threshold", "best-worst"] = field(
        default="threshold",
        metadata={
            "help": "DPO's pairs of a group: threshold zips the accepted (reward >= advantage.accept_threshold) with "
            "the rejected; best-worst pairs the highest reward with the lowest (one pair, where they differ: a "
            "reward model's scores)"
        },
    )
    tis_cap: float = field(
        default=0.0,
        metadata={
            "help": "truncated importance sampling: recompute old log-probs, weight by min(ratio, cap); 0 = off",
            "ge": 0,
        },
    )
    off_support: Literal["mask", "filter"] = field(
        default="mask",
        metadata={
            "help": "a sampled token outside the current policy's sampling distribution (top-k/top-p/min_new_tokens "
            "cut it: log-prob -inf, ratio 0): mask drops that token's objective term, filter drops its whole "
            "completion's terms (KL and entropy included); either way the loss's normaliser still counts them, "
            "and the step's off_support_* metrics count them"
        },
    )

    def __post_init__(self):
        check_typed(self, "loss")
        OBJECTIVES.get(self.policy_loss)


@dataclass
class KLConfig:
    """KL to a frozen reference: estimator, weight, placement, control, refresh."""

    beta: float = field(
        default=0.1, metadata={"help": "KL weight; 0 = no reference model and no reference pass", "ge": 0}
    )
    estimator: KLEstimator = field(
        default="k3", metadata={"help": "per-token KL estimate (exact: over the vocabulary)"}
    )
    placement: Literal["loss", "reward"] = field(
        default="loss",
        metadata={"help": "a term of the loss (GRPO) or subtracted from the reward per token (PPO-RLHF)"},
    )
    controller: Literal["fixed", "adaptive"] = field(
        default="fixed", metadata={"help": "the KL weight's controller (adaptive: Ziegler et al., towards kl.target)"}
    )
    target: float = field(default=6.0, metadata={"help": "adaptive controller: target KL per completion (nats)"})
    horizon: int = field(default=10000, metadata={"help": "adaptive controller: horizon in completions"})
    reset_every: int = field(
        default=0,
        metadata={"help": "iterative RL: set the reference to the current policy every N steps; 0 = never", "ge": 0},
    )
    importance_weighted: bool = field(
        default=False,
        metadata={
            "help": "weight each token's KL estimate by pi/pi_behaviour (detached, unclipped) so that reused "
            "(update.inner_updates > 1) or lagged samples estimate KL(pi || ref) of the current policy; "
            "false = their plain mean, the behaviour policy's (docs/defaults.md)"
        },
    )

    def in_loss(self, beta: float) -> bool:
        """Is the KL a term of the loss at coefficient ``beta`` (the current one: an adaptive controller moves it)?
        The one place that says so: the signal maker asks it for the reference pass, the learner for the term."""
        return beta > 0 and self.placement == "loss"

    def in_reward(self, beta: float) -> bool:
        """Is the KL subtracted from the reward, per token, when the batch is scored (PPO-RLHF)?"""
        return beta > 0 and self.placement == "reward"

    def __post_init__(self):
        check_typed(self, "kl")
        if self.importance_weighted and self.estimator == "exact":
            raise ValueError(
                "kl.importance_weighted with kl.estimator=exact: the exact KL sums over the whole "
                "next-token distribution, so there is no sampled token to reweight"
            )
        if self.importance_weighted and self.placement == "reward":
            raise ValueError(
                "kl.importance_weighted weights the KL term of the loss at each pass; with "
                "kl.placement=reward the penalty is fixed in the reward when the batch is scored: "
                "use kl.placement=loss"
            )
        if self.placement == "reward" and self.estimator == "exact":
            raise ValueError("kl.placement=reward needs a per-token estimator (k1, k2 or k3), not exact")
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

    inner_updates: int = field(default=2, metadata={"help": "mu: passes over each batch", "ge": 1})
    mini_batches: int = field(
        default=1, metadata={"help": "optimizer steps per pass (the batch split into this many)", "ge": 1}
    )
    micro_batch_size: int = field(
        default=0,
        metadata={
            "help": "sequences per forward/backward (gradient accumulation); 0 = as many as "
            "update.micro_batch_memory_mib holds",
            "ge": 0,
        },
    )
    micro_batch_memory_mib: float = field(
        default=1024.0,
        metadata={
            "help": "activation memory one micro-batch may hold, estimated from the model's shapes for the longest "
            "prompt plus max_new_tokens (docs/configuration.md#micro-batches); read when micro_batch_size is 0",
            "gt": 0,
        },
    )
    max_tokens_per_micro_batch: int = field(
        default=0,
        metadata={"help": "also cut micro-batches so rows x longest (prompt + completion) <= this; 0 = off", "ge": 0},
    )
    logprob_chunk_tokens: int = field(
        default=0,
        metadata={
            "help": "completion tokens per LM-head chunk (log-probs and entropy without [N, T, V] in "
            "float32); 0 = auto (2**25 logits per chunk, 2**27 on a GPU)",
            "ge": 0,
        },
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "recompute each decoder layer's activations in the backward pass"}
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={
            "help": "leave out completions whose gradient is exactly 0 (advantage 0 everywhere and no KL or "
            "entropy term in the loss), so skipping never changes the update"
        },
    )
    mask_truncated: bool = field(
        default=True,
        metadata={
            "help": "leave completions cut at max_new_tokens (finish length: no verdict on their ending) out "
            "of the loss and of their group's baseline; false = learn from them as from ended ones, as "
            "rollout.overlong_buffer's penalty needs (docs/defaults.md)"
        },
    )

    def __post_init__(self):
        check_typed(self, "update")


@dataclass
class LearnerConfig:
    """Where the update runs: in this process, or as one torch.distributed group of ``world_size`` ranks."""

    strategy: str = field(
        default="local",
        metadata={
            "help": "where the update runs: local (this process), ddp (data parallel: every rank a full copy), "
            "fsdp2 (fully_shard per decoder layer and the root)",
            "registry": LEARNERS,
        },
    )
    world_size: int = field(
        default=1, metadata={"help": "learner ranks (processes veriloop spawns) for ddp/fsdp2", "ge": 1}
    )
    backend: Literal["auto", "gloo", "nccl"] = field(
        default="auto", metadata={"help": "torch.distributed backend (auto: nccl on a GPU, gloo on CPU)"}
    )
    timeout_s: float = field(
        default=600.0,
        metadata={"help": "a collective, a rank's reply or its start running longer fails the run", "gt": 0},
    )
    placement: Literal["processes", "ray"] = field(
        default="processes",
        metadata={
            "help": "where the ranks run: processes (spawned on this machine) or ray (Ray actors placed by a "
            "placement group, on any node of the cluster ray.address names)"
        },
    )
    nodes: int = field(
        default=1, metadata={"help": "placement ray: nodes the ranks spread over (one bundle each)", "ge": 1}
    )
    ranks_per_node: int = field(
        default=0, metadata={"help": "placement ray: ranks on each node; 0 = world_size / nodes", "ge": 0}
    )
    node_strategy: Literal["spread", "pack"] = field(
        default="spread",
        metadata={"help": "placement ray: spread (each node's bundle on a different node) or pack (as few as fit)"},
    )
    cpus_per_rank: float = field(default=1.0, metadata={"help": "placement ray: CPUs each rank reserves", "ge": 0})
    gpus_per_rank: float = field(
        default=0.0, metadata={"help": "placement ray: GPUs each rank reserves (0 = 1 with nccl, else none)", "ge": 0}
    )
    sync_bucket_mb: float = field(
        default=64.0,
        metadata={
            "help": "weights leave the ranks in buckets of at most this many MiB (the weights' own dtype); a "
            "reader holds one bucket at a time",
            "gt": 0,
        },
    )

    controller_weights: Literal["full", "none"] = field(
        default="full",
        metadata={
            "help": "full: the controller keeps a copy of the policy, filled bucket by bucket after each update; "
            "none (learner.placement ray, fsdp2, rollout.engine ray): the weights live only on the ranks and the "
            "rollout actors; validation runs on rollout actor 0, checkpoints hold shards, final/ is exported from them"
        },
    )

    def __post_init__(self):
        check_typed(self, "learner")
        if self.strategy not in LEARNERS:
            raise ValueError(f"learner.strategy must be a registered one ({LEARNERS.choices()}), got {self.strategy!r}")
        if self.placement == "processes" and self.nodes > 1:
            raise ValueError(
                f"learner.nodes={self.nodes} needs learner.placement ray (spawned ranks share one machine)"
            )
        per_node = self.ranks_per_node or self.world_size // self.nodes
        if per_node * self.nodes != self.world_size:
            raise ValueError(
                f"learner.world_size={self.world_size} is not learner.nodes={self.nodes} x learner.ranks_per_node="
                f"{self.ranks_per_node or 'world_size / nodes'}"
            )


@dataclass
class CriticConfig:
    """The value model of estimator gae (PPO proper): the policy's backbone plus a scalar head."""

    lr: float = field(default=1e-4, metadata={"help": "critic learning rate (AdamW)", "gt": 0})
    value_clip: float = field(
        default=0.2, metadata={"help": "clip value updates to +-this around the old values; 0 = off", "ge": 0}
    )
    warmup_steps: int = field(
        default=0, metadata={"help": "the first N steps train only the critic (the policy is not updated)", "ge": 0}
    )

    def __post_init__(self):
        check_typed(self, "critic")


@dataclass
class TrainConfig:
    """``veriloop train``: one loop for SFT, RFT, DPO, REINFORCE, RLOO, PPO, GRPO and variants."""

    algo: str = field(default="grpo", metadata={"help": "recipe whose defaults apply (see `veriloop algos`)"})
    policy: str = field(
        default="builtin:base", metadata={"help": "model directory, builtin:base, or builtin:init (a new tiny model)"}
    )
    reference: str = field(default="", metadata={"help": "KL/DPO reference model; empty = the starting policy"})
    run_dir: str = field(default="runs/grpo", metadata={"help": "where config, metrics, records, checkpoints go"})
    seed: int = field(
        default=0, metadata={"help": "run seed: every random draw derives from it", "ge": 0, "lt": 2**63}
    )  # derived seeds and torch.manual_seed take a signed 64-bit integer
    steps: int = field(default=200, metadata={"help": "training steps (one batch of B x G completions each)", "ge": 1})
    max_minutes: float = field(default=0.0, metadata={"help": "stop after this much wall time; 0 = no limit", "ge": 0})
    max_samples: int = field(
        default=0,
        metadata={"help": "stop once this many completions were sampled (sample budget); 0 = no limit", "ge": 0},
    )
    max_sampled_tokens: int = field(
        default=0,
        metadata={
            "help": "stop once this many tokens were sampled (the model's: a tool's output and a "
            "forced marker do not count); compares formats at equal sampled tokens; 0 = no limit",
            "ge": 0,
        },
    )
    verifier: str = field(
        default="",
        metadata={
            "help": "reward verifier (see `veriloop verifiers`); empty = the task's own (the "
            "built-in task: arithmetic, R = 0.8 outcome + 0.2 format; gsm8k: gsm8k; jsonl: "
            "task.verifier, which it needs)",
            "registry": VERIFIERS,
        },
    )
    reward_model: str = field(
        default="",
        metadata={
            "help": "Bradley-Terry reward model directory (`veriloop rm train`): its r(prompt, completion) is the "
            "reward, and the verifier (--verifier or the task's) is recorded beside it, not rewarded; '' = none"
        },
    )
    judge: str = field(
        default="",
        metadata={
            "help": "model-based judge directory (`veriloop judge train`, or a local causal LM read with the standard "
            "rubric): its verdict is the reward, and the verifier (--verifier or the task's) is recorded beside it, "
            "not rewarded; '' = none"
        },
    )
    reward_sources: str = field(
        default="",
        metadata={
            "help": "mixed rewards: DATA_SOURCE=VERIFIER,... scores each kind of row (a JSONL row's data_source) "
            "with its own source, a verifier's name, reward_model (--reward_model) or judge (--judge), the last two "
            "unaudited; kinds not named are scored by --verifier; '' = one reward for every row"
        },
    )
    checkpoint_every: int = field(default=20, metadata={"help": "save a resumable checkpoint every N steps", "ge": 1})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep", "ge": 1})
    save_rollouts: bool = field(default=True, metadata={"help": "write every record to rollouts/step-N.jsonl.gz"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads; 0 = torch's default"})
    export: str = field(
        default="", metadata={"help": "also save the final model here (e.g. runs/NAME/model; never the shipped base)"}
    )
    eval_every: int = field(
        default=0, metadata={"help": "greedy validation accuracy every N steps; 0 = never", "ge": 0}
    )
    eval_problems: int = field(default=200, metadata={"help": "validation problems in the periodic evaluation"})
    eval_split: Literal["validation", "heldout"] = field(
        default="validation",
        metadata={
            "help": "split of the periodic evaluation: validation (what choices read), or heldout (a curve of "
            "the test set: no choice may be made from it)"
        },
    )
    device: str = field(default="auto", metadata={"help": "auto (cuda when present), cpu, cuda, or cuda:N"})
    dtype: DType = field(
        default="float32",
        metadata={
            "help": "weights of policy, reference, sampler (log-softmax, ratios, KL, loss and optimizer state "
            "stay float32)"
        },
    )
    report_to: str = field(
        default="none",
        metadata={
            "help": "experiment tracking: none, or tensorboard, wandb, mlflow (comma-separated for several; "
            "wandb offline unless WANDB_MODE=online)"
        },
    )
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.7, max_new_tokens=64))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)

    def prompt_format(self) -> PromptFormat:
        """How every policy of the run (start, reference, teacher) turns a prompt into ids."""
        return PromptFormat(self.task.chat_template, self.task.system_prompt)

    def placement(self) -> Placement:
        """The resolved device and dtype (an absent GPU is an InputError here, before anything loads)."""
        return Placement.of(self.device, self.dtype)

    @staticmethod
    def config_defaults(data: dict) -> dict:
        """The recipe named by ``algo`` supplies defaults under the user's own keys."""
        return recipe_overrides(str(data.get("algo", "grpo")))

    def __post_init__(self):
        check_typed(self)
        if not str(self.run_dir).strip():
            raise ValueError("run_dir must name a directory, got an empty string")
        check_report_to(self.report_to)
        self.verifier = self.verifier or self._task_verifier()
        check_reasoning_verifier(self.task.reasoning, self.verifier)
        self._check_tools(ESTIMATORS.get(self.advantage.estimator))
        self._check_thinking_budget()
        check_capabilities(self)  # what the rollout engine and the learner strategy declare they serve
        if self.lora.enabled and self.kl.reset_every:
            raise ValueError(
                "kl.reset_every with lora: the reference is the base under the adapters and cannot "
                "be moved to the policy; train without lora or without the reset"
            )
        if self.rollout.overlong_buffer > self.sampling.max_new_tokens:
            raise ValueError(
                f"rollout.overlong_buffer ({self.rollout.overlong_buffer}) must be <= sampling.max_new_tokens "
                f"({self.sampling.max_new_tokens}): the penalty ramps over the last tokens before the limit"
            )
        if self.rollout.teacher_set == "fixed":
            self._check_fixed_teacher_set()
        if self.selection.filter:
            self._check_selection()
        if self.reward_model:
            self._check_reward_model()
        if self.judge:
            self._check_judge()
        if self.reward_sources:
            self._check_reward_sources()
        if self.rollout.source != "task-teacher" and self.sampling.temperature <= 0 and self.rollout.group_size > 1:
            raise ValueError("sampling.temperature must be > 0 when sampling groups (greedy groups have no variance)")
        self._check_estimator_and_objective(
            ESTIMATORS.get(self.advantage.estimator), OBJECTIVES.get(self.loss.policy_loss)
        )
        refuse_unread(self, option_scopes.SCOPES, self.recipe_defaults(self.algo))
        check_signal_options(self)
        refuse_shipped_base(self.export)

    @staticmethod
    def recipe_defaults(algo: str) -> dict:
        """Every option's default under the recipe ``algo`` (dotted keys): what a user did not set."""
        return {**dotted_defaults(TrainConfig), **recipe_overrides(algo)}

    def _task_verifier(self) -> str:
        own = self.task.reward_verifier()
        if not own:
            raise ValueError(
                f"task {self.task.name} has no verifier of its own: name the verifier of its references "
                "with --task.verifier (e.g. gsm8k, math, arithmetic-outcome, code; see `veriloop "
                "verifiers`), or the reward's with --verifier"
            )
        return own

    def _check_selection(self) -> None:
        """Pass rates of the policy's own samples, measured between steps: on the policy, one batch in order."""
        r = self.rollout
        if r.source != "policy":
            raise ValueError(
                f"selection.filter with rollout.source {r.source}: the pass rates are the policy's own samples' "
                "(seed 002 s.7); use rollout.source policy"
            )
        if r.mode != "sync" or r.lag:
            raise ValueError(
                f"selection.filter with rollout.mode {r.mode} and rollout.lag {r.lag}: the pool is measured between "
                "steps, with the weights of the step about to sample; use rollout.mode sync and rollout.lag 0"
            )

    def _check_reward_model(self) -> None:
        """A directory of `veriloop rm train`, and no option that reads the reward as a pass/fail."""
        if not (Path(self.reward_model) / "rm.json").is_file():
            raise ValueError(
                f"reward_model {self.reward_model!r} is not a reward model directory (no rm.json; train one with "
                "`veriloop rm train`)"
            )
        if self.selection.filter:
            raise ValueError(
                "selection.filter with reward_model: the pass rates are reward >= advantage.accept_threshold, and a "
                "reward model's r is no pass/fail; select without reward_model, or train without selection.filter"
            )

    def _check_judge(self) -> None:
        """A model directory, not beside a reward model (one learned reward a row; reward_sources routes both)."""
        if not Path(self.judge).is_dir() and not self.judge.startswith("builtin:"):
            raise ValueError(f"judge {self.judge!r} is not a directory (train one with `veriloop judge train`)")
        if self.reward_model and not self.reward_sources:
            raise ValueError(
                "judge and reward_model both set: each row has one reward; route kinds of rows to each with "
                "reward_sources (e.g. chat=judge,prefs=reward_model), or keep one"
            )

    def _check_reward_sources(self) -> None:
        """Each route a registered verifier, reward_model (which needs --reward_model) or judge (--judge); a learned
        reward set but routed to no kind would be read by nothing."""
        from veriloop.training.loop.reward_sources import JUDGE, REWARD_MODEL, parse_reward_sources

        routes = parse_reward_sources(self.reward_sources)
        needs = {REWARD_MODEL: ("reward_model", self.reward_model), JUDGE: ("judge", self.judge)}
        for source, name in routes.items():
            if name in needs:
                option, value = needs[name]
                if not value:
                    raise ValueError(f"reward_sources routes {source!r} to {name}: set --{option} DIR")
            elif name not in VERIFIERS:
                raise ValueError(
                    f"reward_sources: {source}={name}: no verifier {name!r} (known: {', '.join(VERIFIERS.names())}, "
                    f"{REWARD_MODEL} or {JUDGE})"
                )
        for name, (option, value) in needs.items():
            if value and name not in routes.values():
                raise ValueError(
                    f"{option} is set but reward_sources routes no data source to it: name a kind with "
                    f"KIND={name}, or leave reward_sources out to reward every row with it"
                )

    def _check_fixed_teacher_set(self) -> None:
        """One set sampled at step 1 and passed over every step: one batch in order, nothing sampled ahead."""
        r = self.rollout
        if r.mode != "sync" or r.lag:
            raise ValueError(
                f"rollout.teacher_set fixed with rollout.mode {r.mode} and rollout.lag {r.lag}: the set is sampled "
                "once, before step 1 learns from it; use rollout.mode sync and rollout.lag 0"
            )
        if r.dynamic_sampling:
            raise ValueError(
                "rollout.teacher_set fixed with rollout.dynamic_sampling: resampling has nothing to draw from a "
                "fixed set; turn one of them off"
            )

    def _check_thinking_budget(self) -> None:
        """sampling.max_thinking_tokens forces a marker into sampled completions: where nothing is sampled, or an
        engine cannot pause, it would do nothing silently."""
        if not self.sampling.max_thinking_tokens:
            if self.sampling.thinking_end:
                raise ValueError("sampling.thinking_end applies only with sampling.max_thinking_tokens > 0")
            return
        r = self.rollout
        if r.source == "task-teacher":
            raise ValueError(
                "sampling.max_thinking_tokens with rollout.source task-teacher: the task's traces are "
                "not sampled, so nothing would be forced"
            )
        if self.task.reasoning == "tool":
            raise ValueError(
                "sampling.max_thinking_tokens with task.reasoning tool is not built: a tool's output "
                "would count towards the thinking budget"
            )

    def _check_tools(self, estimator) -> None:
        """Tool-integrated rollouts (task.reasoning tool) and what they cannot serve."""
        r = self.rollout
        if self.task.reasoning != "tool":
            return
        if r.source in ("initial", "teacher"):
            raise ValueError(
                f"rollout.source {r.source} with task.reasoning tool: only the policy's own rollouts "
                "(source policy) and the task's demonstrations (task-teacher) run tools"
            )
        if estimator.needs_prm:
            raise ValueError(
                f"advantage.estimator {self.advantage.estimator} with task.reasoning tool: the PRM scores text steps "
                "and has no notion of a tool's output; use an outcome estimator"
            )
        if self.sampling.min_new_tokens:
            raise ValueError(
                "sampling.min_new_tokens with task.reasoning tool: a tool's output would count towards it; leave it 0"
            )

    def _check_estimator_and_objective(self, estimator, objective) -> None:
        """What the registered entries declare they need, against what is configured."""
        est, loss, G = self.advantage.estimator, self.loss.policy_loss, self.rollout.group_size
        if G < estimator.min_group_size:
            raise ValueError(
                f"rollout.group_size must be >= {estimator.min_group_size} for estimator {est}, got {G}: a group "
                "of one completion has nothing to be compared with (its advantage is 0)"
            )
        if G < objective.min_group_size:
            raise ValueError(
                f"loss.policy_loss={loss} needs rollout.group_size >= {objective.min_group_size} "
                "to form accepted/rejected pairs"
            )
        objective.check(self)
        if objective.per_completion_advantage and estimator.per_token:
            raise ValueError(f"loss.policy_loss={loss} needs one advantage per completion, not {est}'s per-token ones")
        if objective.coefficients == "coefficient" and estimator.kind != "coefficient":
            raise ValueError(f"loss.policy_loss={loss} takes no advantages: set advantage.estimator filter or one")
        if objective.coefficients == "advantage" and estimator.kind == "coefficient":
            raise ValueError(f"loss.policy_loss={loss} needs an advantage estimator, not {est}")
        if estimator.needs_prm and not self.process.prm:
            raise ValueError(f"advantage.estimator={est} needs process.prm (a PRM directory from `veriloop prm train`)")
        if estimator.needs_prm and not estimator.per_token and self.process.outcome_weight > 0 and G < 2:
            raise ValueError("process.outcome_weight > 0 needs rollout.group_size >= 2 (group-normalised outcomes)")
        if self.rollout.source == "task-teacher" and not objective.learns_from_demonstrations:
            raise ValueError("rollout.source=task-teacher has no behaviour log-probs: use loss.policy_loss likelihood")


declare(TrainConfig, option_scopes.SCOPES, option_scopes.COMMON)
