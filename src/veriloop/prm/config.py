"""The ``process`` section of training: PRM step rewards, the outcome mix, iterative PRM refresh."""

from __future__ import annotations

from dataclasses import dataclass, field

from veriloop.config import check_typed


@dataclass
class ProcessConfig:
    """Process supervision (estimators process, gae_process): PRM step rewards, outcome mix, iterative refresh."""

    prm: str = field(default="", metadata={"help": "PRM directory (`veriloop prm train`) that scores every step"})
    process_weight: float = field(
        default=1.0,
        metadata={"help": "weight of the process-supervised advantage (gae_process: of the step rewards)", "ge": 0},
    )
    outcome_weight: float = field(
        default=0.0,
        metadata={
            "help": "weight of the group-normalised outcome advantage added to it (gae_process: of the outcome "
            "reward on the last token); 0 = process only",
            "ge": 0,
        },
    )
    step_offset: float = field(
        default=0.0,
        metadata={
            "help": "estimator gae_process: subtracted from every step score before it is a token reward "
            "(0 = Math-Shepherd's raw score; 0.5 centres a [0, 1] PRM: a doubtful step costs)"
        },
    )
    refresh_every: int = field(
        default=0,
        metadata={
            "help": "every N steps relabel recent samples with the current policy and refit the PRM; 0 = never",
            "ge": 0,
        },
    )
    refresh_completions: int = field(
        default=4, metadata={"help": "refresh: completions N of each step prefix", "ge": 1}
    )
    refresh_solutions: int = field(
        default=256, metadata={"help": "refresh: most recent solutions labelled, at most", "ge": 1}
    )
    refresh_replay: float = field(
        default=0.1, metadata={"help": "refresh: share of older labelled data replayed", "ge": 0, "lt": 1}
    )
    refresh_epochs: int = field(default=1, metadata={"help": "refresh: passes over the new data", "ge": 1})
    refresh_lr: float = field(default=1e-4, metadata={"help": "refresh: PRM learning rate", "gt": 0})
    replay_data: str = field(default="", metadata={"help": "refresh: the PRM's original label file (replay pool)"})

    def __post_init__(self):
        check_typed(self, "process")
