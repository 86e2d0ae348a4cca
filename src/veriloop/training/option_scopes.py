"""The ``veriloop train`` options that belong to a component, and which component reads which.

Each scope is an ``OptionScope`` (``veriloop/options.py``): the advantage estimator reads the
``advantage.*`` options its registry entry lists, and ``critic.*`` / ``process.*`` when it needs a
critic / a PRM; the policy objective the ``loss.*`` options of its entry (``Objective.reads``); the KL
term, off at ``kl.beta`` 0, its ``kl.*`` options and the ``reference``; the rollout engine ``ray.*``,
``vllm.*`` and the request options; the learner strategy its ``learner.*``; adapters at ``lora.r`` > 0
their ``lora.*``; a new built-in model (``policy builtin:init``) the ``model.*`` shape.  The ``task.*``
and ``optim.*`` sections check their own scopes.  Every other option is read whatever is chosen
(``COMMON``); the test of these declarations walks them all.
"""

from __future__ import annotations

from veriloop.options import OptionScope
from veriloop.registry import ENGINES, ESTIMATORS, LEARNERS, OBJECTIVES
from veriloop.training.capabilities import rollout_engine

_CRITIC_SECTION, _PRM_SECTION = "critic", "process"


def _estimator_reads(name: str) -> tuple[str, ...]:
    e = ESTIMATORS.get(name)
    return (
        *(f"advantage.{k}" for k in e.reads),
        *((_CRITIC_SECTION,) if e.needs_critic else ()),
        *((_PRM_SECTION,) if e.needs_prm else ()),
        # the step offset turns scores into token rewards: the GAE form's (gae_process), not the group-normalised one
        *(("-process.step_offset",) if e.needs_prm and not e.per_token else ()),
    )


ESTIMATOR = OptionScope(
    "advantage estimator",
    "advantage.estimator",
    (
        "advantage.std",
        "advantage.eps",
        "advantage.baseline",
        "advantage.baseline_value",
        "advantage.gamma",
        "advantage.lam",
        "advantage.accept_threshold",
        _CRITIC_SECTION,
        _PRM_SECTION,
    ),
    _estimator_reads,
    choices=ESTIMATORS.names,
    hint={
        "advantage.std": "Dr. GRPO (dr_grpo) only centres, r - mean; std-normalised advantages are estimator "
        "grpo's (and process's): set advantage.estimator to one of them"
    },
)

OBJECTIVE = OptionScope(
    "policy objective",
    "loss.policy_loss",
    (
        "loss.clip_eps_low",
        "loss.clip_eps_high",
        "loss.clip_ratio_c",
        "loss.aggregation",
        "loss.entropy_coef",
        "loss.dpo_beta",
        "loss.dpo_pairs",
        "loss.tis_cap",
        "loss.off_support",
    ),
    lambda name: tuple(f"loss.{k}" for k in OBJECTIVES.get(name).reads),
    choices=OBJECTIVES.names,
)


def _kl_term(cfg) -> str:
    """``off``: no KL term and no reference; ``anchor``: no KL term, a reference all the same (DPO's)."""
    if cfg.kl.beta > 0:
        return cfg.kl.controller
    return "anchor" if OBJECTIVES.get(cfg.loss.policy_loss).needs_reference else "off"


KL_TERM = OptionScope(
    "KL term",
    "kl.beta",
    ("kl", "-kl.beta", "reference"),
    {
        "off": (),
        "anchor": ("kl.reset_every", "reference"),
        # every kl.* option but the adaptive controller's own (an option added to KLConfig is the KL term's)
        "fixed": ("kl", "reference", "-kl.target", "-kl.horizon"),
        "adaptive": ("kl", "reference"),
    },
    component=_kl_term,
    when={
        "off": "kl.beta 0",
        "anchor": "kl.beta 0 and loss.policy_loss dpo (its reference)",
        "fixed": "kl.beta > 0",
        "adaptive": "kl.beta > 0 and kl.controller adaptive",
    },
    choose=lambda name: {
        "off": {"kl.beta": 0.0},
        "anchor": {"algo": "dpo"},
        "fixed": {"kl.beta": 0.1, "kl.controller": "fixed"},
        "adaptive": {"kl.beta": 0.1, "kl.controller": "adaptive"},
    }[name],
)


def _engine(cfg) -> str:
    """The engine as its registered class labels it (ray holding vllm: ray+vllm)."""
    return rollout_engine(cfg)[1]


def _engine_class(label: str):
    """The registered engine a label names (``ray+vllm``: ray)."""
    return ENGINES.get(label.partition("+")[0])


# Which engine reads which option is what each registered engine declares (RegisteredEngine.options / reads): a
# plugin's engine is held to it exactly as a built-in one.  The scope's options are the engine sections of the tree.
ENGINE = OptionScope(
    "rollout engine",
    "rollout.engine",
    ("rollout.workers", "rollout.mode", "rollout.request_timeout_s", "rollout.max_request_retries", "ray", "vllm"),
    lambda label: _engine_class(label).reads(label),
    choices=lambda: [label for _, engine in ENGINES.items() for label in engine.labels()],
    component=_engine,
    when=lambda label: " and ".join(f"{k} {v}" for k, v in _engine_class(label).choosing(label).items()),
    choose=lambda label: _engine_class(label).choosing(label),
)

LEARNER = OptionScope(
    "learner strategy",
    "learner.strategy",
    (
        "learner.world_size",
        "learner.backend",
        "learner.timeout_s",
        "learner.placement",
        "learner.nodes",
        "learner.ranks_per_node",
        "learner.node_strategy",
        "learner.cpus_per_rank",
        "learner.gpus_per_rank",
        "learner.sync_bucket_mb",
        "learner.controller_weights",
    ),
    # the rank options belong to the strategies that declare ranks (a plugin's included)
    lambda name: ("learner",) if LEARNERS.get(name).capabilities.distributed else (),
    choices=LEARNERS.names,
)

ADAPTERS = OptionScope(
    "adapters",
    "lora.r",
    ("lora.alpha", "lora.dropout", "lora.target_modules", "vllm.lora"),
    {"off": (), "on": ("lora", "vllm.lora")},
    component=lambda cfg: "on" if cfg.lora.r > 0 else "off",
    choose=lambda name: {"lora.r": 8 if name == "on" else 0},
    when={"on": "lora.r > 0", "off": "lora.r 0"},
)

NEW_MODEL = OptionScope(
    "starting policy",
    "policy",
    ("model",),
    {"builtin:init": ("model",), "loaded": ()},
    component=lambda cfg: "builtin:init" if cfg.policy == "builtin:init" else "loaded",
    choose=lambda name: {"policy": "builtin:init" if name == "builtin:init" else "builtin:base"},
    when={"builtin:init": "policy builtin:init", "loaded": "policy a model directory or builtin:base"},
    hint={
        "model": "model.* shapes a new built-in model (policy builtin:init); a loaded policy keeps its own architecture"
    },
)

SOURCE = OptionScope(
    "rollout source",
    "rollout.source",
    ("rollout.teacher", "rollout.teacher_set"),
    {
        "policy": (),
        "initial": ("rollout.teacher_set",),
        "teacher": ("rollout.teacher", "rollout.teacher_set"),
        "task-teacher": (),
    },
)

DYNAMIC_SAMPLING = OptionScope(
    "dynamic sampling",
    "rollout.dynamic_sampling",
    ("rollout.max_resample_rounds",),
    {"on": ("rollout.max_resample_rounds",), "off": ()},
    component=lambda cfg: "on" if cfg.rollout.dynamic_sampling else "off",
    choose=lambda name: {"rollout.dynamic_sampling": name == "on"},
    when={"on": "rollout.dynamic_sampling true", "off": "rollout.dynamic_sampling false"},
)

PERIODIC_EVAL = OptionScope(
    "periodic evaluation",
    "eval_every",
    ("eval_problems", "eval_split"),
    {"on": ("eval_problems", "eval_split"), "never": ()},
    component=lambda cfg: "on" if cfg.eval_every > 0 else "never",
    choose=lambda name: {"eval_every": 5 if name == "on" else 0},
    when={"on": "eval_every > 0", "never": "eval_every 0"},
)

TOOLS = OptionScope(
    "reasoning format",
    "task.reasoning",
    ("rollout.max_tool_calls", "rollout.tool_timeout_s", "rollout.tool_interpreter"),
    {"cot": (), "pot": (), "tool": ("rollout.max_tool_calls", "rollout.tool_timeout_s", "rollout.tool_interpreter")},
)

SELECTION = OptionScope(
    "problem selection",
    "selection.filter",
    ("selection", "-selection.filter"),
    {"on": ("selection",), "off": ()},
    component=lambda cfg: "on" if cfg.selection.filter else "off",
    choose=lambda name: {"selection.filter": name == "on"},
    when={"on": "selection.filter true", "off": "selection.filter false"},
)

SCOPES = (
    ESTIMATOR,
    OBJECTIVE,
    KL_TERM,
    ENGINE,
    LEARNER,
    ADAPTERS,
    NEW_MODEL,
    SOURCE,
    DYNAMIC_SAMPLING,
    PERIODIC_EVAL,
    TOOLS,
    SELECTION,
)

# Read whatever is chosen (the selectors among them).  ``task.*`` and ``optim.*`` check their own scopes.
COMMON = (
    "algo",
    "policy",
    "run_dir",
    "seed",
    "steps",
    "max_minutes",
    "max_samples",
    "max_sampled_tokens",
    "verifier",
    "reward_model",
    "judge",
    "reward_sources",
    "checkpoint_every",
    "keep_checkpoints",
    "save_rollouts",
    "threads",
    "export",
    "eval_every",
    "device",
    "dtype",
    "report_to",
    "task",
    "optim",
    "sampling",
    "update",
    "advantage.estimator",
    "loss.policy_loss",
    "kl.beta",
    "learner.strategy",
    "lora.r",
    "rollout.prompts_per_step",
    "rollout.group_size",
    "rollout.source",
    "rollout.dynamic_sampling",
    "selection.filter",
    "rollout.lag",
    "rollout.max_staleness",
    "rollout.overlong_buffer",
    "rollout.length_cost",
    "rollout.request_groups",
    "rollout.engine",
    "alarms",
)
