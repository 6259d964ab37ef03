"""The GPU check (``forethought experiment gpu-check``). Its dry run as the suite runs it, through
``benchmarks/gpu_check.sh``: every part runs a few steps on the CPU with tiny settings, and its JSON holds the parts
with finite numbers, outside benchmarks/results. Bad options are refused in one line before anything runs; the
deadlines keep time for the later parts."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_harness import expect_clean_failure

from forethought.gpu_check import PARTS, SHARES, Context, dry_settings

ROOT = Path(__file__).resolve().parents[1]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_gpu_check_dry_run(tmp_path: Path) -> None:
    env = {**os.environ, "FORETHOUGHT_PYTHON": sys.executable, "FORETHOUGHT_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1"}
    env.pop("FORETHOUGHT_DATA", None)  # the dry run needs no data root
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry_run", "true", "--work",
                           str(tmp_path / "work")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    lines = proc.stdout.strip().splitlines()
    assert lines and "wrote " in lines[-1], (proc.stdout + proc.stderr)[-4000:]
    out = Path(lines[-1].rsplit("wrote ", 1)[1])  # the dry run's default: a temporary folder
    assert ROOT / "benchmarks" / "results" not in out.parents
    res = json.loads(out.read_text())
    assert res["dry_run"] is True and res["command"].startswith("benchmarks/gpu_check.sh --dry_run true")
    assert res["device"]["name"].startswith("cpu")
    parts = res["parts"]
    assert list(parts) == list(PARTS)
    for name in PARTS:
        assert parts[name]["ok"] is True, (name, parts[name].get("error"))
    for part in parts.values():
        assert _finite(part["wall_s"]) and part["wall_s"] > 0
    assert proc.returncode == 0 and res["ok"] is True, (proc.stdout + proc.stderr)[-4000:]

    syn = parts["synthetic"]
    assert syn["steps"] >= 2 and _finite(syn["myopic_minus_vanilla"])
    assert all(_finite(v) and v > 0 for v in syn["calibration"]["seconds_per_step"].values())
    for mode in ("vanilla", "detach_hidden"):
        r = syn["modes"][mode]
        assert r["complete"] and _finite(r["normalised_loss"]) and _finite(r["predict_zero"])
        assert [s for s, _ in r["curve"]] == list(range(1, syn["steps"] + 1))  # eval_every 1: every step
        assert all(_finite(v) for _, v in r["curve"])

    pg = parts["predgen"]
    assert pg["steps"] * pg["batch_size"] >= pg["train_examples"] > 0  # one epoch
    for method in ("predictor", "generator", "predgen"):
        r = pg["methods"][method]
        assert r["complete"] and 0 <= r["accuracy"] <= 1 and r["examples_seen"] == pg["epoch_examples"]
        assert r["curve"] and all(_finite(a) for _, a in r["curve"])

    sc = parts["step_cost"]
    assert all(_finite(sc[k]) and sc[k] > 0 for k in ("ratio", "vanilla_median_s", "myopic_median_s"))

    psf = parts["psf_base"]
    assert _finite(psf["tokens_per_s"]) and psf["tokens_per_s"] > 0 and _finite(psf["val_ce"])
    assert psf["train_tokens"] == psf["steps"] * psf["batch_size"] * psf["seq_len"]

    att = parts["attention"]  # on the CPU the fast form must also match, and its forward be vanilla's exactly
    assert att["passed"] and att["forward_bit_identical_to_vanilla"]
    assert {c["dtype"] for c in att["checks"]} == {"fp32", "bf16"}
    assert all(c["fast_vs_float64"]["forward"] < c["tolerance"] for c in att["checks"])


@pytest.mark.parametrize("args,names", [
    (["--budget_s", "0"], ["budget_s must be a positive number", "0"]),
    (["--parts", "[synthetic, synthetic]"], ["parts: name each part once"]),
    (["--parts", "[synthetic, gpu]"], ["config key 'parts'", "got 'gpu'"]),
    (["--smollm2_gguf", "missing.gguf"], ["smollm2_gguf: no file at missing.gguf"]),
])
def test_bad_options_fail_in_one_line(tmp_path: Path, args: list[str], names: list[str]) -> None:
    expect_clean_failure(["experiment", "gpu-check", "--dry_run", "true", "--work", str(tmp_path / "work"), *args],
                         tmp_path, tmp_path, names, in_process=True)


def test_a_part_keeps_time_for_the_later_parts(tmp_path: Path) -> None:
    """A part gets its share of the budget, less when that would eat into the later parts' reserve (their share,
    at most 30 s each), and never under 5 s."""
    budget = 560.0
    now = time.perf_counter()
    ctx = Context(dry_settings(budget), tmp_path, now + budget)
    assert ctx.limit("synthetic", ["predgen", "step_cost", "psf_base"]) - now == pytest.approx(
        SHARES["synthetic"] * budget, abs=0.5)
    late = Context(dry_settings(budget), tmp_path, now + 100.0)  # 100 s left: 90 s are the later parts' reserve
    assert late.limit("synthetic", ["predgen", "step_cost", "psf_base"]) - now == pytest.approx(10.0, abs=0.5)
    over = Context(dry_settings(budget), tmp_path, now + 20.0)  # already behind: the floor
    assert over.limit("predgen", ["step_cost", "psf_base"]) - now == pytest.approx(5.0, abs=0.5)
