"""The myopia_scaling spec's derive: the myopia gap (myopic − vanilla, each seed's two models trained from the same
weights on the same batches) against model size, beside the paper's Pythia numbers. Pure functions of the
collected JSON; imports no system."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Wu et al. 2024, pretrained Pythia fine-tuned on 10M × 64-token Pile sequences: validation losses (nats) by
# parameter count (the reference's pythia_myopic_data notebook).
PAPER_PYTHIA = {"14m": (1.4e7, 4.11, 4.27), "31m": (3.1e7, 3.73, 3.84), "70m": (7.0e7, 3.44, 3.48),
                "160m": (1.6e8, 3.03, 3.13), "410m": (4.1e8, 2.74, 2.89), "1b": (1.0e9, 2.62, 2.78),
                "1.4b": (1.4e9, 2.54, 2.71), "2.8b": (2.8e9, 2.44, 2.67)}


def paper_gaps() -> dict[str, dict[str, float]]:
    """The paper's row per Pythia size: parameters, vanilla and myopic loss, gap."""
    return {size: {"params": p, "vanilla": v, "myopic": m, "gap": round(m - v, 4)}
            for size, (p, v, m) in PAPER_PYTHIA.items()}


def gap_by_size(collected: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per run group that measured a gap, smallest model first: parameters, the seeds' mean vanilla and
    myopic losses, the gap's mean and its 95 % interval over seeds (each seed's gap is a paired difference)."""
    rows = []
    for group, g in collected["groups"].items():
        m = g["measures"]
        if "gap" not in m:
            continue
        rows.append({"group": group, "params": m["params"]["mean"] if "params" in m else None,
                     "vanilla": m["vanilla"]["mean"], "myopic": m["myopic"]["mean"], "gap": m["gap"]["mean"],
                     "gap_ci95": m["gap"].get("ci95_of_mean"), "seeds": m["gap"]["seeds"]})
    return sorted(rows, key=lambda r: (r["params"] is None, r["params"] or 0))


def scaling(records: Mapping[str, Mapping[str, Any]], collected: Mapping[str, Any]) -> dict[str, Any]:
    """``derived``: the gap per size (:func:`gap_by_size`), whether it grows with size over the sizes measured
    (each larger model's mean gap above the next smaller one's), and the paper's Pythia row."""
    rows = gap_by_size(collected)
    gaps = [r["gap"] for r in rows]
    grows = all(b > a for a, b in zip(gaps, gaps[1:], strict=False)) if rows else None
    return {"by_size": rows, "gap_grows_with_size": grows, "paper_pythia": paper_gaps()}
