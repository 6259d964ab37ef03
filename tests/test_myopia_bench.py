"""The myopia benchmark drivers, as --quick smokes: the p grid (benchmarks/myopia_synthetic.py) and the horizon
sweep (benchmarks/myopia_horizon.py) run the real CLI, collect JSON with the paper's numbers beside ours, and
skip finished runs when rerun."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collect_in_process(script: str, *args: str) -> None:
    """A script's ``main(argv)`` in this process (collecting needs no fresh interpreter: seconds saved)."""
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(list(args))


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_p_grid_driver_quick(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    _run("myopia_synthetic.py", "--quick", "--runs", str(runs), "--out", str(out))
    res = json.loads((out / "myopia_synthetic.json").read_text())
    for key in ("p=1", "p=0.1"):
        row = res[key]
        assert {"vanilla", "myopic", "predict_zero", "myopic_minus_vanilla"} <= row.keys()
        assert "vanilla_probe_sum_r2_last_layer" in row
    assert res["p=0.1"]["paper_myopic"] == 0.966 and res["paper"]["myopic"]["p=0.01"] == 1.103
    before = {d.name: (d / "results.json").stat().st_mtime for d in runs.iterdir() if d.is_dir()}
    _collect_in_process("myopia_synthetic.py", "--quick", "--runs", str(runs), "--out", str(out))  # nothing retrains
    assert before == {d.name: (d / "results.json").stat().st_mtime for d in runs.iterdir() if d.is_dir()}
    shutil.rmtree(runs)  # a fresh machine: the archived records alone give the same rows
    _collect_in_process("myopia_synthetic.py", "--quick", "--collect-only", "--runs", str(runs), "--out", str(out))
    again = json.loads((out / "myopia_synthetic.json").read_text())
    assert all(again[k] == res[k] for k in ("p=1", "p=0.1", "model_config", "run_commands", "eval_curves"))


def test_horizon_driver_quick(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    _run("myopia_horizon.py", "--quick", "--part", "synthetic", "--runs", str(runs), "--out", str(out))
    res = json.loads((out / "myopia_horizon.json").read_text())
    per = res["synthetic"]["per_k"]
    assert list(per) == ["0", "2", "T"]
    assert per["T"]["minus_vanilla"] == 0.0 and per["0"]["fraction_recovered"] == 0.0
    assert res["synthetic"]["predict_zero"] > 1.0 and res["lm"]["per_k"] == {}
    assert (out / "myopia_horizon.png").stat().st_size > 1000
    cfg = (runs / "synthetic-k=2-s0" / "config.yaml").read_text()
    assert "horizon: 2" in cfg
    shutil.rmtree(runs)  # a fresh machine: the archived records alone give the same sweep
    _collect_in_process("myopia_horizon.py", "--quick", "--part", "synthetic", "--collect-only", "--runs", str(runs),
                        "--out", str(out))
    again = json.loads((out / "myopia_horizon.json").read_text())
    assert again["synthetic"] == res["synthetic"] and again["train_wall_s"] == res["train_wall_s"]


def test_pythia_lm_driver_quick(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    (out / "myopia_families.json").write_text(json.dumps({"families": {}}))
    _run("myopia_pythia_lm.py", "--quick", "--runs", str(runs), "--out", str(out))
    res = json.loads((out / "myopia_pythia_lm.json").read_text())
    assert res["model"]["model_type"] == "gpt_neox" and res["model"]["use_parallel_residual"] is True
    assert set(res["per_seed"]) == {"vanilla", "local", "detach_hidden", "zero_past"}
    v, loc = res["per_seed"]["vanilla"]["0"], res["per_seed"]["local"]["0"]
    assert res["local_myopic_bonus_paired"]["mean"] == v - loc  # the paper's definition
    assert json.loads((out / "myopia_families.json").read_text())["pythia_lm"]["gap_paired"]["seeds"] == [0]
    shutil.rmtree(runs)  # a fresh machine: the committed archive alone gives the same numbers
    _collect_in_process("myopia_pythia_lm.py", "--collect-only", "--runs", str(runs), "--out", str(out))
    again = json.loads((out / "myopia_pythia_lm.json").read_text())
    assert again["per_seed"] == res["per_seed"] and again["model"] == res["model"]
