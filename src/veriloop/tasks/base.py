"""Problems and the task registry.

A task owns where problems come from (prompts and reference answers), nothing about
rewards or models.  Tasks are chosen by name from the config: ``get_task(name, **options)``.
"""

from __future__ import annotations

import random
import typing
from dataclasses import dataclass, field
from typing import Literal, Protocol

from veriloop.errors import InputError
from veriloop.registry import TASKS


@dataclass(frozen=True)
class Problem:
    """One prompt with the reference its verifier needs.

    ``tags`` name the classes a problem belongs to (for per-class evaluation);
    ``id`` is stable across runs so records can be traced back to their problem;
    ``data_source`` names the kind of data it comes from, which ``reward_sources`` routes to its own reward ('' =
    the task's one kind).
    """

    id: str
    prompt: str
    reference: str
    tags: tuple[str, ...] = field(default_factory=tuple)
    data_source: str = ""


class Task(Protocol):
    """A problem source (registered in ``TASKS`` as a class whose constructor's parameters are the task.* options
    it reads, or as a factory taking them)."""

    name: str
    default_verifier: str

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name} for task.reasoning ``reasoning`` and task.verifier ``verifier``: ``reward`` (what
        training is rewarded by when --verifier is not given), ``outcome`` and, where the traces have them,
        ``format`` and ``process`` (what evaluation reports)."""

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        """``n`` training problems drawn with ``rng`` (never from the held-out split)."""

    def heldout(self) -> list[Problem]:
        """The fixed held-out evaluation set: read once per reported number."""

    def validation(self) -> list[Problem]:
        """The fixed validation set, disjoint from train and held-out: what choices and tuning read."""


# prompt_style boxed: what instruct models are asked in maths RL (the verifiers read \boxed{...})
BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
PromptStyle = Literal["plain", "boxed"]
PROMPT_STYLES = typing.get_args(PromptStyle)
# task.reasoning pot (program of thought): the program's printed output is the answer (verifiers/program.py)
PROGRAM_INSTRUCTION = (
    "\nWrite a Python program that computes the answer and prints only the final answer. "
    "Put the program in one ```python block.\n"
)
# task.reasoning tool (tool-integrated): code blocks run mid-sampling, their output fed back (rollout/tools.py)
TOOL_INSTRUCTION = (
    "\nYou can run Python: write code in a ```python block, and what it prints comes back in an ```output block.\n"
)
ReasoningFormat = Literal["cot", "pot", "tool"]
REASONING_FORMATS = typing.get_args(ReasoningFormat)


@dataclass(frozen=True)
class ToolFormat:
    """The delimiters of code and output blocks in a completion's text."""

    name: str
    code_open: str
    code_close: str
    output_open: str
    output_close: str


# the built-in task (one character per token): {a=2+3;a}[5]{a*4}[20]answer=20
BRACES = ToolFormat("braces", "{", "}", "[", "]")
# GSM8K and MATH rows: ToRA's fenced blocks
FENCES = ToolFormat("fences", "```python\n", "\n```", "\n```output\n", "\n```\n")
TOOL_FORMATS = {f.name: f for f in (BRACES, FENCES)}


def prompt_suffix(prompt_style: str, reasoning: str, plain: str = "") -> str:
    """What follows a row's question (gsm8k, jsonl): ``plain``, the boxed instruction, or the program one; the tool
    format adds how to run code to the first two."""
    if reasoning == "pot":
        if prompt_style != "plain":
            raise InputError(
                f"task.prompt_style {prompt_style!r} asks for a boxed answer, task.reasoning pot for a "
                "printed one: use prompt_style plain with pot"
            )
        return PROGRAM_INSTRUCTION
    asked = BOXED_INSTRUCTION if prompt_style == "boxed" else plain
    return asked + TOOL_INSTRUCTION if reasoning == "tool" else asked


def register_task(name: str):
    """Decorator: ``@register_task("name")`` on a factory taking the task's options (``registry.TASKS``)."""

    def wrap(factory):
        return TASKS.register(name, factory, replace=True)

    return wrap


def get_task(name: str, **options) -> Task:
    return TASKS.get(name)(**options)


Split = Literal["train", "validation", "heldout"]
SPLITS = typing.get_args(Split)


def check_split(split: str) -> None:
    """``split`` names one of ``SPLITS``, or an InputError says which it may name."""
    if split not in SPLITS:
        raise InputError(f"split must be one of {SPLITS}, got {split!r}")


def split_problems(task: Task, split: str) -> list[Problem]:
    """The fixed evaluation set of ``split`` (validation or heldout)."""
    if split == "heldout":
        return task.heldout()
    if split == "validation":
        return task.validation()
    raise InputError(f"split must be validation or heldout, got {split!r}")


def draw_problems(task: Task, split: str, n: int, seed: int) -> list[Problem]:
    """``n`` problems of ``split``: the first ``n`` of a fixed set, or ``n`` train draws seeded by ``seed``."""
    if split == "train":
        return task.train_batch(n, random.Random(seed))
    check_split(split)
    return split_problems(task, split)[:n]


def task_names() -> list[str]:
    return TASKS.names()
