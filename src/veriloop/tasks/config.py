"""The ``task`` section of every command's options: where problems come from."""

from __future__ import annotations

from dataclasses import dataclass, field

from veriloop.tasks.arithmetic import ArithmeticConfig, TeacherConfig
from veriloop.tasks.base import PROMPT_STYLES, get_task

CHAT_TEMPLATE_MODES = ("auto", "none")


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
    chat_template: str = field(
        default="auto", metadata={"help": "auto: prompts go through the tokenizer's chat template when it has one "
                                  "(user turn, generation prompt); none: plain text"},
    )
    system_prompt: str = field(default="", metadata={"help": "system turn before each prompt (needs a chat template)"})
    prompt_style: str = field(
        default="plain",
        metadata={"help": "gsm8k, jsonl: plain | boxed (an instruction to put the final answer in \\boxed{}, for "
                  "instruct models and MATH rows)"},
    )
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def __post_init__(self):
        if self.chat_template not in CHAT_TEMPLATE_MODES:
            raise ValueError(f"task.chat_template must be one of {CHAT_TEMPLATE_MODES}, got {self.chat_template!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"task.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        if self.prompt_style != "plain" and self.name not in ("gsm8k", "jsonl"):
            raise ValueError(f"task.prompt_style applies to tasks gsm8k and jsonl, not {self.name!r}")

    def build(self):
        if self.name == "arithmetic":
            return get_task("arithmetic", arithmetic=self.arithmetic, teacher=self.teacher)
        if self.name == "jsonl":
            return get_task("jsonl", data=self.data, heldout_data=self.heldout_data,
                            verifier=self.verifier or "arithmetic-outcome", validation_data=self.validation_data,
                            prompt_style=self.prompt_style)  # fmt: skip
        if self.name == "gsm8k":
            return get_task("gsm8k", data=self.data, heldout_data=self.heldout_data, heldout_size=self.heldout_size,
                            prompt_style=self.prompt_style)  # fmt: skip
        return get_task(self.name)

    def eval_verifiers(self) -> dict[str, str]:
        """Verifiers for evaluation: outcome always; format and process where the task has them."""
        if self.name == "arithmetic":
            return {"outcome": "arithmetic-outcome", "format": "arithmetic-format", "process": "arithmetic-process"}
        if self.name == "gsm8k":  # known without loading 8.8k rows to ask the task
            return {"outcome": self.verifier or "gsm8k"}
        return {"outcome": self.verifier or self.build().default_verifier}
