"""What the PredGen specs' tables of measures cannot say (their ``derive``): each seed-paired comparison again on the
same evaluation examples (paired bootstrap 95 % interval; accuracy: McNemar's exact test), PredGen's prediction
against the answer it wrote, what WDAL does to each part (late-training medians from the training log) and the
learning curves.

A comparison of a ``written_*`` measure compares the written answers (the predictions' ``decoded`` field; a
Generator's equals its prediction), any other measure the predictions; accuracy-like predictions (labels) are
compared as a classification, numbers as a regression.
"""

from __future__ import annotations

from typing import Any

from forethought.eval.paired import paired, task_type_of
from forethought.eval.stats import seed_mean_difference
from forethought.experiments.stats import gradient_summary


def compact(p: dict[str, Any]) -> dict[str, Any]:
    """:func:`paired`'s answer without what the measures already hold (each side's metric, the example count)."""
    if "mcnemar" in p:
        m = p["mcnemar"]
        return {"difference": p["difference"], "ci95": p["ci95"], "mcnemar_p": m["p_value"], "b": m["b"],
                "c": m["c"]}
    return {k: {"difference": p[k]["difference"], "ci95": p[k]["ci95"]} for k in ("mse", "pearson")}


def _runs_by_group(collected: dict[str, Any]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for run, r in collected["runs"].items():
        out.setdefault(r["group"], {})[r["seed"]] = run
    return out


def _metric(rows: list[dict[str, Any]]) -> str:
    return "accuracy" if task_type_of(rows) == "classification" else "pearson"


def paired_on_examples(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``{"paired": {comparison: {seed: ...}}, "prediction_vs_written": {group: ...}, "gradients": {run: ...}}``:
    every comparison of the spec per seed on the same examples; for each group whose predictions carry the
    written answer beside a prediction of its own (PredGen), that prediction − the written answer (per seed on
    the examples, and over seeds: the seed-mean difference of the task's metric with its t-interval); WDAL's
    late-training medians of L_W, L_D and each part's gradient norm, for the runs that logged them."""
    groups = _runs_by_group(collected)
    out: dict[str, Any] = {"paired": {}, "prediction_vs_written": {}, "gradients": {}}
    for name, c in collected["comparisons"].items():
        key = "decoded" if c["measure"].startswith("written_") else "prediction"
        seeds = sorted(set(groups.get(c["a"], {})) & set(groups.get(c["b"], {})))
        out["paired"][name] = {
            str(s): compact(paired(records[groups[c["a"]][s]]["predictions"],
                                    records[groups[c["b"]][s]]["predictions"],
                                    task_type_of(records[groups[c["a"]][s]]["predictions"]), key, key))
            for s in seeds}
    for group, runs in groups.items():
        rows = {s: records[run]["predictions"] for s, run in sorted(runs.items())}
        first = next(iter(rows.values()))
        if records[runs[min(runs)]]["results"].get("method") != "predgen" or "decoded" not in first[0]:
            continue
        metric = _metric(first)
        results = [records[runs[s]]["results"] for s in rows]
        over = seed_mean_difference([r[metric] for r in results], [r["decoded"][metric] for r in results])
        out["prediction_vs_written"][group] = {
            "metric": metric, "seed_mean_difference": over["mean_diff"],
            "ci95_of_seed_mean": None if over["interval"] is None else list(over["interval"]),
            "per_seed": {str(s): compact(paired(r, r, task_type_of(r), "prediction", "decoded"))
                         for s, r in rows.items()}}
    for run, rec in records.items():
        g = gradient_summary(rec.get("train_log", []))
        if g is not None:
            out["gradients"][run] = g
    return out


def curves(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """:func:`paired_on_examples`, and each run's learning curve (accuracy, and PredGen's written answer's, at
    every evaluation: ``{run: [{examples_seen, accuracy[, decoded_accuracy]}]}``)."""
    out = paired_on_examples(records, collected)
    out["curves"] = {run: [{k: c[k] for k in ("examples_seen", "accuracy", "decoded_accuracy") if k in c}
                           for c in rec["results"].get("learning_curve", [])]
                     for run, rec in records.items()}
    return out
