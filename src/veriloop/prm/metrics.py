"""Ranking quality of step scores: ROC AUC (the Mann-Whitney statistic)."""

from __future__ import annotations


def roc_auc(scores: list[float], labels: list[bool]) -> float:
    """P(score of a random positive > score of a random negative), ties counting 1/2.

    Computed from average ranks: ``(sum of positive ranks - P(P+1)/2) / (P N)``.  Raises when
    either class is empty (the AUC is undefined there, not 0.5).
    """
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        raise ValueError(f"ROC AUC needs both classes; got {pos} positives and {neg} negatives")
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # average rank of a tie block, 1-based
        i = j + 1
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)
