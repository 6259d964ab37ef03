"""Helpers the benchmark scripts share: a run folder's start time and the interval of a seed-mean difference."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path


def run_started(run_dir: Path) -> float | None:
    """When a run folder's run started (epoch seconds, from its env.json), or None when it has none."""
    env = run_dir / "env.json"
    if not env.is_file():
        return None
    return time.mktime(time.strptime(json.loads(env.read_text())["started"][:19], "%Y-%m-%dT%H:%M:%S"))


def t_interval(xs: list[float]) -> list[float] | None:
    """Student-t 95 % interval of the mean of paired per-seed differences (None for one seed)."""
    from scipy.stats import t

    if len(xs) < 2:
        return None
    half = t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return [statistics.fmean(xs) - half, statistics.fmean(xs) + half]
