"""``benchmarks/psf_planted.py``: the whole pipeline at toy size (``--preset tiny``: two seeds of the two recipes,
the token flow, psf eval judged by the true generator, psf diagnose, the collection over seeds), writing to a
temporary folder, and its pure collection functions on hand-made inputs."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ("psf", "psf_content", "ar", "token_flow", "psf_mean_trajectory")


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("psf_planted", ROOT / "benchmarks" / "psf_planted.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_psf_planted_tiny(tmp_path: Path, bench) -> None:
    runs, out = tmp_path / "runs", tmp_path / "psf_planted.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "psf_planted.py"), "--preset", "tiny", "--seeds", "0", "1",
           "--jobs", "1", "--seed-jobs", "2", "--runs", str(runs), "--out", str(out), "--sweep", "1.0:1.0", "0.7:0.9",
           "--token-flow-sweep", "1.0", "2.0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FORETHOUGHT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for key in ("command", "machine", "invocation_walls_per_seed", "settings", "floor", "per_seed", "over_seeds",
                "checks"):
        assert key in res
    assert set(res["per_seed"]) == {"0", "1"}
    # the two seeds trained different models on the same corpus: one floor, different validation losses
    ce = [json.loads((runs / f"s{s}" / "psf" / "results.json").read_text())["stages"]["base"]["val_ce"]
          for s in (0, 1)]
    assert ce[0] != ce[1]
    assert res["per_seed"]["0"]["floor"] == res["per_seed"]["1"]["floor"] == res["floor"] > 0
    for s, seed in res["per_seed"].items():
        ev = json.loads((runs / f"s{s}" / "eval" / "results.json").read_text())
        assert set(seed["models"]) == set(ROWS)
        for name, m in seed["models"].items():
            g = ev["models"][name]["gen_ppl_at_matched_entropy"]
            assert (m["nll_at_matched_entropy"] is None) == (g is None)
            if g is not None:
                assert m["nll_at_matched_entropy"] == pytest.approx(math.log(g))
                assert m["excess_over_floor"] == pytest.approx(math.log(g) - res["floor"])
            assert m["flops_per_sample"] == ev["models"][name]["flops_per_sample"] > 0
            assert 0 <= m["persistence_near"] <= 1
        diag = json.loads((runs / f"s{s}" / "psf" / "diagnose.json").read_text())
        sh = seed["shuffle"]["psf"]
        assert sh["stage"] == diag["stage"] and set(seed["shuffle"]) == {"psf", "psf_content"}
        assert sh["first"] == diag["shuffle"][diag["stage"]]["modes"][sh["codes"]]["first"]["diff"]
    # over seeds: means of the per-seed numbers, the seed-paired differences, the checks decided from them
    agg = res["over_seeds"]
    flops = [res["per_seed"][s]["models"]["psf"]["flops_per_sample"] for s in ("0", "1")]
    assert agg["models"]["psf"]["flops_per_sample"]["mean"] == pytest.approx(np.mean(flops))
    firsts = [res["per_seed"][s]["shuffle"]["psf"]["first"] for s in ("0", "1")]
    assert agg["shuffle"]["psf"]["first"]["mean"] == pytest.approx(np.mean(firsts))
    lows = [res["per_seed"][s]["shuffle"]["psf"]["intervals"]["first"][0] for s in ("0", "1")]
    assert res["checks"]["shuffle_cost_first_ge_0.1"]["pass"] is all(lo >= 0.1 for lo in lows)
    ratio = res["checks"]["psf_below_token_flow_at_tenth_flops"]["flops_ratio"]
    assert all(0 < r < 1 for r in ratio)
    assert set(res["checks"]) == {"shuffle_cost_first_ge_0.1", "predictive_beats_content_by_8pct",
                                  "psf_below_token_flow_at_tenth_flops", "mean_trajectory_worse_on_persistence"}
    # a rerun (of seed 0, to save time) trains nothing, samples nothing and diagnoses nothing again
    models = {p: p.stat().st_mtime_ns for p in runs.rglob("*.safetensors")}
    diags = {p: p.stat().st_mtime_ns for p in runs.rglob("diagnose.json")}
    again = [*cmd[:cmd.index("--seeds")], "--seeds", "0", *cmd[cmd.index("--jobs"):]]
    proc = subprocess.run(again, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("finished, skipped") == 3
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*.safetensors")} == models
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("diagnose.json")} == diags
    assert json.loads(out.read_text())["per_seed"] == {"0": res["per_seed"]["0"]}
    # a code-trained run with both priors (planted_main's kind) evaluated beside the rows: psf_codes and
    # psf_codes_state_only, compared with psf like every other model, nothing else trained
    codes = [sys.executable, "-m", "forethought.cli", "psf", "recipe", "--config", "tiny", "--run.out_dir",
             str(tmp_path / "codes"), "--run.name", "main-s0", "--run.seed", "0", "--longer_blocks.blocks", "[]",
             "--baselines", "[]", "--prior.state_only_variant", "true", *bench.TINY_CORPUS]
    proc = subprocess.run(codes, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with_codes = [*again, "--collect-only", "--codes-runs", str(tmp_path / "codes" / "main-s{seed}")]
    proc = subprocess.run(with_codes, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seed0 = json.loads(out.read_text())["per_seed"]["0"]
    assert set(seed0["models"]) == {*ROWS, "psf_codes", "psf_codes_state_only"}
    assert {"psf_codes", "psf_codes_state_only"} <= set(seed0["psf_minus"])
    assert seed0["models"]["psf"] == res["per_seed"]["0"]["models"]["psf"]  # the rows' own numbers unchanged
    assert (runs / "s0" / "psf_codes").resolve() == (tmp_path / "codes" / "main-s0").resolve()
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*.safetensors")} == models


def test_interpolation_and_gain_by_hand(bench) -> None:
    sweep = [{"entropy": 2.0, "persistence": 0.5}, {"entropy": 3.0, "persistence": 0.9},
             {"entropy": 1.0, "persistence": 0.1}]
    assert bench.interpolate(sweep, "persistence", 2.25) == pytest.approx(0.6)
    assert bench.interpolate(sweep, "persistence", 1.5) == pytest.approx(0.3)
    assert bench.interpolate(sweep, "persistence", 3.5) is None  # not bracketed
    # two seeds, both sweeps bracketing the target: psf 0.09 and 0.11 above the floor (2), content 0.10 and 0.10
    def seed(ep: float, ec: float) -> dict:
        m = {"nll_at_matched_entropy": None, "excess_over_floor": None, "persistence_at_matched_entropy": None,
             "persistence_near": 0.5, "flops_per_sample": 1.0, "serial_depth": 1}
        diff = {"nll_at_matched_entropy": ep - ec, "nll_at_other_entropy": None}
        return {"floor": 2.0, "psf_minus": {"psf_content": diff},
                "models": {"psf": {**m, "excess_over_floor": ep, "nll_at_matched_entropy": 2 + ep},
                           "psf_content": {**m, "excess_over_floor": ec, "nll_at_matched_entropy": 2 + ec}},
                "shuffle": {}}
    agg = bench.over_seeds({0: seed(0.09, 0.10), 1: seed(0.11, 0.10)})
    c = agg["nll_comparisons"]["psf_content"]
    assert c["basis"] == "the references' entropy" and c["per_seed"] == pytest.approx([-0.01, 0.01])
    assert c["gain"] == pytest.approx([0.1, -0.1]) and c["gain_mean"] == pytest.approx(0.0)
    assert c["interval"][0] < 0 < c["interval"][1]
    d = agg["differences"]["psf - psf_content"]["nll_at_matched_entropy"]
    assert d["diffs"] == pytest.approx([-0.01, 0.01])
    assert agg["differences"]["psf - psf_content"]["persistence_at_matched_entropy"] is None
    # content never reaches the target: psf is compared at content's own entropy (psf below the floor: gain > 1)
    seeds = {i: seed(0.0, 1.0) for i in range(3)}
    for sd, at in zip(seeds.values(), (-1.1, -1.3, -1.2)):
        sd["psf_minus"]["psf_content"] = {"nll_at_matched_entropy": None, "nll_at_other_entropy": at,
                                          "other_nll_there": 3.0}
    c = bench.over_seeds(seeds)["nll_comparisons"]["psf_content"]
    assert c["basis"].startswith("psf_content's own entropy") and c["gain"] == pytest.approx([1.1, 1.3, 1.2])
    # mean -1.2, std 0.1: t_{0.975, 2} = 4.303 -> -1.2 ± 4.303 * 0.1 / sqrt(3)
    assert c["interval"] == pytest.approx([-1.2 - 0.24843, -1.2 + 0.24843], abs=1e-4)
    # at_other_entropy: psf interpolated log-linearly at the other's point nearest the target
    psf = [{"entropy": 3.0, "gen_ppl": math.exp(2.0)}, {"entropy": 4.0, "gen_ppl": math.exp(3.0)}]
    other = [{"entropy": 3.5, "gen_ppl": math.exp(4.0), "nll_per_token": 4.0},
             {"entropy": 5.0, "gen_ppl": math.exp(5.0), "nll_per_token": 5.0}]
    r = bench.at_other_entropy(psf, other, target=3.2)
    assert r["other_entropy"] == 3.5 and r["nll_at_other_entropy"] == pytest.approx(2.5 - 4.0)
    assert bench.at_other_entropy(psf, other[1:], target=3.2)["nll_at_other_entropy"] is None
