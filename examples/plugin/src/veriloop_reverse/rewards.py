"""A shaped reward in TRL's reward-function form: the share of the reversed word's characters in place."""

from __future__ import annotations


def reverse_overlap(prompts: list[str], completions: list[str], reference: list[str], **_) -> list[float]:
    """Per completion: characters of the first line equal to the reference's at the same position, divided by the
    longer of the two lengths (1.0 only for the exact answer)."""
    scores = []
    for completion, ref in zip(completions, reference, strict=True):
        lines = completion.strip().splitlines()
        answer = lines[0].strip() if lines else ""
        same = sum(a == b for a, b in zip(answer, ref))
        scores.append(same / max(len(answer), len(ref), 1))
    return scores


reverse_overlap.version = "1"  # stamps the verdicts (reverse-overlap@1)
