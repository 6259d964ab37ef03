"""PSF's two configurations with realization codes on the planted corpus, over training seeds: what one seed's
``psf recipe`` + ``psf diagnose`` + ``psf eval`` say (:func:`seed_record`), and the seeds together — each
measure's mean and interval, the seed-paired comparisons, the targets (:func:`summarize`).

*main* = the code-trained decoder on states + codes drawn jointly by the prior (``psf``); *state-only* = the same
decoder, a prior over the states only, zero codes (``psf_state_only``). A code is its block's own posterior (a
content channel), so the codes' information is reported beside every comparison that involves them.

Pure functions of the run files' JSON; no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.experiments.stats import over_seeds, seed_paired

# The targets of the code channel on the planted corpus (exact judge): name -> (direction, level, what).
TARGETS: dict[str, tuple[str, float, str]] = {
    "zeroing_cost": (">=", 0.1, "teacher-forced CE with zero codes minus with posterior-mean codes, nats/token"),
    "clean_topic_agreement": (">=", 0.75, "documents decoded from clean states + posterior-mean codes: topic "
                                          "agreement with the source block"),
    "clean_persistence": (">=", 0.70, "the same documents' topic persistence"),
    "prior_persistence": (">=", 0.60, "documents from prior samples (states + codes drawn jointly), temperature 1: "
                                      "topic persistence"),
    "prior_nll": ("<=", 3.25, "the same documents' exact NLL/token"),
}

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


def check(key: str, summary: Mapping[str, Any], records: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One target against the seeds: met when the mean over seeds is on the target's side; for the zeroing cost
    also every seed's own 95 % interval (bootstrap over documents) must lie above the level."""
    direction, level, what = TARGETS[key]
    mean = summary["mean"]
    met = mean >= level if direction == ">=" else mean <= level
    out = {"target": f"{direction} {level}", "what": what, "mean": mean, "per_seed": summary["per_seed"],
           "ci95_of_mean": summary["ci95_of_mean"], "pass": met}
    if key == "zeroing_cost":
        lows = [records[s]["zeroing_cost_interval"][0] for s in summary["seeds"]]
        out["interval_lows"], out["pass"] = lows, met and all(lo >= level for lo in lows)
    return out


def summarize(records: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Every numeric measure over seeds (:func:`over_seeds`), main − state-only paired by seed, the targets."""
    keys = [k for k, v in next(iter(records.values())).items() if isinstance(v, (int, float)) and not
            isinstance(v, bool)]
    measures = {k: over_seeds(v) for k in keys if (v := _values(records, k))}
    comparisons = {}
    for name, (a, b) in PAIRS.items():
        va, vb = _values(records, a), _values(records, b)
        if set(va) & set(vb):
            comparisons[f"main - state-only: {name}"] = seed_paired(va, vb)
    targets = {k: check(k, measures[k], records) for k in TARGETS if k in measures}
    return {"seeds": sorted(records), "measures": measures, "comparisons": comparisons, "targets": targets}


# What a prior arm changes (the decoder is the main run's): the main prior's documents and its flow loss.
PRIOR_MEASURES = ("prior_persistence", "prior_nll", "mean_trajectory_persistence", "prior_val_flow_loss")
# What a decoder arm changes (the codes stage, then the main prior on it): the code channel and both decodes.
DECODER_MEASURES = ("zeroing_cost", "clean_topic_agreement", "clean_persistence", "clean_nll", "prior_persistence",
                    "prior_nll")


def arm_summary(arm: Mapping[int, Mapping[str, Any]], reference: Mapping[int, Mapping[str, Any]],
                      measures: tuple[str, ...] = PRIOR_MEASURES) -> dict[str, Any]:
    """An arm's ``measures`` over its seeds and, paired by seed, arm − reference (a prior arm: the same decoder,
    the reference arm's prior; a decoder arm: the main runs). The flow losses of priors with different code data
    (draws vs means) measure different distributions: their difference is listed, not a verdict."""
    out: dict[str, Any] = {"seeds": sorted(arm), "measures": {}, "minus_reference": {}}
    for key in measures:
        va, vr = _values(arm, key), _values(reference, key)
        if va:
            out["measures"][key] = over_seeds(va)
        if set(va) & set(vr) and arm is not reference:
            out["minus_reference"][key] = seed_paired(va, vr)
    return out
