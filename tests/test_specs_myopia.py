"""The myopia experiment specs: every one loads and its commands parse; the archived benchmarks collected from a
copy of their committed records reproduce the numbers of the JSON their scripts wrote (benchmarks/results/legacy/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forethought.cli import check_command
from forethought.experiments.runner import Layout, collect
from forethought.experiments.spec import load_spec, plan, shipped_specs
from forethought.myopia.synthetic import TaskConfig, copy_prediction, normalised_loss

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MYOPIA = [p.stem for p in shipped_specs() if p.stem.startswith("myopia_")]


def _legacy(name: str) -> dict:
    return json.loads((RESULTS / "legacy" / f"{name}.json").read_text())


def _collect(tmp_path: Path, name: str) -> dict:
    """Collect ``name`` from a copy of its committed archive under a fresh root (no run folders)."""
    spec, path = load_spec(name)
    layout = Layout.under(tmp_path, name)
    shutil.copytree(RESULTS / "runs" / name, layout.archive)
    return collect(spec, layout, "pytest", path)


def _same(new, old) -> None:
    if isinstance(old, dict):
        assert set(new) == set(old), (new, old)
        for k in old:
            _same(new[k], old[k])
    elif isinstance(old, list):
        assert len(new) == len(old)
        for a, b in zip(new, old, strict=True):
            _same(a, b)
    elif isinstance(old, float):
        assert new == pytest.approx(old, rel=1e-12, abs=1e-12)
    else:
        assert new == old


def test_myopia_specs_load_and_their_commands_parse() -> None:
    assert {"myopia_horizon", "myopia_pythia_lm", "myopia_synthetic_pgrid", "myopia_synthetic", "myopia_lm",
            "myopia_lm_paper", "myopia_synthetic_paper"} <= set(MYOPIA)
    for name in MYOPIA:
        spec, _ = load_spec(name)
        assert spec.system == "myopia" and spec.description and spec.cost
        for run in plan(spec):
            for argv in run.steps:
                check_command(argv)


def test_spec_runs_are_the_archived_runs() -> None:
    for name in ("myopia_horizon", "myopia_pythia_lm", "myopia_synthetic_pgrid"):
        spec, _ = load_spec(name)
        archived = {p.stem for p in (RESULTS / "runs" / name).glob("*.json") if p.stem != "model-config"}
        assert archived <= {r.run for r in plan(spec)}, name


def test_horizon_reproduces_the_legacy_json(tmp_path) -> None:
    old, new = _legacy("myopia_horizon"), _collect(tmp_path, "myopia_horizon")
    groups, derived = new["groups"], new["derived"]
    assert not new["unfinished"]
    for part, measure in (("synthetic", "synthetic_{}"), ("lm", "lm_{}")):
        for k, row in old[part]["per_k"].items():
            stats = groups[f"{part}-k={k}"]["measures"][measure.format("vanilla" if k == "T" else "myopic")]
            for key in ("seeds", "per_seed", "mean", "std", "ci95_of_mean"):
                _same(stats[key], row[key])
            mine = derived[part]["per_k"][k]
            _same(mine["minus_vanilla"], row["minus_vanilla"])
            _same(mine["minus_vanilla_ci95"], row["minus_vanilla_paired"]["ci95_of_mean"])
            _same(mine["fraction_recovered"], row["fraction_recovered"])
            if part == "synthetic":
                _same(mine["escape_step"], row["escape_step"])
    _same(derived["synthetic"]["predict_zero"], old["synthetic"]["predict_zero"])
    _same(dict(derived["train_wall_s"]), old["train_wall_s"])
    _same(new["provenance"]["wall_s"], old["wall_s"])
    assert all(c["passed"] for c in new["checks"].values())


def test_pythia_lm_reproduces_the_legacy_json(tmp_path) -> None:
    old, new = _legacy("myopia_pythia_lm"), _collect(tmp_path, "myopia_pythia_lm")
    derived = new["derived"]
    names = {"vanilla": ("vanilla", "vanilla"), "local": ("vanilla", "local"),
             "detach_hidden": ("myopic", "myopic"), "zero_past": ("myopic", "bigram")}
    for variant, by_seed in old["per_seed"].items():  # the records were renamed s<seed>-a|b -> vanilla|myopic-s<seed>
        group, measure = names[variant]
        for seed, loss in by_seed.items():
            _same(new["runs"][f"{group}-s{seed}"]["measures"][measure], loss)
    for key in ("setup", "vanilla_mean", "vanilla_std", "local_mean", "local_std", "detach_hidden_mean",
                "detach_hidden_std", "zero_past_mean", "zero_past_std", "gap", "gap_paired", "gap_relative",
                "local_myopic_bonus", "local_myopic_bonus_paired", "myopic_minus_local", "myopic_minus_local_paired",
                "context_benefit_paired", "gap_over_context_per_seed", "gap_over_context"):
        _same(derived[key], old[key])
    # the script's wall time spans its LM runs (the model folder was made again, later, by the spec's first stage)
    runs = [r for name, r in new["provenance"]["runs"].items() if name != "model-s0"]
    _same(max(r["finished"] for r in runs) - min(r["started"] for r in runs), old["wall_s"])
    assert new["runs"]["model-s0"]["group"] == "model"
    assert all(c["passed"] for c in new["checks"].values())


def test_synthetic_pgrid_reproduces_the_legacy_json(tmp_path) -> None:
    old, new = _legacy("myopia_synthetic_pgrid"), _collect(tmp_path, "myopia_synthetic_pgrid")
    derived = new["derived"]
    keys = [k for k in old if k.startswith("p=")]
    assert list(derived) == keys and not new["unfinished"]
    retrained = ("p=0.01", "vanilla", "0")  # trained again on the current data stream; every other run is the legacy's
    for key in keys:
        row, mine = old[key], derived[key]
        for level in ("predict_zero", "paper_myopic", "myopic", "myopic_std", "myopic_probe_r2_lag0",
                      "myopic_probe_sum_r2_last_layer"):
            _same(mine[level], row[level])
        for name in ("vanilla", "myopic"):
            for seed, loss in row["per_seed"][name].items():
                if (key, name, seed) != retrained:
                    _same(mine[f"{name}_per_seed"][seed], loss)
        assert mine["vanilla_per_seed"]["0"] != row["per_seed"]["vanilla"]["0"] or key != "p=0.01"
        # COPY on each seed's own evaluation sequences (those of seed s + 1), paired with the models' losses
        for name in ("vanilla", "myopic"):
            diffs = [mine[f"{name}_per_seed"][s] - mine["copy_per_seed"][s] for s in mine[f"{name}_per_seed"]]
            assert mine[f"{name}_minus_copy"] == pytest.approx(sum(diffs) / len(diffs))
    # one level recomputed here from the task's definition on the sequences the p = 0.01 seed-0 models were scored on
    task = TaskConfig()
    level = normalised_loss(copy_prediction, task, 0.01, 16384, seed=1)[0]
    assert derived["p=0.01"]["copy_per_seed"]["0"] == pytest.approx(level, rel=1e-9)
    # the script's wall time spans its own runs (the level runs and the retrained one came later)
    runs = [r for name, r in new["provenance"]["runs"].items()
            if not name.startswith("levels-") and name != "p=0.01-vanilla-s0"]
    _same(max(r["finished"] for r in runs) - min(r["started"] for r in runs), old["wall_s"])
