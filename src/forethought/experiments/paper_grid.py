"""The derive functions of the two PredGen grid specs: ``predgen_grid`` (the CPU evidence: seed-paired differences
of each method's prediction against the others' and against the Generator's rank decoders, and each multiple-choice
prediction's agreement with its own rank decoders and its own written answer) and ``predgen_paper_grid`` (the
paper's table: dataset x method, our mean ± std over seeds beside the paper's number).

Run groups are named ``<task>-<variant>``; a record holds ``results`` (results.json) and ``predictions``
(predictions.jsonl rows: prediction, decoded, rank, rank_norm, target)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forethought.core.errors import ForethoughtError
from forethought.eval.paired import paired, task_type_of
from forethought.experiments.stats import over_seeds, seed_paired

# The paper's Llama2-7B + LoRA accuracies (%) that are kept here, "<task>/<method>"; the results pages show them
# through report.papers (which re-exports this table: its one home is here, where the derive reads it).
PAPER_SOURCE = ("Kowsher et al. 2025, Predicting Through Generation: Why Generation Is Better for Prediction, "
                "[arXiv:2502.17817](https://arxiv.org/abs/2502.17817), Llama2-7B + LoRA, accuracy in %")
PAPER_LLAMA2_7B = {"arc-easy/predgen": 84.79, "arc-easy/generator": 79.54, "arc-easy/predictor": 75.27,
                   "boolq/predgen": 73.82, "boolq/generator": 68.09, "boolq/predictor": 66.29,
                   "winogrande/predgen": 83.21, "winogrande/generator": 77.54, "winogrande/predictor": 70.49,
                   "hellaswag/predgen": 93.14, "hellaswag/generator": 90.86, "hellaswag/predictor": 88.53}

# the metric each task is judged by, and whether lower is better
METRICS = {"mse": True, "accuracy": False}
# (A, B): A's prediction against B's; "<variant>:<answer>" reads another answer of that run (rank, decoded, ...).
# The Generator has two rank decoders, summed log-probability (rank) and per character (rank_norm, lm-eval's
# acc_norm): both are bars, neither picked on the test items
GRID_COMPARE = (
    ("predgen-tz", "generator"), ("predgen-tz", "generator:rank"), ("predgen-tz", "generator:rank_norm"),
    ("predgen-tz", "predictor"), ("generator", "predictor"), ("generator:rank", "predictor"),
    ("generator:rank_norm", "predictor"), ("predgen-ll", "generator:rank"), ("predgen-ll", "generator:rank_norm"),
    ("predgen-tz", "predgen-ll"), ("predgen-tz", "predgen-tz:decoded"),
    ("predgen-tz", "predgen-tz-noq"),  # the question's worth to T(Z), over the choices' text alone
    ("predgen", "generator"), ("predgen", "generator:rank"), ("predgen", "generator:rank_norm"),
    ("predgen", "predictor"),
    ("predgen", "generator:expected_value"),
    ("predgen:decoded", "generator"),  # what PredGen's training does to the number the model writes
)


def _split(name: str) -> tuple[str, str]:
    variant, _, answer = name.partition(":")
    return variant, answer


def _metric(results: Mapping[str, Any], answer: str) -> tuple[str, float] | None:
    """(metric, value) of one answer of a run's results: its prediction ('') or results[answer]."""
    part = results if not answer else results.get(answer)
    if not isinstance(part, Mapping):
        return None
    for metric in METRICS:
        if isinstance(part.get(metric), (int, float)):
            return metric, float(part[metric])
    return None


def _agreement(rows: list[Mapping[str, Any]], key: str) -> float | None:
    """The share of items whose prediction equals their ``key`` answer (None without that answer)."""
    pairs = [(r["prediction"], r[key]) for r in rows if key in r and "prediction" in r]
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def _by_task(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, dict[str, dict[int, Any]]]:
    """task -> variant -> seed -> record (a group's task is its name up to the variant's first known word)."""
    out: dict[str, dict[str, dict[int, Any]]] = {}
    for run, r in collected["runs"].items():
        task, variant = _task_variant(r["group"])
        out.setdefault(task, {}).setdefault(variant, {})[r["seed"]] = records[run]
    return out


VARIANT_WORDS = ("predictor", "generator", "predgen")


def _task_variant(group: str) -> tuple[str, str]:
    for word in VARIANT_WORDS:
        marker = f"-{word}"
        if marker in group:
            at = group.index(marker)
            return group[:at], group[at + 1:]
    raise ValueError(f"run group {group!r} names no method ({', '.join(VARIANT_WORDS)})")


ITEM_BOOT = 2000  # bootstrap resamples of the test items per comparison and seed


def _item_intervals(runs_a: Mapping[int, Any], runs_b: Mapping[int, Any], answer_a: str, answer_b: str,
                    seeds: list[int]) -> dict[str, Any]:
    """seed -> the paired per-item comparison of two runs' answers (forethought.eval.paired.paired) on the seeds
    both have predictions for: accuracy difference, its interval and McNemar's p, or the MSE difference."""
    out = {}
    for s in seeds:
        rows_a, rows_b = runs_a[s].get("predictions") or [], runs_b[s].get("predictions") or []
        if not rows_a or not rows_b or not all("id" in r for r in (*rows_a, *rows_b)):
            continue  # nothing to match items by
        try:
            p = paired(rows_a, rows_b, task_type_of(rows_a), answer_a or "prediction", answer_b or "prediction",
                       n_boot=ITEM_BOOT, seed=s)
        except ForethoughtError:  # different test items, or a side without that answer: no item-level reading
            continue
        if "difference" in p:
            out[f"seed {s}"] = {"difference": p["difference"], "ci95": p["ci95"],
                                "mcnemar_p": p["mcnemar"]["p_value"], "n": p["n"]}
        else:
            out[f"seed {s}"] = {"difference": p["mse"]["difference"], "ci95": p["mse"]["ci95"], "n": p["n"]}
    return out


def grid(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """``comparisons``: per task, every :data:`GRID_COMPARE` pair both of whose runs exist, as the seed-paired
    difference of the task's metric (A − B; for MSE lower is better, so a negative difference favours A);
    ``items``: the same pairs within each seed, over the test items both runs answered (matched by id): the
    difference with its paired-bootstrap 95 % interval (and McNemar's exact p for accuracy) — what varies with
    the test items, which the seed interval does not show, and with one seed the only interval there is;
    ``agreement``: per multiple-choice run group, over seeds, the share of items where its prediction equals its
    own rank decoders' answers (summed and per character) and its own written answer."""
    out: dict[str, Any] = {"comparisons": {}, "items": {}, "agreement": {}}
    for task, variants in _by_task(records, collected).items():
        for a, b in GRID_COMPARE:
            (va, aa), (vb, ab) = _split(a), _split(b)
            if va not in variants or vb not in variants:
                continue
            sides = []
            for v, ans in ((va, aa), (vb, ab)):
                vals = {s: _metric(rec["results"], ans) for s, rec in variants[v].items()}
                sides.append({s: m for s, m in vals.items() if m is not None})
            if not sides[0] or not sides[1] or not set(sides[0]) & set(sides[1]):
                continue
            metric = next(iter(sides[0].values()))[0]
            diff = seed_paired({s: m[1] for s, m in sides[0].items()}, {s: m[1] for s, m in sides[1].items()})
            out["comparisons"][f"{task}: {a} − {b}"] = {"metric": metric, **diff}
            items = _item_intervals(variants[va], variants[vb], aa, ab, sorted(set(sides[0]) & set(sides[1])))
            if items:
                out["items"][f"{task}: {a} − {b}"] = items
        for variant, per_seed in variants.items():
            # agreement is a share of equal labels: multiple choice only (a regression's numbers never tie)
            rows = {s: rec.get("predictions") or [] for s, rec in per_seed.items()
                    if (m := _metric(rec["results"], "")) is not None and m[0] == "accuracy"}
            agree = {}
            for key, name in (("rank", "with_rank"), ("rank_norm", "with_rank_norm"), ("decoded", "with_written")):
                vals = {s: _agreement(r, key) for s, r in rows.items()}
                vals = {s: v for s, v in vals.items() if v is not None}
                if vals:
                    agree[name] = over_seeds(vals)
            if agree:
                out["agreement"][f"{task}-{variant}"] = agree
    return out


def paper_table(records: dict[str, dict[str, Any]], collected: dict[str, Any],
                paper: Mapping[str, float] = PAPER_LLAMA2_7B, source: str | None = PAPER_SOURCE) -> dict[str, Any]:
    """The paper's table layout: one row per dataset, one column per method (Predictor, Generator, PredGen), each
    cell our mean ± std over seeds of the task's metric (accuracy, or MSE for regression) beside the paper's
    Llama2-7B number where it is kept (:data:`PAPER_LLAMA2_7B`, in %; ours are fractions); and beside it what
    :func:`grid` reports of every multiple-choice result: the seed-paired and per-item differences (PredGen
    against the Generator's rank decoder among them, the bar an adapter must clear) and each run group's
    agreement with its own rank decoders and written answer."""
    rows = {}
    for task, variants in _by_task(records, collected).items():
        row: dict[str, Any] = {}
        for method in VARIANT_WORDS:
            vals = {s: m for s, rec in variants.get(method, {}).items()
                    if (m := _metric(rec["results"], "")) is not None}
            if vals:
                metric = next(iter(vals.values()))[0]
                row[method] = {"metric": metric, **over_seeds({s: v for s, (_, v) in vals.items()})}
            number = paper.get(f"{task}/{method}")
            if number is not None:
                row.setdefault(method, {})["paper"] = number
        rows[task] = row
    return {"table": rows, "paper_source": source, **grid(records, collected)}


def base_table(records: dict[str, dict[str, Any]], collected: dict[str, Any]) -> dict[str, Any]:
    """:func:`paper_table` of a grid on another base than Llama-2-7B: the paper's per-dataset numbers kept here
    are Llama-2-7B's, so none is set beside these cells."""
    return paper_table(records, collected, paper={}, source=None)


def grid_plot(collected: Mapping[str, Any], path: Path) -> None:
    """predgen_grid's figure: one panel per task, one column per answer (each method's prediction, and the
    Generator's rank decoders, summed and per character, as columns of their own: the bars), each seed a dot and
    the mean a bar; accuracy for the multiple-choice tasks, MSE (lower is better) for regression."""
    from forethought.core.plots import save_figure, subplots

    panels: dict[str, dict[str, list[float]]] = {}
    for group, g in collected["groups"].items():
        task, variant = _task_variant(group)
        m = g.get("measures", {})
        metric = "accuracy" if "accuracy" in m else "mse" if "mse" in m else None
        if metric is None:
            continue
        cols = panels.setdefault(f"{task} ({metric})", {})
        cols[variant] = m[metric]["per_seed"]
        if variant == "generator":  # its rank decoders, each a bar of its own
            for measure, name in (("rank_accuracy", "generator:rank"),
                                  ("rank_norm_accuracy", "generator:rank_norm")):
                if measure in m:
                    cols[name] = m[measure]["per_seed"]
    if not panels:
        return
    fig, axes = subplots(1, len(panels), figsize=(3.2 * len(panels), 3.6), squeeze=False)
    for ax, (title, cols) in zip(axes[0], panels.items(), strict=True):
        names = sorted(cols, key=lambda v: (VARIANT_WORDS.index(v.split("-")[0].split(":")[0]), v))
        for i, name in enumerate(names):
            vals = cols[name]
            ax.bar(i, sum(vals) / len(vals), color="#fdae6b" if name.startswith("generator:rank") else "#9ecae1")
            ax.plot([i] * len(vals), vals, "k.", ms=5)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("predgen_grid: each seed (dots) and the mean (bars)", fontsize=10)
    save_figure(fig, path)
