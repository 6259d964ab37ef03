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
