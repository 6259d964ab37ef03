"""PredGen on multiple choice (and STS-B), over seeds: the ``predgen_mc`` spec's derive (:func:`mc`). Each
variant's answers summarised (:func:`method_summary`), answers compared seed by seed (:func:`compare`), each
run's agreement with its own other answers and its difference from the Generator's rank decoder
(:func:`agreement_rows`), and choices made on the validation split only (:func:`select_on_validation`): which
PredGen adapter, which prompt.

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
# the likelihood variant (choice states + the choices' log-likelihoods): it reads what the rank decoder reads, so
# it is an ablation, not PredGen's T(Z), and never a candidate for PredGen's adapter
LIKELIHOOD = ("predgen-choices-ll", "predgen-choices-ll-lmeval")
SELECT = tuple(v for v in (*ADAPTERS, *LMEVAL_ADAPTERS) if v not in LIKELIHOOD)  # PredGen's T(Z) forms
# the same model with the task's prompt (choices listed) and with lm-eval-harness's: the prompt chosen on validation
PROMPTS = {"base": ("base", "base-lmeval"), "generator": ("generator", "generator-lmeval"),
           "predgen-choices": ("predgen-choices", "predgen-choices-lmeval"),
           "predgen-choices-ll": ("predgen-choices-ll", "predgen-choices-ll-lmeval")}
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
    ("predgen-name", "generator-name:rank"), ("predgen-expected", "predgen-expected:expected_value"),
)


def role(variant: str) -> str:
    """What a variant's prediction is, as the results name it."""
    if variant in LIKELIHOOD:
        return "likelihood variant (reads what rank reads; not PredGen)"
    if variant.startswith("predgen"):
        return "PredGen T(Z)"
    return variant.split("-")[0]


def bar(variant: str) -> str:
    """The Generator's rank decoder with the variant's prompt and answer format: the bar its prediction must clear."""
    suffix = next((s for s in ("-lmeval", "-name") if variant.endswith(s)), "")
    return f"generator{suffix}"


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
    candidate wins on a lucky extra seed): {"selected", "seeds", "validation": candidate -> mean}; None when fewer
    than two candidates ran on a common validated seed (one candidate is not a choice)."""
    val = {v: {s: r.get("validation") for s, r in methods[v]["per_seed"].items()}
           for v in candidates if v in methods}
    if len(val) < 2:
        return None
    seeds = set.intersection(*({s for s, x in d.items() if x is not None} for d in val.values()))
    if not seeds:
        return None
    means = {v: statistics.fmean(d[s] for s in seeds) for v, d in val.items()}
    pick = max(means, key=means.get) if higher_is_better else min(means, key=means.get)
    return {"selected": pick, "seeds": sorted(seeds, key=int), "validation": means}


def same_answer(rows: Sequence[Mapping[str, Any]], a: str, b: str) -> float | None:
    """How often two answers of one run's predictions are the same (None when a row lacks one)."""
    if not rows or any(a not in r or b not in r for r in rows):
        return None
    return sum(r[a] == r[b] for r in rows) / len(rows)


def agreement_rows(results: Mapping[str, Mapping[int, Mapping[str, Any]]],
                   preds: Mapping[str, Mapping[int, list[dict]]], metric: str) -> dict[str, Any]:
    """Per variant and seed: what its prediction is (``role``), its ``metric``, how often it is the same answer as
    its own rank decoder (``agrees_rank``) and as its own written answer (``agrees_written``; PredGen's adapters),
    and ``minus_generator_rank``: its metric minus the rank decoder's of the Generator with the same prompt and
    answer format on that seed (the bar an adapter must clear to add something)."""
    out: dict[str, Any] = {}
    for variant, per in results.items():
        gen = results.get(bar(variant), {})
        for seed, r in sorted(per.items()):
            row: dict[str, Any] = {"role": role(variant), metric: r.get(metric)}
            rows = preds.get(variant, {}).get(seed, [])
            row["agrees_rank"] = same_answer(rows, "prediction", "rank")
            if variant.startswith("predgen"):
                row["agrees_written"] = same_answer(rows, "prediction", "decoded")
            g = metric_of(gen[seed], "rank", metric) if seed in gen else None
            row["minus_generator_rank"] = None if g is None or r.get(metric) is None else r[metric] - g
            out.setdefault(variant, {})[str(seed)] = row
    return out


def side(answer: str) -> str:
    """'generator:rank' -> 'generator (rank)': how a comparison's side is named in the results."""
    variant, _, key = answer.partition(":")
    return f"{variant} ({key.replace('_', ' ')})" if key else variant


def mc(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """The predgen_mc spec's derive. ``comparisons``: every pair of :data:`COMPARE` that has a common seed, per task
    (``"<task>: A − B"``: the seed-mean difference of the task's metric, its Student-t 95 % interval (None for one
    seed), the seeds and the per-seed differences); ``per_example``: the same pairs per seed on the same evaluation
    examples (paired bootstrap 95 % interval; accuracy: McNemar's p and the discordant counts b / c; STS-B: MSE and
    Pearson); ``agreement``: per multiple-choice run (``"<task>: variant"`` / seed) :func:`agreement_rows`;
    ``selection``: per MC task, on the validation split only (the eval split is never used to choose) over the
    seeds every candidate has, PredGen's adapter among its T(Z) forms (:data:`SELECT`) and, per model, the prompt
    (the task's, which lists the choices, or lm-eval-harness's: :data:`PROMPTS`); a choice needs two candidates."""
    by_task: dict[str, dict[str, dict[int, Mapping[str, Any]]]] = {}
    for run, r in collected["runs"].items():
        task = next(t for t in TASKS if r["group"].startswith(f"{t}-"))
        by_task.setdefault(task, {}).setdefault(r["group"][len(task) + 1:], {})[r["seed"]] = records[run]
    out: dict[str, Any] = {"comparisons": {}, "per_example": {}, "agreement": {}, "selection": {}}
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
        if metric != "accuracy":
            continue
        for variant, rows in agreement_rows(results, preds, metric).items():
            out["agreement"][f"{task}: {variant}"] = rows
        methods = {v: method_summary(per, metric) for v, per in results.items()}
        picks = {"adapter": select_on_validation(methods, SELECT)}
        picks.update({f"prompt: {model}": select_on_validation(methods, pair) for model, pair in PROMPTS.items()})
        picks = {k: v for k, v in picks.items() if v is not None}
        if picks:
            out["selection"][task] = picks
    return out
