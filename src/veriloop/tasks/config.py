"""The ``task`` section of every command's options: where problems come from."""

from __future__ import annotations

from dataclasses import dataclass, field

from veriloop.tasks.arithmetic import ArithmeticConfig, TeacherConfig
from veriloop.tasks.base import get_task


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
