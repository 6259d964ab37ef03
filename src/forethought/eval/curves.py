"""Matched-entropy comparison: gen-PPL read off each model's (entropy, gen-PPL) sweep at one target entropy.

Low-entropy (repetitive) samples get low perplexity trivially, so systems are compared at the same unigram
entropy: each model is sampled at several temperatures / top-p values, giving points (entropy, gen-PPL), and
gen-PPL at the target entropy is interpolated linearly in (entropy, log gen-PPL) between the two sweep points
that bracket it. No extrapolation: a sweep that does not reach the target gives None.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from forethought.core.errors import ForethoughtError
from forethought.core.plots import pyplot, save_figure


def ppl_at_entropy(points: Sequence[tuple[float, float]], target: float) -> float | None:
    """Gen-PPL at ``target`` entropy from sweep points (entropy, gen_ppl), interpolated in log space, or None
    when not bracketed (:func:`value_at_entropy`)."""
    if any(p <= 0 or not math.isfinite(p) for _, p in points):
        raise ForethoughtError("gen-PPL values must be positive and finite to interpolate in log space")
    return value_at_entropy(points, target, log=True)


def value_at_entropy(points: Sequence[tuple[float, float]], target: float, log: bool = False) -> float | None:
    """A measure at ``target`` entropy from sweep points (entropy, value), linear in entropy (``log``: in the
    value's log), or None when not bracketed.

    Points are sorted by entropy; the first adjacent pair (lowest entropies first) with e_i <= target <= e_j is
    used, so a non-monotone sweep takes its lowest-entropy crossing.
    """
    pts = sorted((float(e), float(v)) for e, v in points)
    for e, v in pts:
        if e == target:
            return v
    for (e0, v0), (e1, v1) in itertools.pairwise(pts):
        if e0 < target < e1:
            w = (target - e0) / (e1 - e0)
            return math.exp((1 - w) * math.log(v0) + w * math.log(v1)) if log else (1 - w) * v0 + w * v1
    return None


def plot_entropy_curves(curves: dict[str, Sequence[tuple[float, float]]], path: str | Path,
                        target_entropy: float | None = None, title: str = "gen-PPL vs unigram entropy",
                        judge: str = "") -> Path:
    """PNG: one line per model through its sweep points (x = unigram entropy, y = gen-PPL, log scale), with
    the target entropy as a dashed vertical line and each model's interpolated value marked on it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, pts in curves.items():
        pts = sorted((float(e), float(p)) for e, p in pts)
        line, = ax.plot([e for e, _ in pts], [p for _, p in pts], marker="o", label=name)
        if target_entropy is not None:
            at = ppl_at_entropy(pts, target_entropy) if pts else None
            if at is not None:
                ax.plot([target_entropy], [at], marker="*", markersize=12, color=line.get_color())
    if target_entropy is not None:
        ax.axvline(target_entropy, linestyle="--", color="grey", label=f"target entropy {target_entropy:.2f}")
    ax.set_yscale("log")
    ax.set(title=title, xlabel="unigram entropy (nats)", ylabel=f"gen-PPL{f' ({judge})' if judge else ''}")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)
