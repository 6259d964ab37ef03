"""Matched-entropy comparison: gen-PPL read off each model's (entropy, gen-PPL) sweep at one target entropy.

Low-entropy (repetitive) samples get low perplexity trivially, so systems are compared at the same unigram
entropy: each model is sampled at several temperatures / top-p values, giving points (entropy, gen-PPL), and
gen-PPL at the target entropy is interpolated linearly in (entropy, log gen-PPL) between the two sweep points
that bracket it. No extrapolation: a sweep that does not reach the target gives None.

Two things keep the interpolation honest: :func:`next_knob_value` densifies a sweep (bisection on one knob, e.g.
the temperature at a fixed top-p) until a point lies within a tolerance of the target, so the interpolation
spans a short distance; and :func:`interpolation_error` estimates what the straight line still gets wrong (the
difference from the quadratic through the three nearest points), which evaluations add to their intervals.
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


def interpolation_error(points: Sequence[tuple[float, float]], target: float) -> float | None:
    """An estimate of the error of :func:`ppl_at_entropy` at ``target``, in log gen-PPL (nats/token): the
    absolute difference between the log-linear interpolant and the quadratic in log gen-PPL through the three
    points nearest the target (the next term of the interpolation, f[e0, e1, e2]·(x − e0)(x − e1), which is small
    when a point lies close to the target). With fewer than three distinct entropies: the distance from the
    interpolant to the nearest point's value (a cruder, larger bound). None when the target is not bracketed."""
    at = ppl_at_entropy(points, target)
    if at is None:
        return None
    pts = sorted({float(e): math.log(float(v)) for e, v in points}.items(), key=lambda p: abs(p[0] - target))
    if len(pts) < 3:
        return abs(pts[0][1] - math.log(at))
    (e0, y0), (e1, y1), (e2, y2) = pts[:3]
    quad = (y0 * (target - e1) * (target - e2) / ((e0 - e1) * (e0 - e2))
            + y1 * (target - e0) * (target - e2) / ((e1 - e0) * (e1 - e2))
            + y2 * (target - e0) * (target - e1) / ((e2 - e0) * (e2 - e1)))  # Lagrange form
    return abs(quad - math.log(at))


def next_knob_value(points: Sequence[tuple[float, float]], target: float, tolerance: float, increasing: bool,
                    low: float, high: float, start: float = 1.0, expand: float = 1.5) -> float | None:
    """The next value of a sweep knob to sample, from (knob value, entropy) points already measured, or None
    when a point lies within ``tolerance`` of ``target`` and the points bracket it (done: the matched value is
    an interpolation, never an extrapolation) or no value in [low, high] can get there.

    - no point yet: ``start``;
    - some adjacent pair (by knob value) brackets the target and no point is within the tolerance: the midpoint
      of the pair nearest to it (bisection: for an entropy monotone in the knob, every step halves the bracket,
      so the tolerance is reached);
    - otherwise every entropy lies on one side (a point within the tolerance or not): step the knob outward by
      the factor ``expand`` (up if the entropy must rise and it rises with the knob, ...), clipped to [low,
      high]; None once the bound is reached. ``increasing`` (the entropy rises with the knob) is the prior for
      the direction; two points or more decide it from the data (the slope between the extreme knob values)."""
    pts = sorted((float(k), float(e)) for k, e in points)
    if not pts:
        return start
    pairs = [(a, b) for a, b in itertools.pairwise(pts) if (a[1] - target) * (b[1] - target) < 0]
    if any(e == target for _, e in pts) or (pairs and any(abs(e - target) <= tolerance for _, e in pts)):
        return None
    if pairs:
        (k0, _), (k1, _) = min(pairs, key=lambda p: min(abs(p[0][1] - target), abs(p[1][1] - target)))
        mid = (k0 + k1) / 2
        return None if mid in (k0, k1) else mid  # floating point exhausted
    if len(pts) >= 2 and pts[-1][1] != pts[0][1]:
        increasing = pts[-1][1] > pts[0][1]
    rise = pts[0][1] < target  # every point lies below the target
    up = rise == increasing
    edge = pts[-1][0] if up else pts[0][0]
    if edge == 0 and not up:
        return None
    nxt = min(high, edge * expand if edge > 0 else expand - 1) if up else max(low, edge / expand)
    return None if nxt == edge else nxt


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


def plot_sweeps(rows: dict[str, dict], path: str | Path, target_entropy: float, judge: str, corpus: str,
                seq_len: int) -> Path:
    """psf eval's figure: :func:`plot_entropy_curves` of every model row's sweep points (entropy, gen-PPL)."""
    curves = {name: [(p["entropy"], p["gen_ppl"]) for p in row["sweep"]] for name, row in rows.items()}
    return plot_entropy_curves(curves, path, target_entropy=target_entropy, judge=judge,
                               title=f"gen-PPL vs unigram entropy, {corpus} L={seq_len}")
