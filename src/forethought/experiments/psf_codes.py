"""What the ``psf_codes`` spec's tables cannot say (its ``derive``, :func:`derive`): PSF's two configurations with
realization codes on the planted corpus, paired *within* each run and by seed.

*main* = the code-trained decoder on states + codes drawn jointly by the prior (``psf``); *state-only* = the same
decoder, a prior over the states only, zero codes (``psf_state_only``). Both priors train in the same run, so main
− state-only is a difference of two measures of one run (the spec's comparisons are between run groups). A code is
its block's own posterior (a content channel), so the codes' information is reported beside every comparison that
involves them. :func:`seed_record` reads one run's measures from its recipe ``results.json``, ``diagnose.json`` and
``psf eval`` results (the spec's measures are the same values by dotted path, except the persistence at the eval's
reported point, which needs the sweep searched).

Pure functions of the run files' JSON; no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.experiments.stats import over_seeds, seed_paired

# Measures compared between the two configurations (main - state-only), paired by seed.
PAIRS: dict[str, tuple[str, str]] = {
    "persistence, temperature 1": ("prior_persistence", "state_only_persistence"),
    "NLL/token, temperature 1": ("prior_nll", "state_only_nll"),
    "NLL/token at matched entropy": ("psf_nll_matched", "state_only_nll_matched"),
    "persistence at the matched-entropy point": ("psf_persistence_matched", "state_only_persistence_matched"),
}


def _decoded(decoding: Mapping[str, Any], source: str, key: str) -> float | None:
    d = decoding.get(source)
    if not isinstance(d, Mapping) or key not in d:
        return None
    v = d[key]
    return v["mean"] if isinstance(v, Mapping) else v


def _matched(evaluation: Mapping[str, Any] | None, model: str) -> tuple[float | None, float | None]:
    """``model``'s NLL/token at the references' entropy and the persistence of its reported sweep point."""
    if evaluation is None or model not in evaluation.get("models", {}):
        return None, None
    row = evaluation["models"][model]
    nll = row["matched_entropy"].get("nll_per_token")
    point = row.get("reported_point") or {}
    pers = next((p.get("persistence") for p in row["sweep"]
                 if p["temperature"] == point.get("temperature") and p["top_p"] == point.get("top_p")), None)
    return nll, pers


def seed_record(results: Mapping[str, Any], diagnose: Mapping[str, Any],
                evaluation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One seed's measures from its recipe ``results.json``, ``diagnose.json`` and (optional) ``psf eval``
    results.json. Missing parts (no state-only prior, no evaluation) are None."""
    codes, dec = diagnose["codes"], diagnose["decoding"]
    z, topics = codes["zeroing_cost"]["all"], codes["topics"]
    stages = results["stages"]
    psf_nll, psf_pers = _matched(evaluation, "psf")
    so_nll, so_pers = _matched(evaluation, "psf_state_only")
    agreement = (dec.get("clean") or {}).get("topic_agreement") or {}
    zero_agreement = (dec.get("clean_zero_codes") or {}).get("topic_agreement") or {}
    return {
        "zeroing_cost": z["diff"], "zeroing_cost_interval": z["interval"],
        "kl_per_token": codes["usage"]["kl_per_token"], "active_units": codes["usage"]["active_units"],
        "information_code_given_state": topics.get("information_code_given_state"),
        "information_code_mean": topics.get("information_code_mean"),
        "information_state": topics.get("information_state"),
        "clean_topic_agreement": agreement.get("same_source"),
        "clean_zero_codes_topic_agreement": zero_agreement.get("same_source"),
        "clean_persistence": _decoded(dec, "clean", "persistence"),
        "clean_zero_codes_persistence": _decoded(dec, "clean_zero_codes", "persistence"),
        "clean_nll": _decoded(dec, "clean", "true_nll"),
        "data_persistence": _decoded(dec, "data", "persistence"),
        "prior_persistence": _decoded(dec, "prior", "persistence"),
        "prior_nll": _decoded(dec, "prior", "true_nll"),
        "mean_trajectory_persistence": _decoded(dec, "mean", "persistence"),
        "state_only_persistence": _decoded(dec, "prior_state_only", "persistence"),
        "state_only_nll": _decoded(dec, "prior_state_only", "true_nll"),
        "psf_nll_matched": psf_nll, "psf_persistence_matched": psf_pers,
        "state_only_nll_matched": so_nll, "state_only_persistence_matched": so_pers,
        "prior_val_flow_loss": (stages.get("prior") or {}).get("val_flow_loss"),
        "state_only_prior_val_flow_loss": (stages.get("prior_state_only") or {}).get("val_flow_loss"),
        "train_wall_s": {k: v.get("train_wall_s") for k, v in stages.items()},
    }


def _values(records: Mapping[int, Mapping[str, Any]], key: str) -> dict[int, float]:
    return {s: float(r[key]) for s, r in records.items() if r.get(key) is not None}


def _per_seed_runs(collected: Mapping[str, Any]) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for run, r in collected["runs"].items():
        out.setdefault(r["group"], {})[r["seed"]] = run
    return out


def derive(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """``{"main_minus_state_only": {group: {pair: seed-paired difference}}, "matched_point_persistence": {group:
    {psf | psf_state_only: over seeds}}, "zeroing_cost_interval_lows": {group: {seed: low}},
    "lowest_zeroing_cost_interval_low": {group: min}}``: for every run group that trained both priors (the
    ``PAIRS``, main − state-only paired by seed), the persistence at the eval's reported point (where it ran ``psf
    eval``), and each seed's own 95 % bootstrap interval of the zeroing cost (over documents), whose lowest end the
    spec's target reads."""
    out: dict[str, Any] = {"main_minus_state_only": {}, "matched_point_persistence": {},
                           "zeroing_cost_interval_lows": {}, "lowest_zeroing_cost_interval_low": {}}
    for group, runs in _per_seed_runs(collected).items():
        seeds = {s: seed_record(records[r]["results"], records[r]["diagnose"], records[r].get("eval/results"))
                 for s, r in sorted(runs.items())}
        pairs = {}
        for name, (a, b) in PAIRS.items():
            va, vb = _values(seeds, a), _values(seeds, b)
            if set(va) & set(vb):
                pairs[name] = seed_paired(va, vb)
        if pairs:
            out["main_minus_state_only"][group] = pairs
        matched = {m: over_seeds(v) for m, k in (("psf", "psf_persistence_matched"),
                                                 ("psf_state_only", "state_only_persistence_matched"))
                   if (v := _values(seeds, k))}
        if matched:
            out["matched_point_persistence"][group] = matched
        lows = {str(s): r["zeroing_cost_interval"][0] for s, r in seeds.items()}
        out["zeroing_cost_interval_lows"][group] = lows
        out["lowest_zeroing_cost_interval_low"][group] = min(lows.values())
    return out
