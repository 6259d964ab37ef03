"""The GPU check's ``--dry-run`` (as CI runs it: through ``benchmarks/gpu_check.sh``): every part runs a few steps
on the CPU with tiny settings, and its JSON holds the four parts with finite numbers, outside benchmarks/results."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_gpu_check_dry_run(tmp_path: Path) -> None:
    env = {**os.environ, "FORETHOUGHT_PYTHON": sys.executable, "FORETHOUGHT_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1"}
    env.pop("FORETHOUGHT_DATA", None)  # the dry run needs no data root
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--work",
                           str(tmp_path / "work")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    out = Path(last.rsplit("wrote ", 1)[1])  # the dry run's default: a temporary folder
    assert ROOT / "benchmarks" / "results" not in out.parents
    res = json.loads(out.read_text())
    assert res["dry_run"] is True and res["ok"] is True and res["command"].startswith("benchmarks/gpu_check.sh")
    assert res["device"]["name"].startswith("cpu")
    parts = res["parts"]
    assert list(parts) == ["synthetic", "predgen", "step_cost", "psf_base"]
    for name, part in parts.items():
        assert part["ok"] is True, (name, part.get("error"))
        assert _finite(part["wall_s"]) and part["wall_s"] > 0

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
