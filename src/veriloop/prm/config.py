"""The ``process`` section of training: PRM step rewards, the outcome mix, iterative PRM refresh."""

from __future__ import annotations

from dataclasses import dataclass, field


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
