"""The myopia language-model comparison from per-seed losses: the gap, the paper's local-myopic bonus, and the
gap relative to what context buys. Plain arithmetic on ``{variant: {seed: loss}}`` (variants as ``myopia lm``
names them: vanilla, detach_hidden (myopic), local, zero_past (the transformer bigram)); imports no system."""

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
