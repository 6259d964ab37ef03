"""PredGen on multiple choice (and STS-B), over seeds: each variant's answers summarised (:func:`method_summary`),
variants compared seed by seed (:func:`compare`), the MC default picked on the validation split
(:func:`select_on_validation`), one task's entry from its finished runs (:func:`task_entry`).

A run's ``results`` hold its prediction's metric at the top level (PredGen: the adapter's) and its other answers
under keys (``decoded``, ``rank``, ``rank_norm``, ``expected_value``, ``validation``); a comparison names an answer
as ``"variant"`` (its prediction) or ``"variant:key"``. Pure functions of the runs' JSON; the per-example paired
test is passed in (``pair(rows_a, rows_b, task_type, key_a=, key_b=)``: PredGen's ``compare.paired``), so this
package imports no system.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from forethought.eval.stats import seed_mean_difference

ANSWERS = ("decoded", "rank", "rank_norm", "expected_value", "validation")
Pair = Callable[..., dict[str, Any]]


def metric_of(results: Mapping[str, Any], key: str, metric: str) -> float | None:
    """A run's ``metric`` for one of its answers (``key`` '' = its prediction); None when it has no such answer."""
    if not key:
        return results.get(metric)
    sub = results.get(key)
    return sub.get(metric) if isinstance(sub, Mapping) else None


def method_summary(per_seed: Mapping[int, Mapping[str, Any]], metric: str,
                   answers: Sequence[str] = ANSWERS) -> dict[str, Any]:
    """One variant over seeds: per answer (``prediction`` and each of ``answers`` the runs have) its mean, sample
    std (None for one seed) and per-seed values; the mean training wall time."""
    m: dict[str, Any] = {"per_seed": {}}
    for key in ("", *answers):
        vals = {s: metric_of(r, key, metric) for s, r in per_seed.items()}
        vals = {s: x for s, x in vals.items() if x is not None}
        if not vals:
            continue
        name = key or "prediction"
        m[name] = statistics.fmean(vals.values())
        m[f"{name}_std"] = statistics.stdev(vals.values()) if len(vals) > 1 else None
        for s, x in vals.items():
            m["per_seed"].setdefault(str(s), {})[name] = x
    m["train_wall_s"] = statistics.fmean(r.get("train_wall_s", 0.0) for r in per_seed.values())
    return m


def compare(a: str, b: str, results: Mapping[str, Mapping[int, Mapping[str, Any]]],
            preds: Mapping[str, Mapping[int, list[dict]]], metric: str, pair: Pair) -> dict[str, Any] | None:
    """Answer ``a`` minus answer ``b`` on the seeds both have: per seed the paired per-example test, over seeds
    the mean difference and the Student-t 95 % interval of the seed mean (None for one seed). None when they
    share no seed."""
    (va, _, ka), (vb, _, kb) = a.partition(":"), b.partition(":")
    common = [s for s in sorted(set(preds.get(va, {})) & set(preds.get(vb, {})))
              if metric_of(results[va][s], ka, metric) is not None
              and metric_of(results[vb][s], kb, metric) is not None]
    if not common:
        return None
    task_type = "classification" if metric == "accuracy" else "regression"
    rows = {str(s): pair(preds[va][s], preds[vb][s], task_type, key_a=ka or "prediction",
                         key_b=kb or "prediction") for s in common}
    over = seed_mean_difference([metric_of(results[va][s], ka, metric) for s in common],
                                [metric_of(results[vb][s], kb, metric) for s in common])
    return {"per_seed": rows, "seeds": common, "metric": metric, "seed_mean_difference": over["mean_diff"],
            "ci95_of_seed_mean": None if over["interval"] is None else list(over["interval"]),
            "per_seed_difference": over["diffs"]}


def select_on_validation(methods: Mapping[str, Mapping[str, Any]], candidates: Sequence[str],
                         higher_is_better: bool = True) -> dict[str, Any] | None:
    """The candidate with the best mean validation score over the seeds *every* candidate that ran has (so no
    candidate wins on a lucky extra seed): {"selected", "seeds", "validation": candidate -> mean}; None when no
    candidate ran or they share no validated seed."""
    val = {v: {s: r.get("validation") for s, r in methods[v]["per_seed"].items()}
           for v in candidates if v in methods}
    if not val:
        return None
    seeds = set.intersection(*({s for s, x in d.items() if x is not None} for d in val.values()))
    if not seeds:
        return None
    means = {v: statistics.fmean(d[s] for s in seeds) for v, d in val.items()}
    pick = max(means, key=means.get) if higher_is_better else min(means, key=means.get)
    return {"selected": pick, "seeds": sorted(seeds, key=int), "validation": means}


def task_entry(records: Mapping[str, Mapping[int, Mapping[str, Any]]], metric: str,
               pairs: Sequence[tuple[str, str]], candidates: Sequence[str], pair: Pair,
               **extra: Any) -> dict[str, Any]:
    """One task's block: ``records[variant][seed]`` = a finished run's archive record (``results`` and
    ``predictions``) -> each variant's summary, every comparison in ``pairs`` that has a common seed (key
    ``a_minus_b`` with ':' as '_'), and the validation pick among ``candidates``."""
    results = {v: {s: r["results"] for s, r in per.items()} for v, per in records.items() if per}
    preds = {v: {s: r["predictions"] for s, r in per.items()} for v, per in records.items() if per}
    entry: dict[str, Any] = {"metric": metric, **extra,
                             "methods": {v: method_summary(per, metric) for v, per in results.items()},
                             "paired": {}}
    for a, b in pairs:
        row = compare(a, b, results, preds, metric, pair)
        if row is not None:
            entry["paired"][f"{a.replace(':', '_')}_minus_{b.replace(':', '_')}"] = row
    pick = select_on_validation(entry["methods"], candidates, higher_is_better=metric == "accuracy")
    if pick is not None:
        entry["selected_on_validation"] = pick["selected"]
        entry["selection"] = {"seeds": pick["seeds"], "validation": pick["validation"]}
    return entry
