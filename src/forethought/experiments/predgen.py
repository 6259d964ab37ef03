"""What the PredGen specs' tables of measures cannot say (their ``derive``): each seed-paired comparison again on the
same evaluation examples (paired bootstrap 95 % interval; accuracy: McNemar's exact test), PredGen's prediction
against the answer it wrote, what WDAL does to each part (late-training medians from the training log) and the
learning curves.

A comparison of a ``written_*`` measure compares the written answers (the predictions' ``decoded`` field; a
Generator's equals its prediction), any other measure the predictions; accuracy-like predictions (labels) are
compared as a classification, numbers as a regression.
"""

from __future__ import annotations

import math
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


def step_parts(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``predgen speed``'s breakdown of one PredGen step, a row per task and run: ``{"step parts (s, median)":
    {"<task> (<run>)": {part: seconds, ...}}}`` (the profiled parts of the forward, then backward, optimizer and
    the whole step; its examples/s, the batch's longest answer and mean prompt in tokens)."""
    return {"step parts (s, median)": {f"{task} ({run})": parts for run, rec in records.items()
                                       for task, parts in rec["results"].get("predgen_step_parts_s", {}).items()}}


def _binary_entropy(p: float) -> float:
    return 0.0 if p <= 0 or p >= 1 else -p * math.log(p) - (1 - p) * math.log(1 - p)


def mine(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``predgen_mine``'s derive: per run and representation, the held-out MINE bound's mean and std over the
    MINE seeds, each seed's value and the fit half's mean (nats); and per run the floor its accuracy a puts on
    what its answers carry about the label (Fano: I(Y; Ŷ) >= H(Y) - H_b(1 - a) - (1 - a) log(K - 1), K classes
    as the run's eval targets show), for scale beside the estimates."""
    estimates: dict[str, Any] = {}
    floors: dict[str, Any] = {}
    for run, rec in records.items():
        m = rec["mine"]
        for rep, e in m["estimates"].items():
            estimates.setdefault(run, {})[rep] = {"held_out": e["heldout"]["mean"], "std": e["heldout"]["std"],
                                                  "per_seed": e["heldout"]["per_seed"],
                                                  "fit_half": e["fit_half"]["mean"]}
        k = len({p["target"] for p in rec.get("predictions", [])})
        if m.get("H_Y") is not None and k > 1:
            err = 1 - rec["results"]["accuracy"]
            floors[run] = {"accuracy": rec["results"]["accuracy"], "H_Y": m["H_Y"],
                           "floor": m["H_Y"] - _binary_entropy(err) - err * math.log(k - 1)}
    return {"MINE held-out bound (nats) over MINE seeds": estimates, "what the accuracy implies (nats)": floors}


def words(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``predgen_words_sst2``'s derive: per run and written answer, the top words by NPMI (``word npmi
    (examples with this answer / with the word)``) and the words asked for by name (``predgen mine --word_list``)."""
    top: dict[str, Any] = {}
    asked: dict[str, Any] = {}

    def cell(w: dict[str, Any]) -> str:
        score = "undefined" if w["npmi"] is None else f"{w['npmi']:.2f}"
        return f"{score} ({w['with_answer']}/{w['examples']})"

    for run, rec in records.items():
        for answer, v in rec["words"]["word_association"]["per_answer"].items():
            top.setdefault(run, {})[answer] = {"answered": v["answered"],
                                               "words": ", ".join(f"{w['word']} {cell(w)}" for w in v["top"])}
            if v.get("asked"):
                asked.setdefault(run, {})[answer] = {w["word"]: cell(w) for w in v["asked"]}
    return {"top words: NPMI (examples with this answer / with the word)": top,
            "the words asked for": asked}
