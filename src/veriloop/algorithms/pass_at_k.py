"""pass@k with the unbiased estimator (Chen et al. 2021).

From n samples of which c are correct, the probability that a random subset of k
contains at least one correct one:

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form avoids huge binomials.  Using only the first k samples
(``1 - (1-p)^k`` with p = c/n) is biased; this is not.
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod
