"""Paired statistics for comparing two methods evaluated on the same examples (or the same seeds).

- ``mcnemar_exact``: McNemar's exact test on per-example correctness (binomial, p = 1/2, on the discordant pairs).
- ``paired_bootstrap``: percentile interval of metric(A) - metric(B), resampling example indices with replacement,
  the same indices for both methods; metric helpers ``accuracy``, ``mse``, ``pearson``, ``spearman`` work on the
  last axis, so one call scores every resample of a chunk (and are the package's one Pearson / Spearman: a
  single pair of 1-D arrays gives a 0-d array, ``float(pearson(p, t))``).
- ``resample_indices`` / ``percentile_interval``: the pieces of any other percentile bootstrap (a statistic of
  resampled sets, e.g. gen-PPL or MAUVE of sample sets, or the difference between two independent sets).
- ``seed_mean_difference`` / ``t_interval``: mean ± std over seeds and the Student-t interval of the mean of the
  paired per-seed differences (scipy's binomial and t distributions).

Pure functions on numpy float64; bad input (unequal lengths, empty input, non-boolean correctness, a level outside
(0, 1)) raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.stats

# An index chunk holds at most this many entries (int64: 16 MiB), so memory stays bounded for any n_boot.
CHUNK_ELEMENTS = 1 << 21

Metric = Callable[[np.ndarray, np.ndarray | None], np.ndarray]


# ---------------------------------------------------------------------------------------------- checks


def _check_level(level: float) -> float:
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    return level


def _as_correct(x: Any, name: str) -> np.ndarray:
    """Per-example correctness as a bool array: bools, or numbers that are all 0 or 1."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf" and bool(np.all((arr == 0) | (arr == 1))):
        return arr.astype(bool)
    raise ValueError(f"{name} must be per-example correctness (booleans, or 0/1), got dtype {arr.dtype}"
                     + (" with values other than 0 and 1" if arr.dtype.kind in "iuf" else ""))


def _as_1d(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per example), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    return arr


def _same_length(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError("paired inputs must have equal lengths, got "
                         + ", ".join(f"{k}={n}" for k, n in lengths.items()))
    return next(iter(lengths.values()))


def _as_finite_float(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


# ---------------------------------------------------------------------------------------------- McNemar


def mcnemar_exact(correct_a: Sequence[bool] | np.ndarray, correct_b: Sequence[bool] | np.ndarray) -> dict[str, Any]:
    """McNemar's exact test: do methods A and B, scored on the same examples, differ in accuracy?

    ``correct_a[i]`` / ``correct_b[i]`` say whether each method got example i right (bools or 0/1). Only the
    discordant pairs inform the test: b = #(A right, B wrong), c = #(A wrong, B right). Under the null each
    discordant pair is equally likely either way, so b ~ Binomial(b + c, 1/2) and the two-sided p-value is
    min(1, 2 P[X <= min(b, c)]) (1 when b + c = 0). Assumes the examples are independent.
    Returns {"n", "b", "c", "p_value"}.
    """
    a = _as_correct(_as_1d(correct_a, "correct_a"), "correct_a")
    bb = _as_correct(_as_1d(correct_b, "correct_b"), "correct_b")
    n = _same_length(correct_a=a, correct_b=bb)
    b = int(np.count_nonzero(a & ~bb))
    c = int(np.count_nonzero(~a & bb))
    m = b + c
    p = 1.0 if m == 0 else min(1.0, 2.0 * float(scipy.stats.binom.cdf(min(b, c), m, 0.5)))
    return {"n": n, "b": b, "c": c, "p_value": p}


# ---------------------------------------------------------------------------------------------- metrics


def accuracy(values: np.ndarray, targets: np.ndarray | None = None) -> np.ndarray:
    """Accuracy along the last axis: the mean of ``values`` as correctness (bools or 0/1) when ``targets`` is
    None, else the fraction of positions where ``values == targets`` (predictions vs labels)."""
    if targets is None:
        correct = _as_correct(values, "correctness")
    else:
        correct = np.asarray(values) == np.asarray(targets)
    return correct.mean(axis=-1, dtype=np.float64)


def mse(values: np.ndarray, targets: np.ndarray | None = None) -> np.ndarray:
    """Mean squared error of predictions ``values`` against ``targets`` along the last axis."""
    if targets is None:
        raise ValueError("mse needs targets")
    return _mse_pair(_as_finite_float(values, "predictions"), None, _as_finite_float(targets, "targets"))[0]


def _mse_pair(xa: np.ndarray, xb: np.ndarray | None, y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`mse` of A (and B) against the same targets, on finite float arrays checked by the caller."""
    def one(x: np.ndarray) -> np.ndarray:
        err = x - y
        return np.mean(err * err, axis=-1)
    return one(xa), None if xb is None else one(xb)


def pearson(values: np.ndarray, targets: np.ndarray | None = None) -> np.ndarray:
    """Pearson correlation of predictions ``values`` with ``targets`` along the last axis; nan where either is
    constant (checked exactly, max == min, so rounding in the mean cannot fake a correlation)."""
    if targets is None:
        raise ValueError("pearson needs targets")
    x, y = np.broadcast_arrays(_as_finite_float(values, "predictions"), _as_finite_float(targets, "targets"))
    return _pearson_pair(x, None, y)[0]


def _pearson_pair(xa: np.ndarray, xb: np.ndarray | None, y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`pearson` of A (and B) with the same targets, on finite float arrays of one shape checked by the
    caller; the targets' side is computed once (a paired bootstrap's resamples share it)."""
    y_constant = y.max(axis=-1) == y.min(axis=-1)
    yc = y - y.mean(axis=-1, keepdims=True)
    yy = np.sum(yc * yc, axis=-1)

    def one(x: np.ndarray) -> np.ndarray:
        constant = (x.max(axis=-1) == x.min(axis=-1)) | y_constant
        xc = x - x.mean(axis=-1, keepdims=True)
        den = np.sqrt(np.sum(xc * xc, axis=-1) * yy)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.sum(xc * yc, axis=-1) / den
        return np.where(constant | ~(den > 0), np.nan, r)
    return one(xa), None if xb is None else one(xb)


def spearman(values: np.ndarray, targets: np.ndarray | None = None) -> np.ndarray:
    """Spearman rank correlation along the last axis: :func:`pearson` of the ranks (ties get their average rank,
    ``scipy.stats.rankdata``); nan where either side is constant."""
    if targets is None:
        raise ValueError("spearman needs targets")
    x, y = np.broadcast_arrays(_as_finite_float(values, "predictions"), _as_finite_float(targets, "targets"))
    return pearson(scipy.stats.rankdata(x, axis=-1), scipy.stats.rankdata(y, axis=-1))


METRICS: dict[str, Metric] = {"accuracy": accuracy, "mse": mse, "pearson": pearson, "spearman": spearman}
# The built-in metrics whose resamples skip the checks their inputs already passed and share the targets' side.
_PAIRED = {"mse": _mse_pair, "pearson": _pearson_pair}


# ---------------------------------------------------------------------------------------------- bootstrap


def paired_bootstrap(metric: str | Metric, a: Sequence[Any] | np.ndarray, b: Sequence[Any] | np.ndarray,
                     targets: Sequence[Any] | np.ndarray | None = None, n_boot: int = 10_000, seed: int = 0,
                     level: float = 0.95, keep_distribution: bool = False) -> dict[str, Any]:
    """Paired bootstrap percentile interval of metric(A) - metric(B) on the same examples.

    ``a`` / ``b``: per-example values of methods A and B (correctness, predicted labels or predicted numbers),
    ``targets``: per-example targets when the metric needs them. ``metric`` is a name in METRICS ("accuracy",
    "mse", "pearson") or a function (values, targets) -> metric along the last axis. Each of ``n_boot`` resamples
    draws n example indices with replacement (numpy Generator seeded with ``seed``; the same indices for A, B
    and the targets) and computes the difference; the interval is the (1 -/+ level) / 2 quantiles (linear
    interpolation) of the differences. Resamples whose difference is not finite (a constant resample for
    Pearson) are dropped and counted. Assumes independent examples; deterministic given the inputs and seed.

    Returns {"metric", "n", "metric_a", "metric_b", "observed" (the difference on all examples), "interval"
    ((low, high); nan when every resample was dropped), "level", "n_boot", "n_dropped", "seed"}, plus
    "distribution" (the n_boot differences, nan where dropped) when ``keep_distribution``.
    """
    level = _check_level(level)
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        name, fn = metric, METRICS[metric]
    elif callable(metric):
        name, fn = getattr(metric, "__name__", "metric"), metric
    else:
        raise TypeError(f"metric must be a name in {sorted(METRICS)} or a function, got {metric!r}")
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot}")
    n_boot = int(n_boot)
    xa, xb = _as_1d(a, "a"), _as_1d(b, "b")
    if targets is None:
        t = None
        n = _same_length(a=xa, b=xb)
    else:
        t = _as_1d(targets, "targets")
        n = _same_length(a=xa, b=xb, targets=t)

    metric_a, metric_b = float(fn(xa, t)), float(fn(xb, t))  # validates the inputs once, on all examples
    diffs = np.empty(n_boot, dtype=np.float64)
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK_ELEMENTS // n)
    pair = _PAIRED.get(name) if fn is METRICS.get(name) and t is not None else None
    if pair is not None:  # checked above; as float64 once (indexing then converting gives the same values)
        xa, xb, t = (np.asarray(v, dtype=np.float64) for v in (xa, xb, t))
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        tt = None if t is None else t[idx]
        if pair is not None:
            ra, rb = pair(xa[idx], xb[idx], tt)
            diffs[start:stop] = ra - rb
        else:
            diffs[start:stop] = np.asarray(fn(xa[idx], tt), dtype=np.float64) - np.asarray(fn(xb[idx], tt),
                                                                                          dtype=np.float64)
    ok = np.isfinite(diffs)
    n_dropped = int(n_boot - np.count_nonzero(ok))
    if n_dropped < n_boot:
        low, high = (float(q) for q in np.quantile(diffs[ok], [(1 - level) / 2, (1 + level) / 2]))
    else:
        low = high = math.nan
    out: dict[str, Any] = {"metric": name, "n": n, "metric_a": metric_a, "metric_b": metric_b,
                           "observed": metric_a - metric_b, "interval": (low, high), "level": level,
                           "n_boot": n_boot, "n_dropped": n_dropped, "seed": seed}
    if keep_distribution:
        out["distribution"] = np.where(ok, diffs, np.nan)
    return out


def resample_indices(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) example indices drawn with replacement: one bootstrap resample per row."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"a bootstrap needs n >= 1 examples and n_boot >= 1 resamples, got {n} and {n_boot}")
    return rng.integers(0, n, size=(n_boot, n))


def percentile_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """The (1 -/+ level) / 2 quantiles (linear interpolation) of the finite ``values`` (bootstrap statistics:
    resamples whose statistic is undefined are nan and left out); None when none is finite."""
    level = _check_level(level)
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    low, high = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
    return (float(low), float(high))


# ---------------------------------------------------------------------------------------------- Student t


def t_interval(xs: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean of ``xs`` (e.g. paired per-seed differences): mean ± t_{(1+level)/2, n-1}
    · std(ddof=1) / sqrt(n); None for one value. Assumes the values are i.i.d. and roughly normal."""
    level = _check_level(level)
    x = _as_finite_float(_as_1d(xs, "xs"), "xs")
    if x.size < 2:
        return None
    mean = float(x.mean())
    half = float(scipy.stats.t.ppf((1 + level) / 2, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean - half, mean + half)


def seed_mean_difference(per_seed_a: Sequence[float] | np.ndarray, per_seed_b: Sequence[float] | np.ndarray,
                         level: float = 0.95) -> dict[str, Any]:
    """Compare two methods over seeds, paired by seed (``per_seed_a[i]`` and ``per_seed_b[i]`` share seed i).

    Returns {"n", "mean_a", "std_a", "mean_b", "std_b", "mean_diff", "std_diff", "diffs" (a - b per seed),
    "interval" (Student-t interval of the mean difference, df = n - 1; None for one seed), "level"}; stds are
    sample stds (ddof=1), None for one seed.
    """
    level = _check_level(level)
    a = _as_finite_float(_as_1d(per_seed_a, "per_seed_a"), "per_seed_a")
    b = _as_finite_float(_as_1d(per_seed_b, "per_seed_b"), "per_seed_b")
    n = _same_length(per_seed_a=a, per_seed_b=b)
    d = a - b

    def std(v: np.ndarray) -> float | None:
        return float(v.std(ddof=1)) if n > 1 else None

    return {"n": n, "mean_a": float(a.mean()), "std_a": std(a), "mean_b": float(b.mean()), "std_b": std(b),
            "mean_diff": float(d.mean()), "std_diff": std(d), "diffs": [float(v) for v in d],
            "interval": t_interval(d, level), "level": level}
