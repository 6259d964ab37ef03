"""PredGen on multiple choice (and STS-B), over seeds: the ``predgen_mc`` spec's derive (:func:`mc`). Each
variant's answers summarised (:func:`method_summary`), answers compared seed by seed (:func:`compare`), the MC
default picked on the validation split (:func:`select_on_validation`).

A run's ``results`` hold its prediction's metric at the top level (PredGen: the adapter's) and its other answers
under keys (``decoded``, ``rank``, ``rank_norm``, ``expected_value``, ``validation``); a comparison names an answer
as ``"variant"`` (its prediction) or ``"variant:key"``, so it can set one run's prediction against another run's
rank decoder, which a spec's comparisons (one measure on both sides) cannot. Pure functions of the runs' JSON; the
per-example paired test is a parameter of :func:`compare` (:func:`forethought.eval.paired.paired` in :func:`mc`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from forethought.eval.paired import paired
from forethought.eval.stats import seed_mean_difference
from forethought.experiments.predgen import compact

ANSWERS = ("decoded", "rank", "rank_norm", "expected_value", "validation")
Pair = Callable[..., dict[str, Any]]

TASKS = {"arc-easy": "accuracy", "arc-challenge": "accuracy", "stsb": "mse"}  # a spec group is <task>-<variant>
# PredGen's adapters with the task's prompt (which lists the choices), and with lm-eval-harness's prompt
ADAPTERS = ("predgen", "predgen-choices", "predgen-choices-a1", "predgen-logits", "predgen-name", "predgen-choices-ll")
LMEVAL_ADAPTERS = ("predgen-choices-lmeval", "predgen-choices-ll-lmeval")
SELECT = (*ADAPTERS, *LMEVAL_ADAPTERS)  # the MC default (adapter and prompt) is picked among these on validation
# (A, B): answer A − answer B on each seed both ran; "variant" = its prediction, "variant:key" another answer
COMPARE = (
    *((a, f"{a}:decoded") for a in ADAPTERS), *((a, "generator") for a in ADAPTERS),
    *((a, "generator:rank") for a in ADAPTERS), *((a, "base-lmeval:rank") for a in ADAPTERS),
    ("predgen-choices", "predgen"), ("predgen-choices-a1", "predgen-choices"), ("predgen-logits", "predgen"),
    ("predgen-name", "predgen"), ("generator:rank", "generator"), ("generator", "base-lmeval:rank"),
    ("generator:rank", "base-lmeval:rank"), ("predictor", "base-lmeval:rank"), ("generator-name", "generator"),
    ("predgen-choices-lmeval", "predgen-choices"), ("generator-lmeval", "generator"),
    ("predgen-choices-lmeval", "generator-lmeval"), ("predgen-choices-lmeval", "generator-lmeval:rank"),
    ("predgen-choices-lmeval", "base-lmeval:rank"), ("predgen-choices-lmeval", "predgen-choices-lmeval:decoded"),
    ("predgen-choices-ll-lmeval", "predgen-choices-lmeval"), ("predgen-choices-ll-lmeval", "generator-lmeval"),
    ("predgen-choices-ll-lmeval", "generator-lmeval:rank"), ("predgen-choices-ll-lmeval", "base-lmeval:rank"),
    ("predgen-choices-ll-lmeval", "predgen-choices-ll-lmeval:decoded"),
    ("predgen-expected", "predgen-expected:expected_value"),
)


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


def side(answer: str) -> str:
    """'generator:rank' -> 'generator (rank)': how a comparison's side is named in the results."""
    variant, _, key = answer.partition(":")
    return f"{variant} ({key.replace('_', ' ')})" if key else variant


def mc(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """The predgen_mc spec's derive. ``comparisons``: every pair of :data:`COMPARE` that has a common seed, per task
    (``"<task>: A − B"``: the seed-mean difference of the task's metric, its Student-t 95 % interval (None for one
    seed), the seeds and the per-seed differences); ``per_example``: the same pairs per seed on the same evaluation
    examples (paired bootstrap 95 % interval; accuracy: McNemar's p and the discordant counts b / c; STS-B: MSE and
    Pearson); ``selection``: per MC task the :data:`SELECT` variant with the best mean validation score over the
    seeds every candidate that ran has (the eval split is never used to choose)."""
    by_task: dict[str, dict[str, dict[int, Mapping[str, Any]]]] = {}
    for run, r in collected["runs"].items():
        task = next(t for t in TASKS if r["group"].startswith(f"{t}-"))
        by_task.setdefault(task, {}).setdefault(r["group"][len(task) + 1:], {})[r["seed"]] = records[run]
    out: dict[str, Any] = {"comparisons": {}, "per_example": {}, "selection": {}}
    for task, recs in by_task.items():
        metric = TASKS[task]
        results = {v: {s: r["results"] for s, r in per.items()} for v, per in recs.items()}
        preds = {v: {s: r["predictions"] for s, r in per.items()} for v, per in recs.items()}
        for a, b in COMPARE:
            row = compare(a, b, results, preds, metric, paired)
            if row is None:
                continue
            name = f"{task}: {side(a)} − {side(b)}"
            out["comparisons"][name] = {"seeds": row["seeds"], "difference": row["seed_mean_difference"],
                                        "ci95": row["ci95_of_seed_mean"], "per_seed": row["per_seed_difference"]}
            out["per_example"][name] = {s: compact(p) for s, p in row["per_seed"].items()}
        methods = {v: method_summary(per, metric) for v, per in results.items()}
        pick = select_on_validation(methods, SELECT, higher_is_better=metric == "accuracy")
        if pick is not None:
            out["selection"][task] = pick
    return out
