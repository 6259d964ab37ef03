"""Evaluation that cannot flatter: sweeps densified by bisection until a point lies within the tolerance of the
target entropy, the interpolation error inside the matched-entropy interval, and the planted corpus's
matched-entropy NLL flagged where it falls below the entropy floor (pure functions and synthetic score sets)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from forethought.eval.curves import interpolation_error, next_knob_value, ppl_at_entropy
from forethought.psf.config import EvalConfig
from forethought.psf.eval_models import Candidate, Knob
from forethought.psf.evaluate import score_models
from forethought.psf.scores import Scores


def categorical_entropy(temperature: float) -> float:
    """The entropy (nats) of softmax(logits / T) of fixed logits: continuous and increasing in T."""
    logits = torch.linspace(0, 6, 50, dtype=torch.float64)
    p = torch.softmax(logits / temperature, 0)
    return float(-(p * p.log()).sum())


def densify(entropy_of, start_points: list[float], target: float, tol: float, increasing: bool, low: float,
            high: float, budget: int = 40) -> list[tuple[float, float]]:
    pts = [(k, entropy_of(k)) for k in start_points]
    for _ in range(budget):
        v = next_knob_value(pts, target, tol, increasing, low, high)
        if v is None:
            break
        pts.append((v, entropy_of(v)))
    return pts


@pytest.mark.parametrize("target", [1.5, 2.9, 3.6, 3.9])
def test_bisection_reaches_the_tolerance_for_a_monotone_entropy(target):
    # a sweep that brackets the target only across a wide gap, or not at all: every target in reach is met
    pts = densify(categorical_entropy, [0.5, 4.0], target, 0.05, True, 0.05, 5.0)
    assert min(abs(e - target) for _, e in pts) <= 0.05
    # bracketed, so the value is interpolated, unless the knob's bound stops it (3.9 lies above every entropy)
    assert min(e for _, e in pts) <= target <= max(e for _, e in pts) or max(k for k, _ in pts) == 5.0
    assert len(pts) <= 2 + 12  # bisection halves the bracket: a handful of points, not a grid


def test_bisection_halves_the_bracket_at_every_step():
    target, tol = 3.0, 1e-9  # a tolerance never met: watch the bracket shrink
    pts = [(0.5, categorical_entropy(0.5)), (4.0, categorical_entropy(4.0))]
    width = 3.5
    for _ in range(10):
        v = next_knob_value(pts, target, tol, True, 0.05, 5.0)
        pts.append((v, categorical_entropy(v)))
        s = sorted(pts)
        lo = max(k for k, e in s if e < target)
        hi = min(k for k, e in s if e > target)
        assert hi - lo == pytest.approx(width / 2)  # the bracket holds the crossing and halves
        width /= 2


def test_expansion_finds_a_bracket_in_the_right_direction_and_stops_at_the_bound():
    # one point above the target with an increasing knob: step down; a decreasing knob: step up
    assert next_knob_value([(1.0, 3.0)], 2.0, 0.05, True, 0.05, 5.0) == pytest.approx(1 / 1.5)
    assert next_knob_value([(1.0, 3.0)], 2.0, 0.05, False, 0.05, 5.0) == pytest.approx(1.5)
    # two points decide the direction from the data, whatever the prior says
    assert next_knob_value([(1.0, 3.0), (2.0, 3.5)], 2.0, 0.05, False, 0.05, 5.0) == pytest.approx(1 / 1.5)
    # a noise knob at 0 steps up from zero; a target out of reach ends at the bound
    assert next_knob_value([(0.0, 3.0)], 2.0, 0.05, False, 0.0, 4.0) == pytest.approx(0.5)
    pts = densify(categorical_entropy, [1.0], 10.0, 0.05, True, 0.05, 5.0)
    assert max(k for k, _ in pts) == 5.0 and next_knob_value(pts, 10.0, 0.05, True, 0.05, 5.0) is None
    # done when a point lies within the tolerance and the points bracket the target (an interpolation, never an
    # extrapolation); a near point alone steps outward to the other side; the first point of an empty sweep is
    # the start
    assert next_knob_value([(1.0, 2.04), (0.5, 1.2)], 2.0, 0.05, True, 0.05, 5.0) is None
    assert next_knob_value([(1.0, 2.04)], 2.0, 0.05, True, 0.05, 5.0) == pytest.approx(1 / 1.5)
    assert next_knob_value([(1.0, 2.0)], 2.0, 0.05, True, 0.05, 5.0) is None  # exactly on the target
    assert next_knob_value([], 2.0, 0.05, True, 0.05, 5.0, start=0.7) == 0.7


def test_interpolation_error_is_exact_for_a_quadratic_log_curve_and_zero_for_a_line():
    line = [(e, math.exp(1 + 0.5 * e)) for e in (3.0, 4.0, 5.0)]
    assert interpolation_error(line, 4.3) == pytest.approx(0.0, abs=1e-12)
    quad = [(e, math.exp((e - 4) ** 2)) for e in (3.0, 4.0, 5.0)]  # convex in log gen-PPL
    lin = math.log(ppl_at_entropy(quad, 4.5))
    assert interpolation_error(quad, 4.5) == pytest.approx(lin - 0.25)  # |linear - truth|: 0.5 - 0.25
    assert interpolation_error(quad, 6.0) is None  # not bracketed
    # densified (a point 0.01 from the target) the same curve leaves a far smaller error
    dense = [*quad, (4.49, math.exp(0.49 ** 2))]
    assert interpolation_error(dense, 4.5) < 0.02 * interpolation_error(quad, 4.5)


def synthetic(nll_per_token: list[float], entropy: list[float], n: int = 40, seed: int = 0) -> list[Scores]:
    """One Scores set per sweep point, n samples of 10 tokens each, spread around the given means."""
    rng = np.random.default_rng(seed)
    out = []
    for nll, ent in zip(nll_per_token, entropy, strict=True):
        out.append(Scores((nll + 0.05 * rng.standard_normal(n)) * 10, np.full(n, 10),
                          ent + 0.02 * rng.standard_normal(n), {2: np.zeros(n)},
                          {"persistence": rng.uniform(0.4, 0.6, n)}, None))
    return out


def candidate(name: str) -> Candidate:
    points = [{"temperature": 1.0, "top_p": 1.0}, {"temperature": 0.7, "top_p": 1.0}]
    return Candidate(name, "psf" if name == "psf" else "ar", Path("."), points, lambda *a: torch.zeros(0), points[0],
                     [], 0, 0, {}, knob=Knob("temperature", {"top_p": 1.0}, 0.05, 5.0, True, 1.0))


def test_matched_entropy_below_the_floor_is_flagged_and_the_interval_carries_the_interpolation():
    cfg = EvalConfig(recipe_run="x", n_boot=200, sweep=[[1.0, 1.0], [0.7, 1.0]])
    cands = {"psf": candidate("psf"), "ar": candidate("ar")}
    # psf: NLL below the floor (2.5) at the target's entropy; ar above it
    scores = {"psf": synthetic([2.2, 1.8], [3.3, 2.7]), "ar": synthetic([3.4, 3.0], [3.3, 2.7], seed=1)}
    sets = {k: [([], ["x"]), ([], ["y"])] for k in cands}
    refs = synthetic([3.0], [3.0], seed=2)[0]
    rows, diffs, target, _ = score_models(cands, sets, scores, refs, cfg, use_mauve=False, floor=2.5)
    psf, ar = rows["psf"]["matched_entropy"], rows["ar"]["matched_entropy"]
    assert psf["nll_per_token"] < 2.5 and psf["below_floor"] and psf["valid"] is False
    assert ar["nll_per_token"] > 2.5 and ar["valid"] is True
    d = diffs["psf - ar"]
    assert d["matched_entropy"]["valid"] is False and "floor" in d["matched_entropy"]["invalid_reason"]
    # at temperature 1: NLL and persistence differences with intervals
    t1 = d["at_temperature_1"]
    assert t1["nll_per_token"]["diff"] == pytest.approx(
        rows["psf"]["sweep"][0]["nll_per_token"] - rows["ar"]["sweep"][0]["nll_per_token"])
    assert "persistence" in t1 and t1["persistence"]["interval"][0] <= t1["persistence"]["diff"]
    # two points only: the interpolation error is the crude bound (the nearest point's distance), > 0, and the
    # reported interval contains the sampling-only one
    for m in (psf, ar):
        err = m["interpolation_error_nats"]
        assert err > 0
        lo, hi = m["interval"]
        slo, shi = m["interval_sampling_only"]
        assert lo == pytest.approx(slo * math.exp(-err)) and hi == pytest.approx(shi * math.exp(err))
    me = d["matched_entropy"]
    assert me["interpolation_error_nats"] == pytest.approx(psf["interpolation_error_nats"]
                                                           + ar["interpolation_error_nats"])
    # without a floor (a text corpus) nothing is flagged
    rows, diffs, _, _ = score_models(cands, sets, scores, refs, cfg, use_mauve=False)
    assert "valid" not in rows["psf"]["matched_entropy"] and "valid" not in diffs["psf - ar"]["matched_entropy"]


def test_a_fixed_target_entropy_is_matched_without_the_references_uncertainty():
    cands = {"psf": candidate("psf"), "ar": candidate("ar")}
    scores = {"psf": synthetic([3.4, 3.0], [3.3, 2.7]), "ar": synthetic([3.6, 3.1], [3.3, 2.7], seed=1)}
    sets = {k: [([], ["x"]), ([], ["y"])] for k in cands}
    refs = synthetic([3.0], [3.0], seed=2)[0]
    base = dict(recipe_run="x", n_boot=200, sweep=[[1.0, 1.0], [0.7, 1.0]])
    rows_r, _, target_r, _ = score_models(cands, sets, scores, refs, EvalConfig(**base), use_mauve=False)
    e0, e1 = (rows_r["psf"]["sweep"][i]["entropy"] for i in (0, 1))
    fixed = 0.25 * e0 + 0.75 * e1  # inside both sweeps, away from the references' 3.0
    rows_f, _, target_f, _ = score_models(cands, sets, scores, refs, EvalConfig(**base, target_entropy=fixed),
                                          use_mauve=False)
    assert target_r["source"] == "references" and target_r["interval"][0] < target_r["interval"][1]
    assert target_f == {"value": fixed, "interval": [fixed, fixed], "source": "fixed"}
    for name in cands:  # the curve is read at the fixed value, and every draw brackets it
        curve = [(p["entropy"], p["gen_ppl"]) for p in rows_f[name]["sweep"]]
        assert rows_f[name]["gen_ppl_at_matched_entropy"] == pytest.approx(ppl_at_entropy(curve, fixed))
    assert rows_f["psf"]["gen_ppl_at_matched_entropy"] != pytest.approx(rows_r["psf"]["gen_ppl_at_matched_entropy"])
