"""GSM8K (Cobbe et al. 2021, MIT licence): grade-school word problems with worked solutions.

Rows are the dataset's ``{"question": ..., "answer": "...\\n#### N"}``.  The prompt is the
question followed by ``prompt_suffix``; the reference is the whole solution (the ``gsm8k``
verifier reads its ``#### N``); the solution is also the demonstration ``--algo sft`` imitates.
``prompt_style boxed`` asks instead for the final answer in ``\\boxed{}`` (the instruction instruct
models are trained with; the verifier reads either form), and its demonstrations end with the box.
A copy of the dataset ships in ``veriloop/data/gsm8k`` (train 7,473, test 1,319 rows) and is
the default; ``--task.data`` / ``--task.heldout_data`` point at other files of the same form.
The validation split is the train rows whose question hashes below ``VALIDATION_SHARE`` (5%,
about 370 rows): never drawn for training, and what choices and tuning read instead of the test set.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from veriloop.tasks.base import FENCES, Problem
from veriloop.tasks.base import prompt_suffix as suffix_for
from veriloop.tasks.jsonl import DatasetError, jsonl_objects

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "gsm8k"
DEFAULT_SUFFIX = "\nAnswer step by step and end with a line '#### <number>'.\n"
VALIDATION_SHARE = 0.05


def _in_validation(question: str) -> bool:
    return int(hashlib.sha256(question.encode()).hexdigest()[:12], 16) / 16**12 < VALIDATION_SHARE


def load_gsm8k(path: str | Path, split: str, suffix: str = DEFAULT_SUFFIX) -> tuple[list[Problem], dict[str, str]]:
    """(problems, id -> solution) from a GSM8K JSONL file; a malformed row names file and line."""
    problems, solutions = [], {}
    for where, lineno, row in jsonl_objects(path, "GSM8K file"):
        for key in ("question", "answer"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise DatasetError(f"{where}: field {key!r} must be a non-empty string")
        if "####" not in row["answer"]:
            raise DatasetError(f"{where}: field 'answer' has no '#### <number>' final line")
        pid = f"gsm8k-{split}-{lineno}"
        problems.append(Problem(pid, row["question"].strip() + suffix, row["answer"], ("gsm8k",)))
        solutions[pid] = row["answer"]
    return problems, solutions


class GSM8KTask:
    name = "gsm8k"
    default_verifier = "gsm8k"
    step_splitter = "lines"  # veriloop.prm.split_steps: one step per non-blank line

    @classmethod
    def verifiers(cls, reasoning: str, verifier: str) -> dict[str, str]:
        """{role: verifier name}, known without loading a row: ``reward`` (what training is rewarded by when no
        verifier is named), ``outcome`` and, where the traces have them, ``format`` and ``process`` (evaluation)."""
        own = verifier or ("gsm8k-pot" if reasoning == "pot" else "gsm8k")
        return {"reward": own, "outcome": own}

    def __init__(
        self,
        data: str = "",
        heldout_data: str = "",
        prompt_suffix: str = DEFAULT_SUFFIX,
        heldout_size: int = 0,
        prompt_style: str = "plain",
        reasoning: str = "cot",
        verifier: str = "",
    ):
        self.prompt_style, self.reasoning = prompt_style, reasoning
        self.default_verifier = self.verifiers(reasoning, verifier)["outcome"]
        self.tool_format = FENCES  # task.reasoning tool: ToRA's ```python / ```output blocks
        # sampling.max_thinking_tokens: the final-answer line budget forcing starts (rollout/thinking.py)
        self.thinking_end = "\n#### " if reasoning == "cot" and prompt_style == "plain" else ""
        suffix = suffix_for(prompt_style, reasoning, plain=prompt_suffix)
        rows, train_solutions = load_gsm8k(data or DATA_DIR / "train.jsonl", "train", suffix)
        # the split hashes the question as the plain style asks it, so every style and format has the same split
        in_validation = [_in_validation(p.prompt.removesuffix(suffix) + DEFAULT_SUFFIX) for p in rows]
        self._validation = [p for p, v in zip(rows, in_validation) if v]
        self.train = [p for p, v in zip(rows, in_validation) if not v]
        self._heldout, test_solutions = load_gsm8k(heldout_data or DATA_DIR / "test.jsonl", "test", suffix)
        if heldout_size:
            self._heldout = self._heldout[:heldout_size]
        self.solutions = {**train_solutions, **test_solutions}

    def train_batch(self, n: int, rng: random.Random) -> list[Problem]:
        return [self.train[rng.randrange(len(self.train))] for _ in range(n)]

    def heldout(self) -> list[Problem]:
        return self._heldout

    def validation(self) -> list[Problem]:
        return self._validation

    def teacher_completion(self, problem: Problem, rng: random.Random) -> str:
        """The dataset's worked solution (SFT data); in the boxed style its ``#### N`` line becomes a box."""
        if self.reasoning in ("pot", "tool"):
            raise DatasetError(
                f"task gsm8k with task.reasoning {self.reasoning}: GSM8K's solutions are text, not "
                "programs or code blocks, so there is nothing to imitate (rollout.source task-teacher); "
                "give demonstrations in that format as a jsonl task's 'completion' fields"
            )
        solution = self.solutions[problem.id]
        if self.prompt_style != "boxed":
            return solution
        body, _, answer = solution.rpartition("####")
        return f"{body.rstrip()}\nThe answer is \\boxed{{{answer.strip()}}}."
