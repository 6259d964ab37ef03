"""The derive functions of the PredGen specs over `predgen mine` and `predgen speed` (predgen_mine,
predgen_words_sst2, predgen_speed) on hand-made records: what each reads from a run's files and what it adds."""

from __future__ import annotations

import math

import pytest

from forethought.experiments.predgen import mine, step_parts, words


def _mine_record(accuracy: float) -> dict:
    est = {rep: {"dim": 4, "heldout": {"mean": m, "std": 0.01, "per_seed": [m - 0.01, m, m + 0.01]},
                 "fit_half": {"mean": m + 0.02}}
           for rep, m in (("pooled_last", 0.35), ("tokens", 0.30))}
    return {"results": {"accuracy": accuracy}, "mine": {"H_Y": math.log(2), "estimates": est},
            "predictions": [{"target": "positive"}, {"target": "negative"}] * 3}


def test_mine_keeps_each_representation_and_adds_the_fano_floor() -> None:
    out = mine({"predictor-s0": _mine_record(0.9), "predgen-s0": _mine_record(1.0)}, {})
    est = out["MINE held-out bound (nats) over MINE seeds"]
    assert est["predictor-s0"]["tokens"] == {"held_out": 0.30, "std": 0.01, "per_seed": [0.29, 0.30, 0.31],
                                             "fit_half": pytest.approx(0.32)}
    floors = out["what the accuracy implies (nats)"]
    hb = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))  # two classes: no (1 - a) log(K - 1) term
    assert floors["predictor-s0"]["floor"] == pytest.approx(math.log(2) - hb)
    assert floors["predgen-s0"]["floor"] == pytest.approx(math.log(2))  # a perfect classifier carries all of H(Y)


def test_words_lists_top_and_asked_words_per_answer() -> None:
    per_answer = {
        "negative": {"answered": 6, "top": [{"word": "bad", "npmi": 0.5, "with_answer": 3, "examples": 3},
                                            {"word": "dull", "npmi": 0.25, "with_answer": 2, "examples": 3}],
                     "asked": [{"word": "funny", "npmi": None, "with_answer": 0, "examples": 0}]},
        "positive": {"answered": 0, "top": []}}
    out = words({"generator-s0": {"words": {"word_association": {"per_answer": per_answer}}}}, {})
    top = out["top words: NPMI (examples with this answer / with the word)"]["generator-s0"]
    assert top["negative"] == {"answered": 6, "words": "bad 0.50 (3/3), dull 0.25 (2/3)"}
    assert top["positive"] == {"answered": 0, "words": ""}
    assert out["the words asked for"] == {"generator-s0": {"negative": {"funny": "undefined (0/0)"}}}


def test_step_parts_is_a_row_per_task_and_run() -> None:
    parts = {"sst2": {"prompt_pass": 0.7, "step": 2.2}, "arc-easy (text answers)": {"prompt_pass": 1.9, "step": 6.6}}
    out = step_parts({"speed-s0": {"results": {"predgen_step_parts_s": parts}}}, {})
    assert out == {"step parts (s, median)": {"sst2 (speed-s0)": parts["sst2"],
                                               "arc-easy (text answers) (speed-s0)": parts["arc-easy (text answers)"]}}
