"""What the ``psf_trade`` spec's comparisons cannot say (its ``derive``, :func:`derive`): the paper's trade between
its two configurations, measured both ways on one decoder per seed.

*main* = the code-trained decoder on states + codes drawn jointly by the prior; *state-only* = the same decoder,
a prior over the states only, zero codes (an input the decoder trained on, with code dropout). Both priors train in
the same run, so state-only − main is a difference of two measures of one run, paired by seed (the spec's
comparisons are between run groups). Pure functions of the collected JSON; no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.experiments.stats import seed_paired

# state-only − main, each a pair of the spec's measures (state-only's, main's), paired by seed
PAIRS: dict[str, tuple[str, str]] = {
    "NLL/token, temperature 1": ("state_only_nll", "prior_nll"),
    "persistence, temperature 1": ("state_only_persistence", "prior_persistence"),
}


def per_seed(collected: Mapping[str, Any], group: str, measure: str) -> dict[int, float]:
    """``{seed: value}`` of one measure of one run group of the collected results (empty when not measured)."""
    m = collected["groups"].get(group, {}).get("measures", {}).get(measure)
    return dict(zip(m["seeds"], m["per_seed"], strict=True)) if m else {}


def derive(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """``{"state_only_minus_main": {pair: seed-paired difference}}`` for the ``trade`` group: the :data:`PAIRS`,
    whatever their sign (lower NLL and lower persistence for the state-only configuration is the paper's trade)."""
    del records  # the measures are in the collected groups
    out: dict[str, Any] = {}
    for name, (a, b) in PAIRS.items():
        va, vb = per_seed(collected, "trade", a), per_seed(collected, "trade", b)
        if set(va) & set(vb):
            out[name] = seed_paired(va, vb)
    return {"state_only_minus_main": out}
