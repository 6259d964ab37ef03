"""Statistics over seeds, in the shape the benchmarks' JSON keeps: ``{"seeds", "per_seed", "mean", "std",
"ci95_of_mean"}``. The arithmetic (sample std, Student-t interval) is :mod:`forethought.eval.stats`'s."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from forethought.eval.stats import seed_mean_difference, t_interval


def _interval(values: list[float]) -> list[float] | None:
    ci = t_interval(values) if len(values) > 1 else None
    return None if ci is None else [ci[0], ci[1]]


def by_seed(records: Mapping[str, Any], name: str, value: Callable[[Any], float]) -> dict[int, float]:
    """``{seed: value(record)}`` for the records named ``<name>-s<seed>`` (the names
    :func:`forethought.experiments.jobs.seed_jobs` gives), e.g. ``by_seed(runs, "sst2-predgen", lambda r:
    r["results"]["accuracy"])``; other names are ignored."""
    pattern = re.compile(re.escape(name) + r"-s(\d+)")
    out = {}
    for key, record in records.items():
        m = pattern.fullmatch(key)
        if m:
            out[int(m.group(1))] = float(value(record))
    return out


def over_seeds(values: Mapping[int, float]) -> dict[str, Any]:
    """One quantity measured on several seeds (``{seed: value}``): the seeds in order, the values, their mean,
    sample std (ddof=1; None for one seed) and the 95 % Student-t interval of the mean (None for one seed)."""
    if not values:
        raise ValueError("over_seeds needs at least one seed")
    seeds = sorted(values)
    xs = [float(values[s]) for s in seeds]
    return {"seeds": seeds, "per_seed": xs, "mean": statistics.fmean(xs),
            "std": statistics.stdev(xs) if len(xs) > 1 else None, "ci95_of_mean": _interval(xs)}


def seed_paired(a: Mapping[int, float], b: Mapping[int, float]) -> dict[str, Any]:
    """A − B paired by seed (``{seed: value}`` each; only the seeds both have count, e.g. while a benchmark is
    unfinished): :func:`over_seeds` of the per-seed differences. Pairing removes what a seed shares between
    the two (its data order, its initialisation), so the interval is that of the difference itself."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(f"no seed in common (A has {sorted(a)}, B has {sorted(b)})")
    d = seed_mean_difference([a[s] for s in seeds], [b[s] for s in seeds])
    return {"seeds": seeds, "per_seed": d["diffs"], "mean": d["mean_diff"], "std": d["std_diff"],
            "ci95_of_mean": None if d["interval"] is None else list(d["interval"])}


def gradient_summary(log: list[dict[str, Any]]) -> dict[str, float] | None:
    """Medians over the logged steps of the second half of training: each logged loss part (l_w, l_d) and group
    gradient norm (grad_norm_writer, grad_norm_head, before clipping), and the head / writer norm ratio; None
    when the log has no gradient norms (a run archived before they were kept)."""
    last = max((r["step"] for r in log), default=0)
    late = [r for r in log if r["step"] > last / 2 and "grad_norm_writer" in r]
    if not late:
        return None
    keys = [k for k in ("l_w", "l_d", "grad_norm_writer", "grad_norm_head") if all(k in r for r in late)]
    out: dict[str, float] = {k: statistics.median(r[k] for r in late) for k in keys}
    if "grad_norm_head" in keys:
        out["head_over_writer"] = statistics.median(r["grad_norm_head"] / r["grad_norm_writer"] for r in late
                                                    if r["grad_norm_writer"] > 0)
    out["logged_steps"] = len(late)
    return out
