"""forethought.experiments.psf_codes: one seed's record from the run files; the psf_codes spec's derive (main −
state-only paired by seed within a group, the reported point's persistence, the zeroing cost's interval lows)."""

from __future__ import annotations

import pytest

from forethought.experiments.psf_codes import derive, seed_record


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


def test_derive_pairs_main_with_state_only_by_seed_within_each_group():
    files = {(g, s): _files(s, p, q, zero_low=low) for g, s, p, q, low in
             (("main", 0, 0.39, 0.48, 0.5), ("main", 1, 0.45, 0.50, 0.05), ("main", 2, 0.41, 0.49, 0.5),
              ("prior_x", 0, 0.4, 0.4, 0.5))}
    records = {f"{g}-s{s}": {"results": r, "diagnose": d, **({"eval/results": e} if g == "main" else {})}
               for (g, s), (r, d, e) in files.items()}
    collected = {"runs": {run: {"group": run.split("-s")[0], "seed": int(run.split("-s")[1])} for run in records}}
    out = derive(records, collected)
    d = out["main_minus_state_only"]["main"]["persistence, temperature 1"]
    assert d["per_seed"] == pytest.approx([-0.09, -0.05, -0.08]) and d["ci95_of_mean"][1] < 0
    assert out["main_minus_state_only"]["main"]["persistence at the matched-entropy point"]["mean"] == \
        pytest.approx(0.43 - 0.47)
    assert out["matched_point_persistence"]["main"]["psf"]["mean"] == pytest.approx(0.43)
    assert "prior_x" not in out["matched_point_persistence"]  # no psf eval there
    assert out["zeroing_cost_interval_lows"]["main"] == {"0": 0.5, "1": 0.05, "2": 0.5}
    assert out["lowest_zeroing_cost_interval_low"] == {"main": 0.05, "prior_x": 0.5}
