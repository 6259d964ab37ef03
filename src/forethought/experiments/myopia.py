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
    - ``gap_over_context``: mean gap / (mean bigram − mean vanilla), and ``gap_over_context_per_seed``;
    - with ``detach_kv`` losses: ``detach_kv_gap`` / ``_paired`` (detach_kv − vanilla) and
      ``detach_kv_minus_myopic_paired`` (detach_kv − detach_hidden).
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
    if loss.get("detach_kv"):  # the frozen-past variant: its own gap, and what freezing past K/V adds
        kv = paired_or_none(loss["detach_kv"], get["vanilla"])
        res["detach_kv_gap"], res["detach_kv_gap_paired"] = (kv["mean"] if kv else None), kv
        res["detach_kv_minus_myopic_paired"] = paired_or_none(loss["detach_kv"], get["detach_hidden"])
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



def escape_step(curve: list, predict_zero: float, fraction: float = 0.8) -> int | None:
    """The first logged step whose training loss (normalised) is below ``fraction`` × the predict-zero level:
    when the run left predict-zero (None if it never did)."""
    return next((int(step) for step, loss in curve if loss < fraction * predict_zero), None)


def _horizon_part(loss: dict[str, dict[int, float]]) -> dict[str, Any]:
    """Per k against vanilla (k = T): the seed-paired difference and the fraction of the myopic (k = 0) − vanilla
    difference that horizon k recovers (mean over the seeds all three have)."""
    import statistics

    out: dict[str, Any] = {}
    van, myo = loss.get("T", {}), loss.get("0", {})
    for k in sorted((k for k in loss if k != "T"), key=int) + (["T"] if "T" in loss else []):
        row: dict[str, Any] = {}
        diff = paired_or_none(loss[k], van)
        row["minus_vanilla"] = diff["mean"] if diff else None
        row["minus_vanilla_ci95"] = _interval_or_none(diff)
        both = sorted(set(loss[k]) & set(van) & set(myo))
        if both and all(myo[s] != van[s] for s in both):
            row["fraction_recovered"] = statistics.fmean((myo[s] - loss[k][s]) / (myo[s] - van[s]) for s in both)
        out[k] = row
    return out


def horizon(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """The horizon sweep: run groups ``<part>-k=<k>`` (k = T: vanilla). Per part and k: the loss minus vanilla's
    (paired by seed), the fraction of the myopic − vanilla difference recovered; on the synthetic task the
    predict-zero level and the step at which each run left it (:func:`escape_step`, per seed); and each run's
    training wall time (seconds, as [run, seconds] pairs)."""
    loss: dict[str, dict[str, dict[int, float]]] = {"synthetic": {}, "lm": {}}
    escape: dict[str, dict[str, int | None]] = {}
    walls, predict_zero = [], {}
    for name, record in sorted(records.items()):
        run = collected["runs"][name]
        part, k = run["group"].split("-k=", 1)
        seed, r = run["seed"], record["results"]
        mode = "vanilla" if k == "T" else "detach_hidden"
        if part == "synthetic":
            m = r["p=1"][mode]
            loss[part].setdefault(k, {})[seed] = m["normalised_loss"]
            predict_zero[seed] = r["p=1"]["predict_zero"]
            escape.setdefault(k, {})[str(seed)] = escape_step(m["curve"], r["p=1"]["predict_zero"])
        else:
            m = r["variants"][mode]
            loss[part].setdefault(k, {})[seed] = m["val_loss"]
        walls.append([name, m["train_wall_s"]])
    synth = _horizon_part(loss["synthetic"])
    for k, row in synth.items():
        row["escape_step"] = escape.get(k)
    return {"synthetic": {"predict_zero": over_seeds(predict_zero)["mean"] if predict_zero else None,
                          "per_k": synth},
            "lm": {"per_k": _horizon_part(loss["lm"])}, "train_wall_s": walls}


def lm(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """A ``myopia lm`` comparison (runs that each train some of vanilla, detach_hidden, local, zero_past; every
    model of a seed shares its initialisation and data order): the runs' setup, each variant's mean and std,
    :func:`lm_summary` of the per-seed validation losses, and the per-position losses (mean over seeds) with the
    gap per position (lists: kept in the JSON for plots, not shown in the section's table)."""
    import statistics

    loss: dict[str, dict[int, float]] = {}
    per_pos: dict[str, dict[int, list[float]]] = {}
    setup = None
    for name, record in sorted(records.items()):
        r, seed = record["results"], collected["runs"][name]["seed"]
        if "variants" not in r:
            continue  # not an LM run (e.g. the model folder myopia init-model made)
        setup = setup or {k: r.get(k) for k in ("corpus", "tokenizer", "seq_len", "steps", "batch_size",
                                                "tokens_seen", "eval_sequences", "params")}
        for variant, x in r["variants"].items():
            loss.setdefault(variant, {})[seed] = x["val_loss"]
            if x.get("per_position"):
                per_pos.setdefault(variant, {})[seed] = x["per_position"]
    out: dict[str, Any] = {"setup": setup, **variant_stats(loss), **lm_summary(loss)}
    out["per_position_mean"] = {v: [statistics.fmean(c) for c in zip(*d.values(), strict=True)]
                                for v, d in per_pos.items()}
    gap = out["gap_paired"]
    if gap and "detach_hidden" in per_pos and "vanilla" in per_pos:
        diffs = [[m - v for m, v in zip(per_pos["detach_hidden"][s], per_pos["vanilla"][s], strict=True)]
                 for s in gap["seeds"]]
        out["gap_per_position_mean"] = [statistics.fmean(c) for c in zip(*diffs, strict=True)]
    return out


def lm_with_paper(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`lm` with the paper's GPT-2 124M numbers beside ours (``paper``)."""
    return {**lm(records, collected), "paper": PAPER_LM}


# the families' result keys -> their column in the derived table
FAMILY_COLUMNS = {"forward_max_abs_diff": "forward: max abs diff", "earlier_state_grad_max_abs":
                  "gradient into earlier states: max abs", "param_grad_max_rel_diff":
                  "one-pass vs per-position grads: max rel diff"}


def families(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """``myopia families``: a row per model family (prefixed by the run when there are several): the three
    exactness numbers (max abs forward difference, max gradient into earlier states, max relative difference of the
    one-pass gradients from the per-position form) and the myopic / vanilla step-time ratio."""
    rows: dict[str, Any] = {}
    for name, record in sorted(records.items()):
        for family, f in record["results"]["families"].items():
            key = family if len(records) == 1 else f"{name} / {family}"
            rows[key] = {**{label: f[k] for k, label in FAMILY_COLUMNS.items()},
                         "step time myopic / vanilla": f["step_cost"]["ratio"]}
    return {"per_family": rows}


def gradient_trajectory(measurements: list[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """One parameter group's pre-caching gradient over a ``myopia gradients`` run (rows logged every eval_every
    steps, ``<key>/rel_diff`` = ‖g − g_m‖/‖g‖ and ``<key>/cos`` = cos(g, g_m)): its first, largest (and the step of
    it), last and mean relative difference, the last and the smallest cosine."""
    import statistics

    rel = [r[f"{key}/rel_diff"] for r in measurements]
    cos = [r[f"{key}/cos"] for r in measurements]
    top = max(rel)
    return {"rel_diff_first": rel[0], "rel_diff_max": top, "rel_diff_step_of_max": measurements[rel.index(top)]["step"],
            "rel_diff_last": rel[-1], "rel_diff_mean": statistics.fmean(rel), "cos_last": cos[-1], "cos_min": min(cos)}


def gradients(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """The myopia_gradients spec: per run (one per experiment, synthetic or lm) its setup, and the trajectory
    (:func:`gradient_trajectory`) of every parameter group and of ``all``, as ``trajectory.<run>.<group>`` (the
    measurements themselves stay in the run's record)."""
    setup, trajectory = {}, {}
    for name, record in sorted(records.items()):
        r = record["results"]
        setup[name] = {"experiment": r["experiment"], "steps": r["steps"], "batch_size": r["batch_size"],
                       "measure_batches": r["measure_batches"], "train_wall_s": r["train_wall_s"]}
        trajectory[name] = {key: gradient_trajectory(r["measurements"], key) for key in [*r["groups"], "all"]}
    return {"setup": setup, "trajectory": trajectory}


def sin_block(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """The myopia_sin_block spec: per run group (activation) and seed, the first evaluation step whose held-out MSE
    is below 0.8 × the predict-zero level (:func:`escape_step`; None: it never left that level)."""
    out: dict[str, dict[str, int | None]] = {}
    for name, record in sorted(records.items()):
        run, r = collected["runs"][name], record["results"]
        out.setdefault(run["group"], {})[f"seed {run['seed']}"] = escape_step(r["curve"], r["predict_zero_mse"])
    return {"left_predict_zero_at_step": out}
