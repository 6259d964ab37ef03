"""forethought.experiments.predgen_mc: variants summarised over seeds, compared seed by seed, the default picked
on the validation split only (on seeds every candidate has), from synthetic run records."""

from __future__ import annotations

import math

import pytest

from forethought.experiments.predgen_mc import (
    agreement_rows,
    bar,
    compare,
    method_summary,
    metric_of,
    role,
    same_answer,
    select_on_validation,
)


def _run(pred: float, decoded: float | None = None, val: float | None = None, wall: float = 10.0) -> dict:
    r: dict = {"accuracy": pred, "train_wall_s": wall}
    if decoded is not None:
        r["decoded"] = {"accuracy": decoded}
    if val is not None:
        r["validation"] = {"accuracy": val}
    return r


def _pair(rows_a: list[dict], rows_b: list[dict], task_type: str, key_a: str, key_b: str) -> dict:
    """A stand-in for the per-example test: the difference of the rows' mean answers."""
    return {"diff": sum(r[key_a] for r in rows_a) / len(rows_a) - sum(r[key_b] for r in rows_b) / len(rows_b),
            "task_type": task_type}


def test_metric_of_reads_the_prediction_or_a_named_answer() -> None:
    r = _run(0.5, decoded=0.4)
    assert metric_of(r, "", "accuracy") == 0.5 and metric_of(r, "decoded", "accuracy") == 0.4
    assert metric_of(r, "rank", "accuracy") is None


def test_method_summary_means_stds_and_per_seed() -> None:
    m = method_summary({0: _run(0.5, 0.4, wall=10), 1: _run(0.7, 0.4, wall=20)}, "accuracy")
    assert m["prediction"] == pytest.approx(0.6) and m["prediction_std"] == pytest.approx(math.sqrt(0.02))
    assert m["decoded"] == pytest.approx(0.4) and m["decoded_std"] == 0.0
    assert m["per_seed"] == {"0": {"prediction": 0.5, "decoded": 0.4}, "1": {"prediction": 0.7, "decoded": 0.4}}
    assert m["train_wall_s"] == 15 and "rank" not in m
    assert method_summary({3: _run(0.5)}, "accuracy")["prediction_std"] is None  # one seed: no spread


def test_compare_pairs_by_seed_on_common_seeds_only() -> None:
    results = {"a": {0: _run(0.6, decoded=0.5), 1: _run(0.8, decoded=0.5), 2: _run(0.9)},
               "b": {0: _run(0.5), 1: _run(0.6)}}
    preds = {v: {s: [{"prediction": r["accuracy"], "decoded": 0.0}] for s, r in per.items()}
             for v, per in results.items()}
    row = compare("a", "b", results, preds, "accuracy", _pair)
    assert row["seeds"] == [0, 1] and row["per_seed_difference"] == pytest.approx([0.1, 0.2])
    assert row["seed_mean_difference"] == pytest.approx(0.15)
    lo, hi = row["ci95_of_seed_mean"]
    assert lo < 0.15 < hi and row["per_seed"]["0"]["diff"] == pytest.approx(0.1)
    own = compare("a", "a:decoded", results, preds, "accuracy", _pair)  # seed 2 has no decoded answer
    assert own["seeds"] == [0, 1] and own["per_seed_difference"] == pytest.approx([0.1, 0.3])
    assert compare("a", "missing", results, preds, "accuracy", _pair) is None
    one = compare("a", "b", {"a": {0: _run(0.6)}, "b": {0: _run(0.5)}},
                  {"a": {0: [{"prediction": 1}]}, "b": {0: [{"prediction": 0}]}}, "accuracy", _pair)
    assert one["ci95_of_seed_mean"] is None  # one seed: no interval


def test_selection_uses_validation_on_seeds_every_candidate_has() -> None:
    methods = {"x": method_summary({0: _run(0.9, val=0.50), 1: _run(0.9, val=0.50), 2: _run(0.9, val=0.99)},
                                   "accuracy"),
               "y": method_summary({0: _run(0.1, val=0.60), 1: _run(0.1, val=0.60)}, "accuracy"),
               "z": method_summary({0: _run(0.9)}, "accuracy")}  # no validation split: not a candidate seed
    pick = select_on_validation(methods, ["x", "y", "w"])
    # y wins on seeds 0-1 although x is better on the eval split and on its extra seed 2
    assert pick == {"selected": "y", "seeds": ["0", "1"], "validation": {"x": 0.5, "y": 0.6}}
    assert select_on_validation(methods, ["x", "z"]) is None  # they share no validated seed
    assert select_on_validation(methods, ["w"]) is None
    assert select_on_validation(methods, ["x", "w"]) is None  # one candidate ran: there is nothing to choose
    assert select_on_validation(methods, ["y", "x", "w"])["selected"] == "y"
    low = select_on_validation(methods, ["x", "y"], higher_is_better=False)  # MSE: lower wins
    assert low["selected"] == "x"



def test_agreement_rows_against_own_answers_and_the_generators_rank() -> None:
    rows = [{"prediction": "A", "decoded": "A", "rank": "B"}, {"prediction": "B", "decoded": "A", "rank": "B"},
            {"prediction": "C", "decoded": "C", "rank": "C"}, {"prediction": "D", "decoded": "A", "rank": "A"}]
    assert same_answer(rows, "prediction", "rank") == 0.5 and same_answer(rows, "prediction", "decoded") == 0.5
    assert same_answer(rows, "prediction", "rank_norm") is None and same_answer([], "prediction", "rank") is None
    gen = {0: {"accuracy": 0.5, "rank": {"accuracy": 0.7}}, 1: {"accuracy": 0.4, "rank": {"accuracy": 0.6}}}
    results = {"predgen-choices-lmeval": {0: _run(0.65), 2: _run(0.9)}, "generator-lmeval": gen,
               "generator": {0: _run(0.1)}}
    preds = {"predgen-choices-lmeval": {0: rows}, "generator-lmeval": {0: rows[:2], 1: rows[2:3]}}
    out = agreement_rows(results, preds, "accuracy")
    seed0 = out["predgen-choices-lmeval"]["0"]
    # the bar is the Generator with the same prompt (lm-eval's), not the one that lists the choices
    assert seed0["minus_generator_rank"] == pytest.approx(0.65 - 0.7)
    assert (seed0["agrees_rank"], seed0["agrees_written"], seed0["role"]) == (0.5, 0.5, "PredGen T(Z)")
    assert out["predgen-choices-lmeval"]["2"]["minus_generator_rank"] is None  # the Generator has no seed 2
    assert "agrees_written" not in out["generator-lmeval"]["1"]  # a Generator's prediction is its written answer
    assert out["generator-lmeval"]["1"]["agrees_rank"] == 1.0
    assert bar("predgen-name") == "generator-name" and bar("predgen-choices-ll") == "generator"
    assert "not PredGen" in role("predgen-choices-ll-lmeval") and role("predgen-logits") == "PredGen T(Z)"
