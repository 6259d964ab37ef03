"""The myopia benchmarks' aggregation: the language-model comparison from per-seed losses (the gap, the paper's
local-myopic bonus, the gap relative to what context buys; plain arithmetic on ``{variant: {seed: loss}}`` with
variants as ``myopia lm`` names them: vanilla, detach_hidden (myopic), local, zero_past (the transformer bigram)),
and the derive functions of the shipped myopia specs (``experiment collect``). Imports no system: pure
functions of the runs' records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.experiments.stats import over_seeds, seed_paired


def paired_or_none(a: Mapping[int, float], b: Mapping[int, float]) -> dict[str, Any] | None:
    """:func:`seed_paired` A − B, or None while the two share no seed (a benchmark still running)."""
    return seed_paired(a, b) if set(a) & set(b) else None


def variant_stats(loss: Mapping[str, Mapping[int, float]]) -> dict[str, float | None]:
    """``<variant>_mean`` and ``<variant>_std`` (sample std; None for one seed) of each variant's losses over seeds."""
    out: dict[str, float | None] = {}
    for variant, by_seed in loss.items():
        s = over_seeds(by_seed)
        out[f"{variant}_mean"], out[f"{variant}_std"] = s["mean"], s["std"]
    return out


def lm_summary(loss: Mapping[str, Mapping[int, float]]) -> dict[str, Any]:
    """The headline keys, each a difference paired by seed over the seeds both variants have:

    - ``gap`` / ``gap_paired``: myopic − vanilla; ``gap_relative``: gap / vanilla's mean loss;
    - ``local_myopic_bonus`` / ``_paired``: vanilla − local (the paper's definition: how much a model optimising
      only each position's own loss on vanilla's past states improves on vanilla);
    - ``myopic_minus_local`` / ``_paired``; ``context_benefit_paired``: bigram − vanilla (what context buys);
    - ``gap_over_context``: mean gap / (mean bigram − mean vanilla), and ``gap_over_context_per_seed``.
    """
    get = {v: loss.get(v, {}) for v in ("vanilla", "detach_hidden", "local", "zero_past")}
    stats = variant_stats({v: d for v, d in get.items() if d})
    mean = {v: stats[f"{v}_mean"] for v, d in get.items() if d}
    gap = paired_or_none(get["detach_hidden"], get["vanilla"])
    bonus = paired_or_none(get["vanilla"], get["local"])
    myo_local = paired_or_none(get["detach_hidden"], get["local"])
    res: dict[str, Any] = {
        "gap": gap["mean"] if gap else None, "gap_paired": gap,
        "gap_relative": gap["mean"] / mean["vanilla"] if gap else None,
        "local_myopic_bonus": bonus["mean"] if bonus else None, "local_myopic_bonus_paired": bonus,
        "myopic_minus_local": myo_local["mean"] if myo_local else None, "myopic_minus_local_paired": myo_local,
        "context_benefit_paired": paired_or_none(get["zero_past"], get["vanilla"])}
    seeds = sorted(set(get["detach_hidden"]) & set(get["vanilla"]) & set(get["zero_past"]))
    res["gap_over_context_per_seed"] = {
        str(s): (get["detach_hidden"][s] - get["vanilla"][s]) / (get["zero_past"][s] - get["vanilla"][s])
        for s in seeds}
    res["gap_over_context"] = (gap["mean"] / (mean["zero_past"] - mean["vanilla"])
                               if gap and "zero_past" in mean else None)
    return res


# ---------------------------------------------------------------- derive functions of the myopia specs
# Each takes (records by run name, the collected JSON) and returns the JSON mapping ``collect`` keeps under
# ``derived``: what one measure path per run cannot say (a key that depends on the run's p or mode, a difference
# between two measures of different runs, a level computed from the task).

# Wu et al. 2024 (the reference code's runs): the myopic normalised loss per p; vanilla "about 0.00-0.1".
PAPER_SYNTHETIC_MYOPIC = {"p=1": 1.257, "p=0.3": 1.034, "p=0.1": 0.966, "p=0.01": 1.103}
# Wu et al. 2024, GPT-2 124M from scratch on 64-token sequences: validation losses (nats).
PAPER_LM = {"vanilla": 3.28, "myopic": 3.40, "gap": 0.12, "transformer_bigram": 5.33, "local_myopic": 3.26,
            "local_myopic_bonus": 0.02, "myopic_minus_local": 0.14, "gap_over_context": round(0.12 / (5.33 - 3.28), 4)}
MODEL_NAMES = {"vanilla": "vanilla", "detach_hidden": "myopic"}


def _interval_or_none(stats: Mapping[str, Any] | None) -> list[float] | None:
    return stats["ci95_of_mean"] if stats else None


LEVELS = "levels-"  # a run that records only the levels (``myopia synthetic --modes []``), no model


def _seed(record: Mapping[str, Any]) -> int:
    return int(record["config"]["run"]["seed"])


def _levels(records: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """{(p key, seed): the COPY level} from the level-only runs (on the sequences that seed's models are scored on)."""
    return {(key, _seed(r)): row["copy_level"] for name, r in records.items() if name.startswith(LEVELS)
            for key, row in r["results"].items() if key.startswith("p=") and row.get("copy_level") is not None}


def _synthetic_rows(records: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
    """{'p=<p>': {model: {seed: the run's row}}} from ``myopia synthetic`` records (one p and mode each, or more);
    each row carries its p's predict-zero level and its COPY level on the same evaluation sequences (recorded by the
    run, or by the level-only run of its p and seed), or None where neither has it."""
    levels = _levels(records)
    rows: dict = {}
    for name, record in records.items():
        if name.startswith(LEVELS):
            continue
        seed = _seed(record)
        for key, row in record["results"].items():
            if not key.startswith("p="):
                continue
            copy = row.get("copy_level", levels.get((key, seed)))
            for mode, model in MODEL_NAMES.items():
                if mode in row:
                    rows.setdefault(key, {}).setdefault(model, {})[seed] = {
                        **row[mode], "predict_zero": row["predict_zero"], "copy_level": copy}
    return rows


def _best_lag(probe_r2: list[list[float]], lag: int) -> float:
    return max(layer[lag] for layer in probe_r2)


def synthetic(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """Per p (``p=<p>``, p descending): the predict-zero level; the COPY level (x_n where z = 0, zero where z = 1:
    the level breadcrumbs are read against) per seed on that seed's evaluation sequences and its mean; each model's
    normalised loss (mean over seeds, std, per seed); myopic − vanilla paired by seed (the same data stream and
    initialisation); each model − COPY paired by seed (on the same sequences), with an interval from two seeds on;
    the paper's myopic loss; the best-layer probe R² of sin(10·x_n) (lag 0) and of the whole sum (last layer)."""
    out: dict[str, Any] = {}
    rows = _synthetic_rows(records)
    for key in sorted(rows, key=lambda k: -float(k[2:])):
        models = rows[key]
        any_row = next(iter(next(iter(models.values())).values()))
        copy = {s: r["copy_level"] for by_seed in models.values() for s, r in by_seed.items()
                if r["copy_level"] is not None}
        entry: dict[str, Any] = {"predict_zero": any_row["predict_zero"],
                                 "copy": over_seeds(copy)["mean"] if copy else None,
                                 "copy_per_seed": {str(k): v for k, v in sorted(copy.items())}}
        loss = {name: {s: r["normalised_loss"] for s, r in by_seed.items()} for name, by_seed in models.items()}
        for name in ("vanilla", "myopic"):
            if name in loss:
                s = over_seeds(loss[name])
                entry[name], entry[f"{name}_std"], entry[f"{name}_per_seed"] = s["mean"], s["std"], {
                    str(k): v for k, v in sorted(loss[name].items())}
        diff = paired_or_none(loss.get("myopic", {}), loss.get("vanilla", {}))
        entry["myopic_minus_vanilla"] = diff["mean"] if diff else None
        entry["myopic_minus_vanilla_ci95"] = _interval_or_none(diff)
        for name in ("vanilla", "myopic"):
            below = paired_or_none(loss.get(name, {}), copy)
            entry[f"{name}_minus_copy"] = below["mean"] if below else None
            entry[f"{name}_minus_copy_ci95"] = _interval_or_none(below)
        entry["paper_myopic"] = PAPER_SYNTHETIC_MYOPIC.get(key)
        for name, by_seed in models.items():
            entry[f"{name}_probe_r2_lag0"] = over_seeds({s: _best_lag(r["probe_r2"], 0)
                                                         for s, r in by_seed.items()})["mean"]
            sums = {s: r["probe_sum_r2"][-1] for s, r in by_seed.items() if r.get("probe_sum_r2")}
            if sums:
                entry[f"{name}_probe_sum_r2_last_layer"] = over_seeds(sums)["mean"]
        out[key] = entry
    return out
