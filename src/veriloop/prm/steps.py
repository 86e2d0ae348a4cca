"""Splitting a completion into steps, and the token at which each step ends.

A process reward model scores a solution at the end of each step; a process-supervised
advantage credits each token with the rewards of the steps ending at or after it.  Both need
the same two things: where the steps are (character spans) and which completion token closes
each one.  Splitters are chosen by name:

* ``semicolon``: the arithmetic task's traces, ``2+3=5;5*4=20;answer=20`` -> three steps;
* ``lines``: GSM8K-style solutions, one step per non-blank line.

A step's span excludes its separator; the separator belongs to no step, so the token that
closes a step is the one holding the step's last character.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from veriloop.errors import UnknownNameError


@dataclass(frozen=True)
class Step:
    text: str
    start: int  # character offsets in the completion: text == completion[start:end]
    end: int


def _spans(text: str, pattern: str) -> list[Step]:
    out, pos = [], 0
    for piece in re.split(pattern, text):
        start = text.index(piece, pos) if piece else pos
        stripped = piece.strip()
        if stripped:
            s = start + piece.index(stripped)
            out.append(Step(stripped, s, s + len(stripped)))
        pos = start + len(piece)
    return out


SPLITTERS: dict[str, Callable[[str], list[Step]]] = {
    "semicolon": lambda text: _spans(text, r";"),
    "lines": lambda text: _spans(text, r"\n"),
}


SEPARATORS = {"semicolon": ";", "lines": "\n"}  # what a step-by-step generator stops at


def split_steps(text: str, splitter: str = "semicolon") -> list[Step]:
    if splitter not in SPLITTERS:
        raise UnknownNameError(f"unknown step splitter {splitter!r}; known: {sorted(SPLITTERS)}")
    return SPLITTERS[splitter](text)


def _offsets(tokenizer, completion: str) -> list[tuple[int, int]]:
    return tokenizer(completion, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


def _token_at(offsets: list[tuple[int, int]], char: int) -> int | None:
    """Index of the token whose character span holds ``char`` (None if no token does)."""
    return next((i for i, (a, b) in enumerate(offsets) if a <= char < b), None)


def _read_char(step: Step, completion: str) -> int:
    """The separator right after the step, or the step's last character where none follows."""
    return step.end if step.end < len(completion) else step.end - 1


def step_end_positions(tokenizer, completion: str, steps: list[Step]) -> list[int]:
    """Index (in ``tokenizer(completion)`` without special tokens) of the token holding each step's
    last character.  Needs a fast tokenizer (character offsets)."""
    offsets, out = _offsets(tokenizer, completion), []
    for step in steps:
        hit = _token_at(offsets, step.end - 1)
        if hit is None:
            raise ValueError(f"no token covers character {step.end - 1} of the completion (step {step.text!r})")
        out.append(hit)
    return out


def step_read_positions(tokenizer, completion: str, steps: list[Step]) -> list[int]:
    """Where a PRM reads each step's score, and where a process advantage credits it: the token
    holding the separator that closes the step (``;`` or the newline), which has seen the whole
    step; the step's own last token where no separator follows (the final step).

    Reading at the last digit instead would score ``answer=2`` before the ``0`` of ``answer=20``.
    """
    offsets, out = _offsets(tokenizer, completion), []
    for step in steps:
        hit = _token_at(offsets, _read_char(step, completion))
        if hit is None:  # a tokenizer that drops the separator: fall back to the step's last character
            hit = _token_at(offsets, step.end - 1)
        if hit is None:
            raise ValueError(f"no token covers the end of step {step.text!r} in the completion")
        out.append(hit)
    return out


def positions_in_ids(tokenizer, ids: list[int], completion: str, steps: list[Step]) -> list[int]:
    """``step_read_positions`` as indices into ``ids``, the tokens that were actually sampled.

    When re-tokenizing the text gives back the sampled tokens (always for the character
    tokenizer), the positions carry over; otherwise each token's end is found by decoding
    growing prefixes of ``ids``.
    """
    body = tokenizer(completion, add_special_tokens=False)["input_ids"]
    if list(ids[: len(body)]) == body:
        return step_read_positions(tokenizer, completion, steps)
    ends = [len(tokenizer.decode(ids[: i + 1], skip_special_tokens=False)) for i in range(len(ids))]
    return [next((i for i, e in enumerate(ends) if e > _read_char(step, completion)), len(ids) - 1) for step in steps]
