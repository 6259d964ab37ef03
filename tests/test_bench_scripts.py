"""Smoke test of the benchmark scripts: ``benchmarks/myopia_step_cost.py --quick`` runs and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_myopia_step_cost_quick(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "myopia_step_cost.py"), "--quick", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for key in ("gpt", "smollm2"):
        ratio = res[key]["ratio"]
        assert isinstance(ratio, (int, float)) and ratio > 0
        assert res[key]["steps"] >= 3 and res[key]["vanilla_median_s"] > 0 and res[key]["myopic_median_s"] > 0
        assert res[key]["attention_calls_per_forward"]["myopic"]["fast"] > 0
    assert res["gpt"]["reference_ratio"] > 0
    first = {k: v["first_step_loss"] for k, v in res["gpt"]["variants"].items()}
    assert first["myopic"] == pytest.approx(first["vanilla"], rel=1e-5)  # same weights, same forward
    assert res["machine"]["machine"]["torch_threads"] >= 1 and res["wall_s"] > 0


def test_gradient_summary_takes_late_medians() -> None:
    """WDAL's pull on each part in the tasks benchmark: medians over the second half of the logged steps."""
    from forethought.experiments import gradient_summary

    log = [{"step": s, "loss": 1.0, "l_w": 0.1 * s, "l_d": 1.0, "grad_norm_writer": 2.0, "grad_norm_head": float(s)}
           for s in (10, 20, 30, 40, 50, 60)]
    g = gradient_summary(log)
    assert g["logged_steps"] == 3  # steps 40, 50, 60 are past half of 60
    assert g["l_w"] == pytest.approx(5.0) and g["grad_norm_head"] == 50.0 and g["head_over_writer"] == 25.0
    assert gradient_summary([{"step": 10, "loss": 1.0}]) is None  # no gradient norms logged
    assert "grad_norm_head" not in gradient_summary([{"step": 10, "grad_norm_writer": 1.0}])  # the generator


def test_run_archive_is_not_ignored_by_git() -> None:
    """Finished runs' records must reach the repository (a fresh machine has no runs/ folder)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("benchmarks/results/runs/predgen_curves/x.json", "benchmarks/results/runs/predgen_tasks/x.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 1, path
    assert subprocess.run(["git", "check-ignore", "-q", "runs/x"], cwd=ROOT).returncode == 0  # run folders stay out

