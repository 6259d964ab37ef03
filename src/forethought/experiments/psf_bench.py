"""The PSF benchmarks' arithmetic as pure functions of run records (no torch): what ``benchmarks/psf_wikitext.py``
and ``benchmarks/psf_planted.py`` computed after ``psf eval`` and ``psf diagnose``, moved here unchanged so the
specs ``psf_wikitext``, ``psf_wikitext_codes``, ``psf_planted`` (and ``*_tiny``) reach the same numbers through
``derive`` (:func:`wikitext`, :func:`planted`) and decide their checks on ``derived.*``; :func:`prompted` is the
psf_prompted spec's over-seed differences (each method of ``psf prompted`` minus replacement).

A run of these specs is one seed's whole pipeline in one run folder: the ``psf recipe`` run itself (its record's
``results`` and ``diagnose``), ``psf_content/`` (the content-state ablation, ``psf_content/results`` and
``psf_content/diagnose``), ``token_flow/`` and ``eval/`` (``psf eval`` of them all: ``eval/results``); the
compared runs sit inside the run folder so that ``psf eval`` names them by their folder names, as the scripts did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from forethought.eval.curves import plot_sweeps, ppl_at_entropy, value_at_entropy
from forethought.eval.stats import seed_mean_difference, t_interval
from forethought.experiments.stats import seed_paired

# ---- WikiText-2 (and any single-seed psf_wikitext pipeline): the five checks of one evaluation ----------------

ROWS = ("psf", "psf_content", "psf_mean_trajectory", "ar", "token_flow")  # in the tables' order
PARAM_TOLERANCE = 0.2  # token flow params within ±20 % of PSF encoder + decoder


def wikitext_checks(ev: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark's five targets from one ``psf eval`` results.json (its rows psf, psf_content, ar, token_flow)."""
    rows = ev["models"]
    L = ev["seq_len"]
    ps = rows["psf"]
    return {
        "psf_flops_le_tenth_of_token_flow": {
            "pass": ps["flops_per_sample"] <= rows["token_flow"]["flops_per_sample"] / 10,
            "psf": ps["flops_per_sample"], "token_flow": rows["token_flow"]["flops_per_sample"],
            "ratio": ps["flops_per_sample"] / rows["token_flow"]["flops_per_sample"]},
        "psf_beats_content_at_matched_entropy": _beats(ps, rows["psf_content"],
                                                       ev["differences"]["psf - psf_content"]["matched_entropy"]),
        "psf_serial_depth_eq_prior_steps_plus_L_over_K": {
            "pass": ps["serial_depth"] == ps["prior_steps"] + L // ps["blocks"], "psf": ps["serial_depth"],
            "expected": ps["prior_steps"] + L // ps["blocks"], "prior_steps": ps["prior_steps"],
            "L_over_K": L // ps["blocks"]},
        "baseline_params_within_20pct_of_psf_encoder_decoder": {
            "pass": all(abs(rows[r]["params_ratio_to_psf_encoder_decoder"] - 1) <= PARAM_TOLERANCE
                        for r in ("ar", "token_flow")),
            "psf_encoder_decoder": ps["params_encoder_decoder"], "ar": rows["ar"]["params"],
            "token_flow": rows["token_flow"]["params"],
            "psf_content_encoder_decoder": rows["psf_content"]["params_encoder_decoder"]},
        "psf_samples_per_s_b32_above_ar": {
            "pass": ps["samples_per_s_b32"] > rows["ar"]["samples_per_s_b32"], "psf": ps["samples_per_s_b32"],
            "ar": rows["ar"]["samples_per_s_b32"]},
    }


def _beats(a: Mapping[str, Any], b: Mapping[str, Any], diff: Mapping[str, Any]) -> dict[str, Any]:
    x, y = a["gen_ppl_at_matched_entropy"], b["gen_ppl_at_matched_entropy"]
    out = {"pass": None if x is None or y is None else x < y, "psf": x, "psf_content": y,
           "psf_minus_content": diff["gen_ppl_diff"], "interval": diff["interval"],
           "interval_below_zero": None if diff["interval"] is None else diff["interval"][1] < 0}
    if out["pass"] is None:
        out["note"] = "a sweep does not bracket the target entropy, so there is no matched-entropy comparison"
    return out


def wikitext(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """derive of the psf_wikitext specs, by run: the references' entropy, every model's gen-PPL at it (None where
    its sweep does not bracket it) and FLOPs per document, the code channel's zeroing cost where a run has codes,
    and the five checks."""
    out = {}
    for run, rec in records.items():
        ev = rec["eval/results"]
        diag = {"psf": rec.get("diagnose"), **{k.removesuffix("/diagnose"): v for k, v in rec.items()
                                                if k.endswith("/diagnose")}}
        out[run] = {"target_entropy": ev["target_entropy"],
                    "gen_ppl_at_matched_entropy": {m: r["gen_ppl_at_matched_entropy"] for m, r in ev["models"].items()},
                    "flops_per_sample": {m: r.get("flops_per_sample") for m, r in ev["models"].items()},
                    "zeroing_cost": {m: d["codes"]["zeroing_cost"]["all"]["diff"] for m, d in diag.items()
                                     if d and isinstance(d.get("codes"), Mapping) and "zeroing_cost" in d["codes"]},
                    "checks": (checks := wikitext_checks(ev)),
                    "evaluation": wikitext_view(ev, diag, checks)}
    return out


def wikitext_view(ev: Mapping[str, Any], diagnose: Mapping[str, Any], checks: Mapping[str, Any]) -> dict[str, Any]:
    """One run's evaluation in the layout the removed benchmark script wrote (psf_wikitext*.json before the runner):
    ``settings``, the five fixed rows at the top level, every other row under ``other_rows``, psf eval's
    ``differences``, the five ``checks`` (:func:`wikitext_checks`) and each recipe's ``psf diagnose``; the results
    pages and README's headline read this layout from either file."""
    refs, cfg = ev["references"], ev["settings"]
    settings = {
        "corpus": ev["corpus"], "tokenizer": ev["tokenizer"], "seq_len": ev["seq_len"], "blocks": ev["blocks"],
        "samples_per_point": cfg["samples"],
        "sweep": [{"temperature": t, "top_p": p} for t, p in cfg["sweep"]],
        "token_flow_sweep": {"knob": cfg["token_flow_knob"], "values": cfg["token_flow_sweep"]},
        "judge": cfg["judge"], "judge_max_tokens": ev["judge_max_tokens"],
        "length_quantile": cfg["length_quantile"], "references": refs["n"], "reference_split": refs["split"],
        "reference_spread": refs["spread"],
        "reference_offsets": {"first": refs["first_offset"], "last_end": refs["last_end"],
                              "split_tokens": refs["split_tokens"]},
        "reference_judge_tokens": refs.get("judge_tokens", refs.get("tokens")), "reference_gen_ppl": refs["gen_ppl"],
        "target_entropy": ev["target_entropy"], "target_entropy_interval": ev["target_entropy_interval"],
        # psf eval's densification settings (an evaluation before densification has none)
        **{k: cfg[k] for k in ("entropy_tolerance", "densify_top_p") if k in cfg},
        "seed": cfg["seed"], "bootstrap": ev["bootstrap"], "conventions": ev["conventions"]}
    rows = ev["models"]
    return {"settings": settings, **{m: rows[m] for m in ROWS},
            "other_rows": {m: r for m, r in rows.items() if m not in ROWS},
            "differences": ev["differences"], "checks": checks,
            "diagnose": {name: d for name, d in diagnose.items() if d}}


def wikitext_curves(collected: Mapping[str, Any], path: Path) -> None:
    """Plot of the psf_wikitext specs: gen-PPL against unigram entropy, every model's sweep, of the first run (a
    single-seed pipeline), as ``psf eval`` draws it."""
    view = next(iter(collected["derived"].values()))["evaluation"]
    s = view["settings"]
    plot_sweeps(wikitext_rows(view), path, s["target_entropy"], Path(s["judge"]).name, s["corpus"], s["seq_len"])


def wikitext_rows(view: Mapping[str, Any]) -> dict[str, Any]:
    """A psf_wikitext evaluation's rows by model: the fixed five, then any others (state-only priors, compared
    runs)."""
    return {**{m: view[m] for m in ROWS}, **(view.get("other_rows") or {})}


# ---- the planted corpus over training seeds ----------------------------------------------------------------------

TARGETS = {"shuffle_first_min": 0.1, "predictive_gain_min": 0.08, "flops_ratio_max": 0.1}


def interpolate(sweep: list[dict], key: str, target: float) -> float | None:
    """``key`` at ``target`` entropy, linear in entropy between the adjacent sweep points that bracket it (the
    lowest-entropy crossing); None when nothing brackets it."""
    return value_at_entropy([(p["entropy"], p[key]) for p in sweep if p.get(key) is not None], target)


def model_summary(row: dict, target: float, floor: float) -> dict[str, Any]:
    """One model of one seed: matched-entropy NLL (and its excess over the floor) and persistence, cost."""
    at = row["gen_ppl_at_matched_entropy"]
    iv = row["matched_entropy"]["interval"]
    nll = math.log(at) if at is not None else None
    near = min(row["sweep"], key=lambda p: abs(p["entropy"] - target))
    # the model's own distribution: temperature 1 without nucleus (a token flow: its knob's neutral setting, where
    # psf eval measured its cost, e.g. its own guidance scale; else step temperature 1)
    neutral = row.get("cost_setting") if row.get("kind") == "token_flow" else None
    own = next((p for p in row["sweep"] if (all(p.get(k) == v for k, v in neutral.items()) if neutral else
                                            p.get("temperature", p.get("step_temperature")) == 1.0
                                            and p.get("top_p", 1.0) == 1.0)), None)
    return {"nll_at_matched_entropy": nll,
            "nll_at_t1": own and own["nll_per_token"], "persistence_at_t1": own and own["persistence"],
            "entropy_at_t1": own and own["entropy"],
            "nll_interval": [math.log(iv[0]), math.log(iv[1])] if iv else None,
            "excess_over_floor": nll - floor if nll is not None else None,
            "persistence_at_matched_entropy": interpolate(row["sweep"], "persistence", target),
            "persistence_near": near["persistence"], "persistence_near_interval": near["interval"]["persistence"],
            "entropy_near": near["entropy"], "point_near": row["reported_point"],
            "sweep": [{k: p.get(k) for k in ("temperature", "top_p", "step_temperature", "noise", "guidance", "entropy",
                                              "nll_per_token", "persistence", "block_coherence", "repetition_2")
                       if k in p} for p in row["sweep"]],
            "flops_per_sample": row.get("flops_per_sample"), "serial_depth": row.get("serial_depth"),
            "params": row.get("params"), "train_wall_s": row.get("train_wall_s")}


def shuffle_summary(diag: dict) -> dict[str, Any]:
    """The final stage's state-shuffle cost (first token of a block, the rest, all) with intervals (with codes:
    the codes kept at their posterior mean), and the AR ceiling (context cut at block boundaries minus full)."""
    stage = diag["stage"]
    modes = diag["shuffle"][stage]["modes"]
    mode = "posterior_mean" if "posterior_mean" in modes else next(iter(modes))
    out = {"stage": stage, "codes": mode, **{k: modes[mode][k]["diff"] for k in ("first", "rest", "all")},
           "intervals": {k: modes[mode][k]["interval"] for k in ("first", "rest", "all")}}
    if diag["ceiling"].get("available"):
        out["ar_ceiling"] = {k: diag["ceiling"][k]["diff"] for k in ("first", "rest", "all")}
    return out


def at_other_entropy(psf_sweep: list[dict], other_sweep: list[dict], target: float) -> dict[str, Any]:
    """psf's NLL interpolated (log-linear, where psf's sweep brackets it) at the entropy of the other model's
    sweep point nearest the target, minus the other's NLL there: a matched-entropy comparison for a model whose
    sweep never reaches the target (the content model's entropy does not move with temperature)."""
    near = min(other_sweep, key=lambda p: abs(p["entropy"] - target))
    at = ppl_at_entropy([(p["entropy"], p["gen_ppl"]) for p in psf_sweep], near["entropy"])
    return {"other_entropy": near["entropy"], "other_nll_there": near["nll_per_token"],
            "nll_at_other_entropy": None if at is None else math.log(at) - near["nll_per_token"]}


def seed_summary(ev: dict, diags: dict[str, dict]) -> dict[str, Any]:
    """Everything collected from one seed's psf eval results and diagnoses."""
    floor, target = ev["floor"]["entropy_rate"], ev["target_entropy"]
    models = {name: model_summary(row, target, floor) for name, row in ev["models"].items()}
    diffs = {}
    for key, d in ev["differences"].items():
        other = key.removeprefix("psf - ")
        m = d["matched_entropy"]
        shared = [p for p in d["per_point"] if {k: p[k] for k in ev["models"]["psf"]["reported_point"]}
                  == ev["models"]["psf"]["reported_point"]]
        diffs[other] = {"nll_at_matched_entropy": m.get("nll_per_token_diff"),
                        "nll_interval": m.get("nll_per_token_interval"),
                        "bracketed_fraction": m["bracketed_fraction"],
                        **at_other_entropy(ev["models"]["psf"]["sweep"], ev["models"][other]["sweep"], target)}
        if shared:  # at psf's reported sweep point, which the other model shares
            diffs[other]["persistence_at_psf_point"] = shared[0]["diff"].get("persistence")
            diffs[other]["persistence_interval"] = shared[0]["interval"].get("persistence")
    return {"floor": floor, "target_entropy": target, "references_persistence": ev["references"]["persistence"],
            "references_nll": ev["references"]["nll_per_token"], "models": models, "psf_minus": diffs,
            "shuffle": {name: shuffle_summary(d) for name, d in diags.items()}}


def over_seeds(per_seed: dict[int, dict]) -> dict[str, Any]:
    """Mean ± std per model and the seed-paired t intervals of the comparisons (None where a seed lacks a value)."""
    seeds = sorted(per_seed)

    def values(model: str, key: str) -> list[float] | None:
        v = [per_seed[s]["models"][model].get(key) for s in seeds]
        return None if any(x is None for x in v) else v

    def stats(v: list[float] | None) -> dict | None:
        if v is None:
            return None
        a = np.asarray(v, float)
        return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else None, "per_seed": v}

    keys = ("nll_at_matched_entropy", "excess_over_floor", "persistence_at_matched_entropy", "persistence_near",
            "nll_at_t1", "persistence_at_t1", "entropy_at_t1", "flops_per_sample", "serial_depth")
    models = {m: {k: stats(values(m, k)) for k in keys} for m in per_seed[seeds[0]]["models"]}
    comps: dict[str, Any] = {}
    for other in per_seed[seeds[0]]["models"]:
        if other == "psf":
            continue
        comps[f"psf - {other}"] = {}
        for k in ("nll_at_matched_entropy", "persistence_at_matched_entropy", "persistence_near", "nll_at_t1",
                  "persistence_at_t1"):
            a, b = values("psf", k), values(other, k)
            comps[f"psf - {other}"][k] = None if a is None or b is None else seed_mean_difference(a, b)
    shuffle = {name: {k: stats([per_seed[s]["shuffle"][name][k] for s in seeds]) for k in ("first", "rest", "all")}
               for name in per_seed[seeds[0]]["shuffle"]}
    nll = {other: nll_comparison(per_seed, other) for other in per_seed[seeds[0]]["psf_minus"]}
    return {"seeds": seeds, "models": models, "differences": comps, "nll_comparisons": nll, "shuffle": shuffle}


def nll_comparison(per_seed: dict[int, dict], other: str) -> dict[str, Any] | None:
    """psf - other in exact NLL per token at matched entropy, over seeds: at the references' entropy where both
    sweeps bracket it in every seed, else at the other model's own entropy (its sweep point nearest the target,
    psf interpolated there); with the fraction of the other's NLL excess over the floor that psf removes
    (``gain``: (NLL_other - NLL_psf) / (NLL_other - floor) = 1 - excess_psf / excess_other; > 1 when psf lies
    below the floor). None when neither basis exists in every seed."""
    seeds = sorted(per_seed)
    rows = [per_seed[s]["psf_minus"][other] for s in seeds]
    if all(r["nll_at_matched_entropy"] is not None for r in rows):
        basis = "the references' entropy"
        diffs = [r["nll_at_matched_entropy"] for r in rows]
        theirs = [per_seed[s]["models"][other]["nll_at_matched_entropy"] for s in seeds]
    elif all(r["nll_at_other_entropy"] is not None for r in rows):
        basis = f"{other}'s own entropy (its sweep point nearest the references' entropy)"
        diffs = [r["nll_at_other_entropy"] for r in rows]
        theirs = [r["other_nll_there"] for r in rows]
    else:
        return None
    excess = [n - per_seed[s]["floor"] for n, s in zip(theirs, seeds, strict=True)]
    gain = [-d / e if e > 0 else None for d, e in zip(diffs, excess, strict=True)]
    return {"basis": basis, "per_seed": diffs, "mean": float(np.mean(diffs)),
            "std": float(np.std(diffs, ddof=1)) if len(diffs) > 1 else None,
            "interval": list(t_interval(diffs)) if len(diffs) > 1 else None, "other_nll": theirs,
            "other_excess_over_floor": excess, "gain": gain,
            "gain_mean": None if None in gain else float(np.mean(gain))}


def planted_checks(per_seed: dict[int, dict], agg: dict) -> dict[str, Any]:
    """The issue's four targets, decided from the collected numbers."""
    seeds = sorted(per_seed)
    first = [per_seed[s]["shuffle"]["psf"]["first"] for s in seeds]
    first_lo = [per_seed[s]["shuffle"]["psf"]["intervals"]["first"][0] for s in seeds]
    out: dict[str, Any] = {"shuffle_cost_first_ge_0.1": {
        "pass": all(lo >= TARGETS["shuffle_first_min"] for lo in first_lo), "per_seed": first,
        "interval_lows": first_lo, "note": "every seed's 95 % interval lies above 0.1 nats/token"}}
    c = agg["nll_comparisons"]["psf_content"]
    out["predictive_beats_content_by_8pct"] = {
        "pass": None if c is None else bool(c["gain_mean"] is not None and c["gain_mean"] >= TARGETS[
            "predictive_gain_min"] and c["interval"] is not None and c["interval"][1] < 0),
        "comparison": c, "note": "gain = the fraction of the content model's NLL excess over the floor that psf "
                                 "removes, mean over seeds; met when >= 0.08 and the t interval of the NLL "
                                 "difference lies below 0"}
    tf = agg["nll_comparisons"]["token_flow"]
    ratio = [per_seed[s]["models"]["psf"]["flops_per_sample"] / per_seed[s]["models"]["token_flow"]["flops_per_sample"]
             for s in seeds]
    out["psf_below_token_flow_at_tenth_flops"] = {
        "pass": None if tf is None else bool(tf["interval"] is not None and tf["interval"][1] < 0
                                             and max(ratio) <= TARGETS["flops_ratio_max"]),
        "comparison": tf, "flops_ratio": ratio,
        "nll_below": None if tf is None or tf["interval"] is None else tf["interval"][1] < 0,
        "flops_at_most_a_tenth": max(ratio) <= TARGETS["flops_ratio_max"]}
    # the mean trajectory's topic persistence: at the references' entropy where both sweeps bracket it in every
    # seed, else at psf's sweep point nearest it (the same sampling settings for both)
    d = agg["differences"]["psf - psf_mean_trajectory"]
    if d["persistence_at_matched_entropy"] is not None:
        basis, m = "the references' entropy", d["persistence_at_matched_entropy"]
    else:
        at_point = [per_seed[s]["psf_minus"]["psf_mean_trajectory"].get("persistence_at_psf_point") for s in seeds]
        basis = "psf's sweep point nearest the references' entropy"
        m = None if None in at_point else {"diffs": at_point, "mean_diff": float(np.mean(at_point)),
                                           "interval": t_interval(at_point) if len(at_point) > 1 else None}
    out["mean_trajectory_worse_on_persistence"] = {
        "pass": bool(m is not None and m["interval"] is not None and m["interval"][0] > 0), "basis": basis,
        "psf_minus_mean_trajectory": m,
        "per_seed_bootstrap_at_psf_point": [per_seed[s]["psf_minus"]["psf_mean_trajectory"].get(
            "persistence_interval") for s in seeds],
        "note": "met when the seed-paired t interval of psf - mean trajectory lies above 0"}
    return out


def planted_per_seed(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[int, dict]:
    """:func:`seed_summary` of every finished run, by its seed (the run's ``eval/results`` and the diagnoses of
    psf and psf_content)."""
    per_seed = {}
    for run, rec in records.items():
        diags = {name: rec[key] for name, key in (("psf", "diagnose"), ("psf_content", "psf_content/diagnose"))
                 if key in rec}
        per_seed[collected["runs"][run]["seed"]] = seed_summary(rec["eval/results"], diags)
    return dict(sorted(per_seed.items()))


def planted(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """derive of the psf_planted specs: the floor, each model's means over seeds (exact NLL at matched entropy and
    its excess over the floor, persistence, FLOPs), psf − each other model in NLL (:func:`nll_comparison`) and the
    four checks (None with one seed, as the script's)."""
    per_seed = planted_per_seed(records, collected)
    agg = over_seeds(per_seed)
    keys = ("nll_at_matched_entropy", "excess_over_floor", "persistence_at_matched_entropy", "persistence_near",
            "flops_per_sample")
    checks = planted_checks(per_seed, agg) if len(per_seed) > 1 else None
    return {"floor": per_seed[min(per_seed)]["floor"], "seeds": agg["seeds"],
            "models": {m: {k: (v[k] or {}).get("mean") for k in keys} for m, v in agg["models"].items()},
            "nll_comparisons": {o: None if c is None else {k: c[k] for k in ("basis", "mean", "interval", "gain_mean")}
                                for o, c in agg["nll_comparisons"].items()},
            "shuffle_first": {name: s["first"]["mean"] for name, s in agg["shuffle"].items()},
            # a matched-entropy NLL below the floor is impossible for a model matching the references' diversity:
            # the seeds where it happens, per model (those comparisons are invalid; temperature 1's stand)
            "below_floor": {m: [s for s in agg["seeds"] if (per_seed[s]["models"][m]["excess_over_floor"] or 0) < 0]
                            for m in agg["models"]},
            "checks": checks,
            # each check's verdict under a name without dots, for the spec's checks (derived.verdicts.<name>)
            "verdicts": {k.replace(".", "_"): v["pass"] for k, v in (checks or {}).items()}}


# ---- prompted continuations (psf_prompted): each method minus replacement, paired by seed ------------------------

PROMPTED_SCORES = ("junction", "nll", "persistence")  # the spec's measure prefixes: <score>_<method>
PROMPTED_METHODS = ("conditioned", "conditioned_no_replace", "true")  # each against replace


def prompted(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """The psf_prompted spec's derive: per prompt length (run group ``prompted-m=<m>``), method and score, the
    method minus ``replace`` paired by seed (the seeds both have: their per-seed differences, mean, std and the
    Student-t 95 % interval of the mean), as the script's over-seed table had it. Reads the collected measures."""
    del records  # every number is a measure already
    out: dict[str, Any] = {}
    for group, g in collected["groups"].items():
        if "m" not in g["settings"]:
            continue
        by_seed = {r["seed"]: r["measures"] for r in collected["runs"].values() if r["group"] == group}
        rows: dict[str, Any] = {}
        for method in PROMPTED_METHODS:
            for score in PROMPTED_SCORES:
                a, b = f"{score}_{method}", f"{score}_replace"
                both = {s: m for s, m in by_seed.items() if a in m and b in m}
                if both:
                    rows.setdefault(f"{method} − replace", {})[score] = seed_paired(
                        {s: m[a] for s, m in both.items()}, {s: m[b] for s, m in both.items()})
        out[f"m={g['settings']['m']}"] = rows
    return {"differences": out}
