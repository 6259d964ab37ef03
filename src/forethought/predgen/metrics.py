"""Task metrics: accuracy and macro-F1 for classes; MSE, MAE, Pearson and Spearman for numbers; mean ± std
over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from forethought.eval.stats import pearson, spearman


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], n_classes: int) -> dict[str, float]:
    """Accuracy and macro-F1 (the F1 of every class that occurs in either list, averaged)."""
    t, p = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    if t.size == 0:
        return {"accuracy": math.nan, "macro_f1": math.nan}
    f1s = []
    for c in range(n_classes):
        tp = int(((p == c) & (t == c)).sum())
        fp = int(((p == c) & (t != c)).sum())
        fn = int(((p != c) & (t == c)).sum())
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return {"accuracy": float((t == p).mean()), "macro_f1": float(np.mean(f1s)) if f1s else math.nan}


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, float]:
    t, p = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    if t.size == 0:
        return {"mse": math.nan, "mae": math.nan, "pearson": math.nan, "spearman": math.nan}
    err = p - t
    # eval.stats refuses non-finite values (ValueError); a diverged run's nan/inf predictions get nan correlations
    finite = bool(np.isfinite(p).all() and np.isfinite(t).all())
    return {"mse": float((err**2).mean()), "mae": float(np.abs(err).mean()),
            "pearson": float(pearson(p, t)) if finite else math.nan,
            "spearman": float(spearman(p, t)) if finite else math.nan}


def mean_std(values: Sequence[float]) -> dict[str, float | list[float]]:
    """Mean, sample std (ddof=1; 0 for one value) and the values themselves."""
    v = np.asarray(values, dtype=float)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "per_seed": [float(x) for x in v]}
