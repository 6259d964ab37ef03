"""forethought.eval.stats: McNemar's exact test, the paired bootstrap, seed-mean differences, Student-t intervals,
each checked against hand-computed (or exactly enumerated) cases."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from forethought.eval import stats
from forethought.eval.stats import (
    accuracy,
    mcnemar_exact,
    mse,
    paired_bootstrap,
    pearson,
    seed_mean_difference,
    t_interval,
)

# Student-t quantiles from their closed forms (50-digit values: 4.3026527297494638523..., 12.706204736174704646...,
# 2.9199855803537256...). df = 2: (2q - 1) / sqrt(2q(1 - q)); df = 1: tan(pi (q - 1/2)).
T_975_2 = 38 / math.sqrt(78)  # t_{0.975, 2}; q = 39/40 in the df = 2 form
T_975_1 = 12.706204736174705  # t_{0.975, 1} = cot(pi / 40)
T_95_2 = 0.9 / math.sqrt(0.095)  # t_{0.95, 2}


def pairs(b: int, c: int, both: int = 0, neither: int = 0) -> tuple[list[bool], list[bool]]:
    """Correctness lists with b (A right, B wrong), c (A wrong, B right) and concordant pairs."""
    a = [True] * b + [False] * c + [True] * both + [False] * neither
    bb = [False] * b + [True] * c + [True] * both + [False] * neither
    return a, bb


# ---------------------------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize("b, c, p", [
    (3, 0, 0.25),  # 2 * (1/2)^3
    (0, 3, 0.25),
    (1, 1, 1.0),  # 2 * P[X <= 1 | m=2] = 2 * 3/4, capped
    (10, 2, 2 * 79 / 4096),  # 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12 = 0.0385742...
    (5, 5, 1.0),
    (4, 1, 2 * 6 / 32),  # 2 * (1 + 5) / 2^5 = 0.375
    (0, 0, 1.0),  # no discordant pairs
    (1000, 0, 2.0 ** -999),  # exactly representable, far below any cancellation-prone tail sum
])
def test_mcnemar_hand_computed(b: int, c: int, p: float) -> None:
    a, bb = pairs(b, c, both=7, neither=4)
    r = mcnemar_exact(a, bb)
    assert r == {"n": b + c + 11, "b": b, "c": c, "p_value": p}


def test_mcnemar_underflow_is_zero_not_nan() -> None:
    r = mcnemar_exact(*pairs(2000, 0))
    assert r["p_value"] == 0.0


def test_mcnemar_is_symmetric_and_ignores_concordant_pairs() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(500) < 0.7, rng.random(500) < 0.6
    ab, ba = mcnemar_exact(a, b), mcnemar_exact(b, a)
    assert (ab["b"], ab["c"]) == (ba["c"], ba["b"])
    assert ab["p_value"] == ba["p_value"]
    # same discordant counts, different concordant ones: same p
    assert mcnemar_exact(*pairs(ab["b"], ab["c"]))["p_value"] == ab["p_value"]


def test_mcnemar_large_case_matches_exact_rational() -> None:
    b, c = 5_400, 4_600
    m = b + c
    total, term = 0, 1
    for i in range(c + 1):  # every term, smallest first (the module sums from the largest and stops early)
        total += term
        term = term * (m - i) // (i + 1)
    direct = float(Fraction(2 * total, 2 ** m))
    assert 1e-20 < direct < 1e-10
    assert mcnemar_exact(*pairs(b, c))["p_value"] == pytest.approx(direct, rel=1e-15)


def test_mcnemar_very_large_case_matches_log_gamma_sum() -> None:
    b, c = 50_300, 49_700
    m = b + c
    i = np.arange(c + 1, dtype=np.float64)
    log_pmf = (math.lgamma(m + 1) - np.array([math.lgamma(k + 1) + math.lgamma(m - k + 1) for k in i])
               - m * math.log(2))
    top = log_pmf.max()
    direct = 2 * math.exp(top) * float(np.exp(log_pmf - top).sum())
    p = mcnemar_exact(np.array(pairs(b, c)[0]), np.array(pairs(b, c)[1]))["p_value"]
    assert 0.05 < p < 0.07  # z = 600 / sqrt(1e5) = 1.90
    assert p == pytest.approx(direct, rel=1e-8)  # the log-gamma route itself is good to ~1e-10


def test_mcnemar_accepts_zero_one_and_rejects_bad_input() -> None:
    assert mcnemar_exact([1, 1, 1, 0], [0, 0, 0, 0])["p_value"] == 0.25
    assert mcnemar_exact(np.array([1.0, 0.0]), np.array([0.0, 0.0]))["b"] == 1
    with pytest.raises(ValueError, match="correctness"):
        mcnemar_exact([0, 2, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="correctness"):
        mcnemar_exact([0.5, 1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="correctness"):
        mcnemar_exact(["yes", "no"], [True, False])
    with pytest.raises(ValueError, match="equal lengths"):
        mcnemar_exact([True, False], [True])
    with pytest.raises(ValueError, match="empty"):
        mcnemar_exact([], [])
    with pytest.raises(ValueError, match="one-dimensional"):
        mcnemar_exact([[True]], [[False]])


# ---------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_identical_methods_give_exactly_zero() -> None:
    rng = np.random.default_rng(0)
    correct = rng.random(200) < 0.6
    r = paired_bootstrap("accuracy", correct, correct.copy(), n_boot=2000)
    assert r["observed"] == 0.0 and r["interval"] == (0.0, 0.0) and r["n_dropped"] == 0
    preds, targets = rng.normal(size=50), rng.normal(size=50)
    for name in ("mse", "pearson"):
        r = paired_bootstrap(name, preds, preds.copy(), targets, n_boot=1000)
        assert r["observed"] == 0.0 and r["interval"] == (0.0, 0.0)


def test_bootstrap_all_right_vs_all_wrong() -> None:
    r = paired_bootstrap("accuracy", [True] * 30, [False] * 30, n_boot=1000)
    assert r["metric_a"] == 1.0 and r["metric_b"] == 0.0
    assert r["observed"] == 1.0 and r["interval"] == (1.0, 1.0)
    # the same through predictions + targets
    labels = np.arange(30) % 3
    r = paired_bootstrap("accuracy", labels, (labels + 1) % 3, labels, n_boot=1000)
    assert r["observed"] == 1.0 and r["interval"] == (1.0, 1.0)


def test_bootstrap_two_examples_enumerated() -> None:
    # A right on example 0 only, B on neither: a resample's difference is the fraction of draws of example 0,
    # so the 4 equally likely resamples give 0 (1/4), 0.5 (1/2), 1 (1/4).
    r = paired_bootstrap("accuracy", [True, False], [False, False], n_boot=40_000, seed=1, level=0.4,
                         keep_distribution=True)
    d = r["distribution"]
    assert set(np.unique(d)) == {0.0, 0.5, 1.0}
    assert np.mean(d == 0.0) == pytest.approx(0.25, abs=0.01)
    assert np.mean(d == 0.5) == pytest.approx(0.5, abs=0.01)
    assert r["observed"] == 0.5
    assert r["interval"] == (0.5, 0.5)  # quantiles 0.3 and 0.7 both fall in the mass at 0.5
    r95 = paired_bootstrap("accuracy", [True, False], [False, False], n_boot=40_000, seed=1)
    assert r95["interval"] == (0.0, 1.0)


def test_bootstrap_three_examples_enumerated() -> None:
    # A right on 1 of 3 examples, B on none: difference = K/3, K ~ Binomial(3, 1/3):
    # P = 8/27, 12/27, 6/27, 1/27 at 0, 1/3, 2/3, 1; CDF 0.296, 0.741, 0.963, 1.
    a, b = [1, 0, 0], [0, 0, 0]
    r = paired_bootstrap("accuracy", a, b, n_boot=60_000, seed=2, level=0.8, keep_distribution=True)
    d = r["distribution"]
    for k, p in enumerate([8 / 27, 12 / 27, 6 / 27, 1 / 27]):
        assert np.mean(np.isclose(d, k / 3)) == pytest.approx(p, abs=0.006)
    assert r["interval"] == pytest.approx((0.0, 2 / 3), abs=1e-15)  # quantiles 0.1 and 0.9
    r95 = paired_bootstrap("accuracy", a, b, n_boot=60_000, seed=2)
    assert r95["interval"] == pytest.approx((0.0, 1.0), abs=1e-15)  # quantile 0.975 lies above the CDF 0.963


def test_bootstrap_is_deterministic_given_the_seed() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.random(300) < 0.7, rng.random(300) < 0.65
    r1 = paired_bootstrap("accuracy", a, b, n_boot=3000, seed=11, keep_distribution=True)
    r2 = paired_bootstrap("accuracy", a, b, n_boot=3000, seed=11, keep_distribution=True)
    r3 = paired_bootstrap("accuracy", a, b, n_boot=3000, seed=12, keep_distribution=True)
    d1 = r1.pop("distribution")
    assert np.array_equal(d1, r2.pop("distribution"))
    assert r1 == r2
    assert not np.array_equal(d1, r3.pop("distribution"))
    assert r3["interval"] != r1["interval"] and r3["seed"] == 12 and r3["observed"] == r1["observed"]


def test_bootstrap_observed_is_the_plain_metric_difference() -> None:
    rng = np.random.default_rng(7)
    n = 400
    labels = rng.integers(0, 4, n)
    pa = np.where(rng.random(n) < 0.7, labels, rng.integers(0, 4, n))
    pb = np.where(rng.random(n) < 0.5, labels, rng.integers(0, 4, n))
    r = paired_bootstrap("accuracy", pa, pb, labels, n_boot=200)
    assert r["observed"] == np.mean(pa == labels) - np.mean(pb == labels)
    y = rng.normal(size=n)
    xa, xb = y + rng.normal(scale=0.5, size=n), y + rng.normal(scale=1.0, size=n)
    r = paired_bootstrap("mse", xa, xb, y, n_boot=200)
    assert r["observed"] == pytest.approx(np.mean((xa - y) ** 2) - np.mean((xb - y) ** 2), rel=1e-12)
    r = paired_bootstrap("pearson", xa, xb, y, n_boot=200)
    assert r["metric_a"] == pytest.approx(np.corrcoef(xa, y)[0, 1], rel=1e-12)
    assert r["observed"] == pytest.approx(np.corrcoef(xa, y)[0, 1] - np.corrcoef(xb, y)[0, 1], rel=1e-12)
    assert r["interval"][0] < r["observed"] < r["interval"][1]


def test_bootstrap_mse_constructed() -> None:
    # A is off by 1 everywhere, B by 3: every resample has MSE 1 vs 9.
    y = np.linspace(-2.0, 5.0, 40)
    r = paired_bootstrap("mse", y + 1.0, y - 3.0, y, n_boot=1000)
    assert r["metric_a"] == 1.0 and r["metric_b"] == 9.0
    assert r["observed"] == -8.0 and r["interval"] == (-8.0, -8.0)
    # two examples, A's squared errors (4, 0), B's (0, 0): differences 4 * (fraction of draws of example 0)
    r = paired_bootstrap("mse", [2.0, 0.0], [0.0, 0.0], [0.0, 0.0], n_boot=40_000, seed=3, level=0.4)
    assert r["observed"] == 2.0 and r["interval"] == (2.0, 2.0)


def test_bootstrap_pearson_constructed_and_constant_resamples_dropped() -> None:
    # A is an increasing function of the targets (r = 1), B a decreasing one (r = -1): difference 2 on every
    # resample that is not constant; with 3 examples 3 of the 27 resamples draw one example only.
    y = np.array([0.0, 1.0, 3.0])
    r = paired_bootstrap("pearson", 2 * y + 1, -y, y, n_boot=27_000, seed=4, keep_distribution=True)
    assert r["observed"] == pytest.approx(2.0, abs=1e-14)
    assert r["interval"] == pytest.approx((2.0, 2.0), abs=1e-14)
    assert r["n_dropped"] == pytest.approx(27_000 / 9, rel=0.06)
    assert int(np.isnan(r["distribution"]).sum()) == r["n_dropped"]
    # a constant prediction has no correlation: everything dropped, nan interval
    r = paired_bootstrap("pearson", np.ones(3), -y, y, n_boot=100)
    assert math.isnan(r["observed"]) and r["n_dropped"] == 100
    assert all(math.isnan(v) for v in r["interval"])


def test_pearson_constant_rows_exactly() -> None:
    # 0.1 three times has a mean that is not exactly 0.1; the max == min check still says constant
    rows = np.array([[0.1, 0.1, 0.1], [0.1, 0.2, 0.4]])
    r = pearson(rows, np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]))
    assert math.isnan(r[0]) and r[1] == pytest.approx(np.corrcoef([0.1, 0.2, 0.4], [1, 2, 3])[0, 1], rel=1e-12)
    assert accuracy(np.array([[True, False], [True, True]])).tolist() == [0.5, 1.0]
    assert mse(np.array([1.0, 3.0]), np.array([0.0, 0.0])) == 5.0


def test_bootstrap_keeps_the_pairing_across_chunks() -> None:
    # B equals A except on 40 of 1000 examples, where B is right and A wrong: the paired standard error of the
    # difference is sqrt(var(a - b) / n) ~ 0.0062; resampling A and B independently would give ~0.02.
    # n = 1000 makes each chunk 2097 resamples, so 6000 resamples take three chunks.
    rng = np.random.default_rng(9)
    a = rng.random(1000) < 0.7
    b = a.copy()
    flip = np.flatnonzero(~a)[:40]
    b[flip] = True
    assert stats.CHUNK_ELEMENTS // 1000 < 6000
    r = paired_bootstrap("accuracy", a, b, n_boot=6000, seed=0, keep_distribution=True)
    d = a.astype(float) - b.astype(float)
    se = math.sqrt(d.var() / d.size)
    assert r["observed"] == pytest.approx(-0.04, abs=1e-15)
    assert np.mean(r["distribution"]) == pytest.approx(-0.04, abs=0.001)
    assert np.std(r["distribution"]) == pytest.approx(se, rel=0.05)
    low, high = r["interval"]
    assert low == pytest.approx(-0.04 - 1.96 * se, abs=0.0015) and high == pytest.approx(-0.04 + 1.96 * se, abs=0.0015)


def test_bootstrap_custom_metric() -> None:
    def mean_value(values: np.ndarray, targets: np.ndarray | None) -> np.ndarray:
        return np.asarray(values, dtype=float).mean(axis=-1)

    r = paired_bootstrap(mean_value, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], n_boot=100)
    assert r["metric"] == "mean_value" and r["interval"] == (0.0, 0.0)


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap("accuracy", [True, False], [True])
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap("mse", [1.0, 2.0], [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        paired_bootstrap("accuracy", [], [])
    with pytest.raises(ValueError, match="correctness"):
        paired_bootstrap("accuracy", [0.2, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap("accuracy", [True], [False], level=1.0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap("accuracy", [True], [False], level=0.0)
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap("accuracy", [True], [False], n_boot=0)
    with pytest.raises(ValueError, match="unknown metric"):
        paired_bootstrap("f1", [True], [False])
    with pytest.raises(TypeError, match="a name in"):
        paired_bootstrap(3, [True], [False])
    with pytest.raises(ValueError, match="needs targets"):
        paired_bootstrap("mse", [1.0], [2.0])
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap("mse", [1.0, math.nan], [2.0, 1.0], [0.0, 0.0])


# ---------------------------------------------------------------------------------------------- seeds, t


def test_seed_mean_difference_hand_computed() -> None:
    # a = 10, 12, 17 (mean 13, std sqrt 13); b = 7, 8, 10 (mean 25/3, std sqrt(7/3));
    # differences 3, 4, 7: mean 14/3, std sqrt(13/3); half width t_{0.975,2} sqrt(13/3) / sqrt 3
    r = seed_mean_difference([10, 12, 17], [7, 8, 10])
    assert r["n"] == 3 and r["level"] == 0.95 and r["diffs"] == [3.0, 4.0, 7.0]
    assert r["mean_a"] == 13.0 and r["std_a"] == pytest.approx(math.sqrt(13), rel=1e-15)
    assert r["mean_b"] == pytest.approx(25 / 3, rel=1e-15) and r["std_b"] == pytest.approx(math.sqrt(7 / 3), rel=1e-15)
    assert r["mean_diff"] == pytest.approx(14 / 3, rel=1e-15)
    assert r["std_diff"] == pytest.approx(math.sqrt(13 / 3), rel=1e-15)
    half = T_975_2 * math.sqrt(13 / 3) / math.sqrt(3)  # 5.1711...
    assert r["interval"] == pytest.approx((14 / 3 - half, 14 / 3 + half), rel=1e-13)
    assert r["interval"][0] == pytest.approx(-0.5044783, abs=1e-7)
    # two seeds: t_{0.975,1}; differences 1, 3 -> mean 2, std sqrt 2, half 12.706... * sqrt2 / sqrt2
    r2 = seed_mean_difference([2.0, 5.0], [1.0, 2.0])
    assert r2["interval"] == pytest.approx((2 - T_975_1, 2 + T_975_1), rel=1e-13)
    # a 90 % interval: t_{0.95,2}
    r90 = seed_mean_difference([10, 12, 17], [7, 8, 10], level=0.9)
    half90 = T_95_2 * math.sqrt(13 / 3) / math.sqrt(3)
    assert r90["interval"] == pytest.approx((14 / 3 - half90, 14 / 3 + half90), rel=1e-13)


def test_seed_mean_difference_one_seed_and_bad_input() -> None:
    r = seed_mean_difference([0.8], [0.7])
    assert r["interval"] is None and r["std_a"] is None and r["std_diff"] is None
    assert r["mean_diff"] == pytest.approx(0.1, rel=1e-12)
    assert t_interval([1.5]) is None
    with pytest.raises(ValueError, match="equal lengths"):
        seed_mean_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        seed_mean_difference([], [])
    with pytest.raises(ValueError, match="level"):
        seed_mean_difference([1.0, 2.0], [0.0, 1.0], level=95)
    with pytest.raises(ValueError, match="finite"):
        seed_mean_difference([1.0, math.nan], [0.0, 1.0])
