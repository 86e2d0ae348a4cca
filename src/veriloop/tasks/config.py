"""The ``task`` section of every command's options: where problems come from."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Literal

from veriloop.config import check_typed
from veriloop.errors import InputError
from veriloop.options import OptionScope, check_declared, declare
from veriloop.registry import TASKS
from veriloop.tasks.arithmetic import ArithmeticConfig, TeacherConfig
from veriloop.tasks.base import PromptStyle, ReasoningFormat, get_task

ChatTemplate = Literal["auto", "none"]
CHAT_TEMPLATE_MODES = typing.get_args(ChatTemplate)


@dataclass
class TaskConfig:
    """Where problems come from."""

    name: str = field(default="arithmetic", metadata={"help": "where problems come from", "registry": TASKS})
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
    verifier: str = field(
        default="",
        metadata={
            "help": "the verifier of the task's references (jsonl: required, it has none of its own; "
            "gsm8k: default gsm8k)"
        },
    )
    chat_template: ChatTemplate = field(
        default="auto",
        metadata={
            "help": "auto: prompts go through the tokenizer's chat template when it has one "
            "(user turn, generation prompt); none: plain text"
        },
    )
    system_prompt: str = field(default="", metadata={"help": "system turn before each prompt (needs a chat template)"})
    prompt_style: PromptStyle = field(
        default="plain",
        metadata={
            "help": "gsm8k, jsonl: plain, or boxed (an instruction to put the final answer in \\boxed{}, for "
            "instruct models and MATH rows)"
        },
    )
    reasoning: ReasoningFormat = field(
        default="cot",
        metadata={
            "help": "cot: the completion reasons in text; pot: the completion is a program, its printed output "
            "the answer (verifiers arithmetic-pot, gsm8k-pot, math-pot run it in the sandbox); tool: text "
            "with code blocks the sandbox runs during sampling, their output fed back (rollout.max_tool_calls; "
            "verifier arithmetic-tool on the built-in task)"
        },
    )
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def __post_init__(self):
        check_typed(self, "task")
        if self.reasoning == "pot" and self.prompt_style != "plain":
            raise ValueError(
                f"task.prompt_style {self.prompt_style!r} asks for a boxed answer, task.reasoning pot "
                "for a printed one: use prompt_style plain with pot"
            )
        check_declared(self)

    def refuse_tools(self, command: str) -> None:
        """``command`` samples whole completions without pausing for code blocks: a tool trace would be scored
        without its tool's output."""
        if self.reasoning == "tool":
            raise InputError(
                f"{command} samples without running tools; task.reasoning tool is served by `veriloop "
                "train`, `veriloop eval` and the trainer's validation"
            )

    def build(self):
        """The task, given exactly the options it declares (its registered factory's parameters)."""
        if self.reasoning != "cot" and "reasoning" not in task_reads(self.name):
            raise ValueError(
                f"task.reasoning {self.reasoning!r} applies to tasks that read it "
                f"({', '.join(readers('reasoning'))}), not {self.name!r}"
            )
        return get_task(self.name, **{k: getattr(self, k) for k in sorted(task_reads(self.name))})

    def declared_verifiers(self) -> dict[str, str]:
        """The task's ``verifiers(reasoning, verifier)``: a registered class declares them without loading a row; a
        registered factory's task is built to be asked."""
        entry = TASKS.get(self.name)
        declares = entry if isinstance(entry, type) else self.build()
        return declares.verifiers(self.reasoning, self.verifier)

    def reward_verifier(self) -> str:
        """The verifier that rewards training on this task when none is named ('' when the task has none: a jsonl
        task without task.verifier): on the built-in task the seeds' R = 0.8 outcome + 0.2 format (``arithmetic``;
        a program and a tool trace their own)."""
        return self.declared_verifiers().get("reward", "")

    def eval_verifiers(self) -> dict[str, str]:
        """Verifiers for evaluation: outcome always; format and process where the task has them (the built-in
        task's traces; a program has neither)."""
        roles = {role: name for role, name in self.declared_verifiers().items() if role != "reward"}
        if not roles.get("outcome"):
            raise InputError(
                f"task {self.name} has no verifier of its own: name the verifier of its references with "
                "--task.verifier (e.g. gsm8k, math, arithmetic-outcome, code; see `veriloop verifiers`)"
            )
        return roles


# Read for every task: how a prompt becomes tokens (the policy's prompt format), not where problems come from.
COMMON_TASK_OPTIONS = ("name", "chat_template", "system_prompt")
TASK_OPTIONS = tuple(f.name for f in dataclasses.fields(TaskConfig) if f.name not in COMMON_TASK_OPTIONS)


def task_reads(name: str) -> frozenset[str]:
    """The task.* options task ``name`` reads: the parameters of its registered factory that are options."""
    params = inspect.signature(TASKS.get(name)).parameters
    return frozenset(p for p in params if p in TASK_OPTIONS)


def readers(option: str) -> list[str]:
    return [n for n in TASKS.names() if option in task_reads(n)]


TASK_SCOPE = OptionScope("task", "name", TASK_OPTIONS, task_reads, choices=TASKS.names, prefix="task.")
declare(TaskConfig, [TASK_SCOPE], COMMON_TASK_OPTIONS)
