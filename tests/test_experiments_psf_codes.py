"""forethought.experiments.psf_codes: one seed's record from the run files, the seeds together, the targets."""

from __future__ import annotations

import pytest

from forethought.experiments.psf_codes import arm_summary, seed_record, summarize


def _files(seed: int, prior_pers: float, so_pers: float, zero_low: float = 0.5):
    dec = lambda nll, pers, agree=None: {"true_nll": {"mean": nll}, "persistence": {"mean": pers},  # noqa: E731
                                         **({"topic_agreement": {"same_source": agree, "other_source": 0.14}}
                                            if agree is not None else {})}
    diagnose = {"codes": {"zeroing_cost": {"all": {"diff": 0.58 + seed / 100, "interval": [zero_low, 0.6]}},
                          "usage": {"kl_per_token": 1.0, "active_units": 16},
                          "topics": {"information_code_given_state": 0.64, "information_code_mean": 1.4}},
                "decoding": {"data": dec(2.66, 0.8), "clean": dec(3.01, 0.67, 0.8 + seed / 100),
                             "clean_zero_codes": dec(3.18, 0.55, 0.5), "prior": dec(3.2, prior_pers),
                             "mean": dec(3.3, 0.3), "prior_state_only": dec(3.22, so_pers)}}
    results = {"stages": {"prior": {"val_flow_loss": 0.6, "train_wall_s": 1.0},
                          "prior_state_only": {"val_flow_loss": 0.3, "train_wall_s": 1.0}}}
    point = {"temperature": 0.6, "top_p": 0.9}
    evaluation = {"models": {m: {"matched_entropy": {"nll_per_token": nll}, "reported_point": point,
                                 "sweep": [{"temperature": 1.0, "top_p": 1.0, "persistence": 0.1},
                                           {**point, "persistence": pers}]}
                             for m, nll, pers in (("psf", 2.3, 0.43), ("psf_state_only", 2.9, 0.47))}}
    return results, diagnose, evaluation


def test_seed_record_reads_every_measure():
    r = seed_record(*_files(0, 0.39, 0.48))
    assert r["prior_persistence"] == 0.39 and r["state_only_persistence"] == 0.48
    assert r["clean_topic_agreement"] == 0.8 and r["clean_zero_codes_topic_agreement"] == 0.5
    assert r["psf_nll_matched"] == 2.3 and r["psf_persistence_matched"] == 0.43  # the reported point's, not T 1's
    assert r["state_only_prior_val_flow_loss"] == 0.3
    no_eval = seed_record(*_files(0, 0.39, 0.48)[:2])
    assert no_eval["psf_nll_matched"] is None and no_eval["prior_persistence"] == 0.39


def test_summarize_pairs_by_seed_and_judges_targets():
    recs = {s: seed_record(*_files(s, p, q)) for s, p, q in ((0, 0.39, 0.48), (1, 0.45, 0.50), (2, 0.41, 0.49))}
    out = summarize(recs)
    d = out["comparisons"]["main - state-only: persistence, temperature 1"]
    assert d["per_seed"] == pytest.approx([-0.09, -0.05, -0.08]) and d["ci95_of_mean"][1] < 0
    t = out["targets"]
    assert t["prior_persistence"]["pass"] is False and t["clean_topic_agreement"]["pass"] is True
    assert t["prior_nll"]["pass"] is True and t["zeroing_cost"]["pass"] is True
    # the zeroing cost also needs every seed's own interval above the level
    recs[1] = seed_record(*_files(1, 0.45, 0.5, zero_low=0.05))
    assert summarize(recs)["targets"]["zeroing_cost"]["pass"] is False


def test_prior_arms_pair_with_the_reference():
    ref = {s: seed_record(*_files(s, 0.39, 0.48)) for s in (0, 1)}
    arm = {s: seed_record(*_files(s, 0.45 + s / 100, 0.48)) for s in (0, 1)}
    out = arm_summary(arm, ref)
    assert out["minus_reference"]["prior_persistence"]["per_seed"] == pytest.approx([0.06, 0.07])
    assert arm_summary(ref, ref)["minus_reference"] == {}


def test_decoder_arms_pair_the_code_channel_with_the_main_runs():
    """A decoder arm is summarised on the code channel's measures too, paired by seed with the main runs."""
    from forethought.experiments.psf_codes import DECODER_MEASURES

    main = {s: seed_record(*_files(s, 0.39, 0.48)) for s in (0, 1)}
    arm = {s: seed_record(*_files(s, 0.45, 0.48)) for s in (0, 1)}
    out = arm_summary(arm, main, DECODER_MEASURES)
    assert set(out["measures"]) <= set(DECODER_MEASURES) and "clean_persistence" in out["measures"]
    assert out["minus_reference"]["prior_persistence"]["per_seed"] == pytest.approx([0.06, 0.06])
    assert "mean_trajectory_persistence" not in out["measures"]  # a prior arm's measure, not asked here
