"""What the benchmarks share: the tasks benchmark's gradient summary, the committed run archive, the job queue."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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

