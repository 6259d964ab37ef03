"""Two sides' predictions on the same examples, matched by id: the paired per-example comparison (bootstrap
interval of the difference; McNemar's exact test for accuracy; MSE and Pearson for numbers). Rows are dicts with
``id``, ``target`` and the answer keys (PredGen's predictions.jsonl)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.eval.stats import mcnemar_exact, paired_bootstrap


def paired(rows_a: list[dict], rows_b: list[dict], task_type: str = "classification", key_a: str = "prediction",
           key_b: str = "prediction", n_boot: int = 10_000, seed: int = 0,
           who_writes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A vs B on the same examples (matched by id; A's order). Classification: {"difference" (accuracy A − B),
    "ci95", "mcnemar" ({n, b, c, p_value}), "n"}; regression: {"n", "mse": {difference, ci95, a, b},
    "pearson": {...}}. ``key_*`` picks each side's answer ("prediction", or PredGen's "decoded"); ``who_writes`` says,
    per answer key, which runs write it (added to the error when a side lacks it)."""
    by_id = {r["id"]: r for r in rows_b}
    if len(by_id) != len(rows_b) or sorted(by_id) != sorted(r["id"] for r in rows_a):
        raise ForethoughtError("the two sides were evaluated on different examples (their ids differ); "
                               "compare runs of one task, split and --task.max_eval_examples")
    other = [by_id[r["id"]] for r in rows_a]
    for key, rows in ((key_a, rows_a), (key_b, other)):
        if any(key not in r or "target" not in r for r in rows):
            why = f"; {who_writes[key]}" if who_writes and key in who_writes else ""
            raise ForethoughtError(f"a side's predictions have no '{key}' (or no target) in every row{why}")
    if task_type == "classification":
        a = [r[key_a] == r["target"] for r in rows_a]
        b = [r[key_b] == r["target"] for r in other]
        boot = paired_bootstrap("accuracy", a, b, n_boot=n_boot, seed=seed)
        return {"difference": boot["observed"], "ci95": list(boot["interval"]), "mcnemar": mcnemar_exact(a, b),
                "n": len(a)}
    try:
        a = [float(r[key_a]) for r in rows_a]
        b = [float(r[key_b]) for r in other]
        t = [float(r["target"]) for r in rows_a]
    except (TypeError, ValueError):
        raise ForethoughtError("regression predictions and targets must be numbers") from None
    out: dict[str, Any] = {"n": len(a)}
    for metric in ("mse", "pearson"):
        boot = paired_bootstrap(metric, a, b, t, n_boot=n_boot, seed=seed)
        out[metric] = {"difference": boot["observed"], "ci95": list(boot["interval"]), "a": boot["metric_a"],
                       "b": boot["metric_b"]}
    return out


def task_type_of(rows: list[dict]) -> str:
    """"regression" when every target is a number, else "classification" (targets are label names)."""
    numeric = [isinstance(r.get("target"), (int, float)) and not isinstance(r.get("target"), bool) for r in rows]
    return "regression" if rows and all(numeric) else "classification"
