"""What every benchmark shares: seeds from the command line, and mean +- spread over them.

A number that moves with the seed is reported as ``mean +- sd`` (sample standard deviation
over the seeds, n - 1 in the denominator); the JSON output keeps every seed's value.
"""

from __future__ import annotations

import statistics


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds must name distinct seeds, got {text!r}")
    return seeds


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """(mean, sample standard deviation; None for one value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def fmt(values: list[float | None], digits: int = 3) -> str:
    """``0.877 ± 0.012`` over seeds (``0.877`` for one seed, blank when nothing was measured)."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" if sd is None else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def silence_hub_progress() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
