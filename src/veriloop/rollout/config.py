"""The ``rollout`` section: where a step's completions come from, how many, and in what requests."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    request_groups: int = field(
        default=0,
        metadata={"help": "groups per rollout request (a fixed cut, so records never depend on how many engines "
                  "serve them); 0 = each sampling round in one request"},
    )  # fmt: skip

    def __post_init__(self):
        for name in ("prompts_per_step", "group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.source not in DATA_SOURCES:
            raise ValueError(f"rollout.source must be one of {DATA_SOURCES}, got {self.source!r}")
        if self.source == "teacher" and not self.teacher:
            raise ValueError("rollout.source=teacher needs rollout.teacher (a model directory)")
        if min(self.lag, self.max_staleness, self.max_resample_rounds, self.overlong_buffer, self.request_groups) < 0:
            raise ValueError("rollout.lag, max_staleness, max_resample_rounds, overlong_buffer and request_groups "
                             "must be >= 0")
