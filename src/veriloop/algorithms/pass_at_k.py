"""pass@k with the unbiased estimator (Chen et al. 2021).

From n samples of which c are correct, the probability that a random subset of k
contains at least one correct one:

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form avoids huge binomials.  Using only the first k samples
(``1 - (1-p)^k`` with p = c/n) is biased; this is not.
"""

from __future__ import annotations

import random
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def maj_at_k(answers, correct, k: int, *, max_exact: int = 200_000, samples: int = 20_000, seed: int = 0) -> float:
    """maj@k: the expected accuracy of a majority vote over ``k`` of the ``n`` samples.

    The k voters are a uniformly random subset of the n samples (without replacement, all
    C(n, k) subsets equally likely), not the first k.  ``answers[i]`` is sample i's answer as an
    equivalence-class key (``None``: no answer, which does not vote); ``correct[i]`` says whether
    it is right (the same for every sample of a class).  Ties are broken uniformly at random among
    the tied answers; a subset in which nobody votes scores 0.

    Computed exactly by enumerating count vectors (how many of each class are drawn, weighted by
    prod C(s_j, x_j) / C(n, k)) when there are at most ``max_exact`` of them, otherwise estimated
    from ``samples`` seeded random subsets.
    """
    n = len(answers)
    if len(correct) != n or not 1 <= k <= n:
        raise ValueError(f"maj_at_k needs len(correct) == len(answers) = n and 1 <= k <= n, got n={n}, k={k}")
    classes = _answer_classes(answers, correct)
    sizes = [s for s, _ in classes.values()]
    rights = [r for _, r in classes.values()]
    abstain = n - sum(sizes)
    if _count_vectors(sizes + [abstain], k, max_exact) <= max_exact:
        return _exact_majority(sizes, rights, abstain, k)
    index = {a: j for j, a in enumerate(classes)}
    return _sampled_majority([index[a] if a is not None else -1 for a in answers], rights, k, samples, seed)


def _answer_classes(answers, correct) -> dict:
    """answer -> (samples giving it, whether it is right); no answer (None) is no class."""
    classes: dict = {}
    for a, c in zip(answers, correct):
        if a is None:
            continue
        size, right = classes.get(a, (0, bool(c)))
        if right != bool(c):
            raise ValueError(f"answer {a!r} is marked both correct and incorrect")
        classes[a] = (size + 1, right)
    return classes


def _count_vectors(groups: list[int], k: int, cap: int) -> int:
    """How many count vectors (x_1..x_m) with x_j <= groups[j] sum to k: a DP, counts capped at cap + 1."""
    ways = [1] + [0] * k
    for s in groups:  # only "too many or not" matters
        ways = [min(sum(ways[t - x] for x in range(0, min(s, t) + 1)), cap + 1) for t in range(k + 1)]
    return ways[k]


def _vote(counts, rights) -> float:
    """Accuracy of the majority of ``counts`` votes per class, ties broken uniformly; 0 if nobody votes."""
    top = max(counts, default=0)
    if top == 0:
        return 0.0
    tied = [r for x, r in zip(counts, rights) if x == top]
    return sum(tied) / len(tied)


def _exact_majority(sizes: list[int], rights: list[bool], abstain: int, k: int) -> float:
    total, out = comb(sum(sizes) + abstain, k), 0.0

    def walk(j: int, left: int, weight: int, counts: list[int]) -> None:
        nonlocal out
        if j == len(sizes):
            if left <= abstain:
                out += weight * comb(abstain, left) * _vote(counts, rights)
            return
        for x in range(0, min(sizes[j], left) + 1):
            walk(j + 1, left - x, weight * comb(sizes[j], x), counts + [x])

    walk(0, k, 1, [])
    return out / total


def _sampled_majority(labels: list[int], rights: list[bool], k: int, samples: int, seed: int) -> float:
    """Monte-Carlo maj@k over ``samples`` seeded subsets; ``labels[i]``: sample i's class, -1 for no answer."""
    rng, acc = random.Random(seed), 0.0
    for _ in range(samples):
        counts = [0] * len(rights)
        for i in rng.sample(range(len(labels)), k):
            if labels[i] >= 0:
                counts[labels[i]] += 1
        acc += _vote(counts, rights)
    return acc / samples
